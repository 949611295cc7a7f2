// Package httpapi is the HTTP face of the service: the checkout and
// shipment API, template previews, health checks and metrics. routes.go lists every endpoint.
package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/metric"
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
	Templates *mailtemplate.Templates
	// Keys are the shop's backend's API keys (*apikey.Service). With
	// Orders.Public set (CHECKOUT_MODE=public), POST /v1/orders may also
	// be called without one, by a storefront's browsers, under those rules.
	Keys       keyChecker
	RateLimits RateLimits              // zero: no limits
	Checks     []Check                 // asked by /readyz
	Webhooks   map[string]mail.Webhook // by provider name: the providers whose events POST /v1/webhooks/{provider} takes
	Admin      Admin                   // the operator API under /admin/v1
	Registry   prometheus.Registerer   // receives the HTTP metrics (served on METRICS_ADDR, not here)
	Tracer     trace.Tracer            // one span per request; nil records none
	// MaxInFlight bounds the requests handled at once (0: no bound);
	// one more is refused with 503 at once rather than queued, so that
	// overload costs neither memory nor the latency of the requests
	// already admitted. /healthz and /readyz are never refused. A request
	// takes its place only once its body has arrived (BodyTimeout).
	MaxInFlight int
	// BodyTimeout is how long a request's body may take to arrive,
	// counted from the end of its headers (0: only the server's
	// ReadTimeout); a body that takes longer is answered 408. A client
	// that sends slowly holds a connection, never one of MaxInFlight's
	// places.
	BodyTimeout time.Duration
	// UnsubscribeSecret verifies the one-click unsubscribe links of
	// subscription templates (UNSUBSCRIBE_SECRET, the workers' too); ""
	// answers every link 404.
	UnsubscribeSecret string
	// UnsubscribeTTL is how long after its issue day a link works
	// (UNSUBSCRIBE_TOKEN_TTL); 0 is mail.DefaultUnsubscribeTTL.
	UnsubscribeTTL time.Duration
}

// NewServer returns the API's handler.
func NewServer(d Deps) http.Handler {
	latency := metric.HistogramVec(d.Registry, "sekali_http_request_duration_seconds", "Time to answer an HTTP request, by method, route and status code.",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}, []string{"method", "route", "code"})
	hooks := newWebhookMetrics(d.Registry, d.Webhooks)

	r := chi.NewRouter()
	tracer := d.Tracer
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	admit := newAdmission(d.MaxInFlight)
	d.Checks = append(slices.Clip(d.Checks), Check{Name: "api", Ping: admit.ping})
	r.Use(observe(d.Log, latency, tracer))
	r.Use(bodyFirst(d.BodyTimeout))
	r.Use(storableText)
	r.Use(admit.shed)
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

// admission admits at most n requests at once (none when n is 0); the
// next is answered 503 with Retry-After. An open-loop flood beyond what
// PostgreSQL takes would otherwise pile up requests, each holding its
// buffers, until the process's memory and every admitted request's
// latency go with them.
type admission struct {
	slots  chan struct{}
	shedAt atomic.Int64 // when a request was last refused, Unix nanoseconds
}

func newAdmission(n int) *admission {
	a := &admission{}
	if n > 0 {
		a.slots = make(chan struct{}, n)
	}
	return a
}

// overloadMemory is how long /readyz says "overloaded" after a request
// was refused: longer than a load balancer's usual probe interval, so
// that the probe sees a flood between its probes.
const overloadMemory = 10 * time.Second

// ping is /readyz's check of the API itself: it fails while every place
// is taken and for overloadMemory after a request was refused.
func (a *admission) ping(context.Context) error {
	if a.slots == nil {
		return nil
	}
	if len(a.slots) == cap(a.slots) {
		return fmt.Errorf("%w: %d requests in flight", errOverloaded, cap(a.slots))
	}
	if at := a.shedAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < overloadMemory {
		return fmt.Errorf("%w: a request was refused %s ago", errOverloaded, time.Since(time.Unix(0, at)).Round(time.Second))
	}
	return nil
}

func (a *admission) shed(next http.Handler) http.Handler {
	if a.slots == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case a.slots <- struct{}{}:
			defer func() { <-a.slots }()
			next.ServeHTTP(w, r)
		default:
			a.shedAt.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			writeProblem(w, r, problem{Type: typeOverloaded, Status: http.StatusServiceUnavailable,
				Detail: fmt.Sprintf("The API is handling %d requests already; retry in a second.", cap(a.slots))})
		}
	})
}

// bodyFirst reads a request's whole body, up to what its route takes
// (one byte more, so the handler still sees it is too large), before the
// request goes on to take a place (admission.shed): a client that sends
// a byte a second holds its own connection, not a place others need.
// With a timeout, the body must have arrived that long after the
// headers, or the answer is 408 and the connection is closed. A body
// whose declared length is over the limit is refused 413 before a byte
// of it is read, so that a client that asked to (Expect: 100-continue)
// gets the refusal instead of "100 Continue" (net/http sends that on
// the first read) and sends nothing more.
func bodyFirst(timeout time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body == nil || r.Body == http.NoBody {
				next.ServeHTTP(w, r)
				return
			}
			limit := int64(maxBodyBytes)
			if strings.HasPrefix(r.URL.Path, "/v1/webhooks/") {
				limit = maxWebhookBytes
			}
			if r.ContentLength > limit {
				w.Header().Set("Connection", "close") // the body is not read: the connection cannot carry another request
				writeProblem(w, r, problem{Type: typeBodyTooLarge, Status: http.StatusRequestEntityTooLarge,
					Detail: fmt.Sprintf("The body must be at most %d bytes.", limit)})
				return
			}
			rc := http.NewResponseController(w)
			if timeout > 0 {
				_ = rc.SetReadDeadline(time.Now().Add(timeout)) // a connection that cannot have one keeps the server's
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
			if timeout > 0 {
				_ = rc.SetReadDeadline(time.Time{})
			}
			if err != nil {
				w.Header().Set("Connection", "close")
				writeProblem(w, r, problem{Type: typeBodyTimeout, Status: http.StatusRequestTimeout,
					Detail: fmt.Sprintf("The body did not arrive within %s of the headers; send it at once.", timeout)})
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
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

// errOverloaded is the API's own check failing: every place taken, or a
// request refused lately.
var errOverloaded = errors.New("overloaded")

// readiness is /readyz: 200 only when every dependency answers in time,
// so that a load balancer stops sending checkouts that could not be
// recorded. Anyone may ask, so the answer names only which dependency is
// not ready ("unavailable", or "overloaded" for the API itself); the
// error goes to the log, once when a check starts failing and once when
// it passes again, not with every probe.
type readiness struct {
	log    *slog.Logger
	checks []Check

	mu      sync.Mutex
	failing map[string]bool // by check name: failed when last asked
}

func handleReadyz(log *slog.Logger, checks []Check) http.Handler {
	rd := &readiness{log: log, checks: checks, failing: map[string]bool{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, result := http.StatusOK, map[string]string{}
		for _, c := range rd.checks {
			err := c.Ping(ctx)
			rd.note(c.Name, err)
			switch {
			case err == nil:
				result[c.Name] = "ok"
			case errors.Is(err, errOverloaded):
				status, result[c.Name] = http.StatusServiceUnavailable, "overloaded"
			default:
				status, result[c.Name] = http.StatusServiceUnavailable, "unavailable"
			}
		}
		writeJSON(w, status, result)
	})
}

// note logs a check's error when it starts failing, and that it passes
// again when it does.
func (rd *readiness) note(name string, err error) {
	rd.mu.Lock()
	was := rd.failing[name]
	rd.failing[name] = err != nil
	rd.mu.Unlock()
	switch {
	case err != nil && !was:
		rd.log.Warn("not ready", "check", name, "error", err.Error())
	case err == nil && was:
		rd.log.Info("ready again", "check", name)
	}
}
