package httpapi_test

import (
	"context"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The checkout request and the worker's attempt are one trace: the trace
// context rides in the asynq task's headers.
func TestCheckoutAndDeliveryShareOneTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	s := setup(t, setupOpts{tracer: tp})

	sink := s.startWorker(t, tp.Tracer("worker"))

	res := s.postOrder(t, validCheckout, nil)
	var o order.Order
	res.decode(t, &o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sink.WaitForCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"POST /v1/orders": false, "checkout transaction": false, "enqueue delivery": false,
		"deliver notification": false, "claim": false, "render": false, "provider send": false, "record outcome": false}
	var spans tracetest.SpanStubs
	testenv.WaitFor(t, "every span of the checkout and its delivery", 10*time.Second, func() bool {
		spans = exp.GetSpans()
		for name := range want {
			if !slices.ContainsFunc(spans, func(sp tracetest.SpanStub) bool { return sp.Name == name }) {
				return false
			}
		}
		return true
	})
	var root string
	byName := map[string]tracetest.SpanStub{}
	for _, sp := range spans {
		byName[sp.Name] = sp
	}
	server, ok := byName["POST /v1/orders"]
	if !ok {
		t.Fatalf("no server span among %d spans", len(spans))
	}
	root = server.SpanContext.TraceID().String()
	for name := range want {
		sp, ok := byName[name]
		if !ok {
			t.Errorf("no %q span", name)
			continue
		}
		if got := sp.SpanContext.TraceID().String(); got != root {
			t.Errorf("span %q is in trace %s, the checkout in %s", name, got, root)
		}
	}
	if p := byName["deliver notification"].Parent; p.SpanID() != byName["enqueue delivery"].SpanContext.SpanID() {
		t.Errorf("the worker's span is not a child of the enqueue span")
	}
}
