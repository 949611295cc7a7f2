// Package httpapi is the HTTP face of the service: the checkout and
// shipment API, template previews, health checks and metrics. routes.go lists every endpoint.
package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
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
	Log        *slog.Logger
	Orders     *order.Service
	Templates  *notify.Templates
	Keys       keyChecker            // the shop's backend's API keys (*apikey.Service)
	RateLimits RateLimits            // zero: no limits
	Checks     []Check               // asked by /readyz
	Webhooks   []Webhook             // the providers whose events POST /v1/webhooks/{provider} takes
	Admin      Admin                 // the operator API under /admin/v1
	Registry   prometheus.Registerer // receives the HTTP metrics (served on METRICS_ADDR, not here)
	Tracer     trace.Tracer          // one span per request; nil records none
	// MaxInFlight bounds the requests handled at once (0: no bound);
	// one more is refused with 503 at once rather than queued, so that
	// overload costs neither memory nor the latency of the requests
	// already admitted. /healthz and /readyz are never refused.
	MaxInFlight int
}

// NewServer returns the API's handler.
func NewServer(d Deps) http.Handler {
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sekali_http_request_duration_seconds",
		Help:    "Time to answer an HTTP request, by method, route and status code.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"method", "route", "code"})
	d.Registry.MustRegister(latency)
	hooks := newWebhookMetrics(d.Registry, d.Webhooks)

	r := chi.NewRouter()
	tracer := d.Tracer
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	r.Use(observe(d.Log, latency, tracer))
	r.Use(shed(d.MaxInFlight))
	r.Use(middleware.GetHead) // HEAD wherever GET is served
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: "No such endpoint."})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allowed := allowedMethods(r, req.URL.Path)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeProblem(w, req, problem{Type: typeMethod, Status: http.StatusMethodNotAllowed,
			Detail: "This endpoint takes " + strings.Join(allowed, ", ") + "."})
	})
	addRoutes(r, d, hooks)
	return r
}

// shed admits at most n requests at once; the next is answered 503 with
// Retry-After. An open-loop flood beyond what PostgreSQL takes would
// otherwise pile up requests, each holding its buffers, until the
// process's memory and every admitted request's latency go with them.
func shed(n int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if n <= 0 {
			return next
		}
		slots := make(chan struct{}, n)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
				next.ServeHTTP(w, r)
				return
			}
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
				next.ServeHTTP(w, r)
			default:
				w.Header().Set("Retry-After", "1")
				writeProblem(w, r, problem{Type: typeOverloaded, Status: http.StatusServiceUnavailable,
					Detail: fmt.Sprintf("The API is handling %d requests already; retry in a second.", n)})
			}
		})
	}
}

// methods are the request methods the API knows; any other is "other" in
// metrics and logs, so that a client cannot grow either with made-up ones.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// methodLabel is r's method if it is one of methods, else "other".
func methodLabel(method string) string {
	if slices.Contains(methods, method) {
		return method
	}
	return "other"
}

// allowedMethods lists the methods routes serves at path, for Allow.
func allowedMethods(routes chi.Routes, path string) []string {
	var out []string
	for _, m := range methods {
		if routes.Match(chi.NewRouteContext(), m, path) {
			out = append(out, m)
		}
	}
	if slices.Contains(out, http.MethodGet) && !slices.Contains(out, http.MethodHead) {
		out = append(out, http.MethodHead) // middleware.GetHead serves it
	}
	return out
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
