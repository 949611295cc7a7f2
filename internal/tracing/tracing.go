// Package tracing sets up OpenTelemetry tracing for a binary: spans are
// exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set, and
// not recorded at all otherwise. Export is batched in the background, so
// a slow or absent collector never blocks a request or a send.
package tracing

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Propagator carries trace context across process boundaries: in HTTP
// headers and in asynq task headers (W3C traceparent).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Setup returns the tracer provider for service and a function that
// flushes and stops it. getenv reads OTEL_EXPORTER_OTLP_ENDPOINT; the
// exporter itself honours the other standard OTEL_EXPORTER_OTLP_* variables.
func Setup(ctx context.Context, service string, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service))),
	)
	return tp, tp.Shutdown, nil
}
