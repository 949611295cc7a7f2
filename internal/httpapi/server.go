// Package httpapi is the HTTP face of the service: the checkout and
// shipment API, template previews, health checks and metrics. routes.go lists every endpoint.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
)

// Check is one dependency /readyz asks after.
type Check struct {
	Name string
	Ping func(ctx context.Context) error
}

// Deps is what the API is built from.
type Deps struct {
	Log       *slog.Logger
	Orders    *order.Service
	Templates *notify.Templates
	Checks    []Check               // asked by /readyz
	Admin     Admin                 // the operator API under /admin/v1
	Registry  prometheus.Registerer // receives the HTTP metrics
	Gatherer  prometheus.Gatherer   // what /metrics exposes
	Tracer    trace.Tracer          // one span per request; nil records none
}

// NewServer returns the API's handler.
func NewServer(d Deps) http.Handler {
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sekali_http_request_duration_seconds",
		Help:    "Time to answer an HTTP request, by method, route and status code.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"method", "route", "code"})
	d.Registry.MustRegister(latency)

	r := chi.NewRouter()
	tracer := d.Tracer
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	r.Use(observe(d.Log, latency, tracer))
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: "No such endpoint."})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem{Type: typeMethod, Status: http.StatusMethodNotAllowed, Detail: "This endpoint does not take " + r.Method + "."})
	})
	addRoutes(r, d, promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{}))
	return r
}

func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// handleReadyz answers 200 only when every dependency answers in time, so
// that a load balancer stops sending checkouts that could not be recorded.
func handleReadyz(checks []Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, result := http.StatusOK, map[string]string{}
		for _, c := range checks {
			if err := c.Ping(ctx); err != nil {
				status = http.StatusServiceUnavailable
				result[c.Name] = err.Error()
				continue
			}
			result[c.Name] = "ok"
		}
		writeJSON(w, status, result)
	})
}
