package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/textrule"
	"github.com/sekali-dev/sekali/internal/tracing"
)

type ctxKey int

const requestInfoKey ctxKey = iota

// requestInfo travels in the request context so that handlers can add to
// the request's single log line.
type requestInfo struct {
	id    string
	err   error
	attrs []slog.Attr
}

func requestIDFrom(ctx context.Context) string {
	if ri, ok := ctx.Value(requestInfoKey).(*requestInfo); ok {
		return ri.id
	}
	return ""
}

// setLogError records the error that the request's log line reports.
func setLogError(ctx context.Context, err error) {
	if ri, ok := ctx.Value(requestInfoKey).(*requestInfo); ok {
		ri.err = err
	}
}

// addLogAttrs adds fields, such as order_id, to the request's log line.
func addLogAttrs(ctx context.Context, attrs ...slog.Attr) {
	if ri, ok := ctx.Value(requestInfoKey).(*requestInfo); ok {
		ri.attrs = append(ri.attrs, attrs...)
	}
}

// statusRecorder remembers what the handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += n
	return n, err
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// noStore marks every answer of the routes it wraps, refusals and
// errors included, as one that no cache (a browser's, a proxy's) may
// keep: the routes that answer with secrets (an order's access token, a
// new API key or webhook secret) or personal data (an order, a
// notification, a delivery, a suppression). routes.go applies it by
// group, so that a route added there is covered without a line of its
// own.
func noStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// storableText refuses a request whose path, query or form holds text
// that PostgreSQL's text type refuses (textrule.Storable: NUL, invalid
// UTF-8), before any handler reads it, so that no statement of any route
// meets it: such a path names nothing (404), such a query or form is
// not valid (400). JSON bodies are held to the rule by their decoder
// (jsonbody.go), a key's token by apikey.
func storableText(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !textrule.Storable(r.URL.Path) {
			writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound,
				Detail: "No resource has NUL or invalid UTF-8 in its name."})
			return
		}
		if name, ok := unstorableValue(r.URL.Query()); ok {
			writeProblem(w, r, problem{Type: typeInvalidQuery, Status: http.StatusBadRequest, Detail: "The query holds NUL or invalid UTF-8.",
				Errors: []fieldError{{Pointer: name, Detail: "must be UTF-8 without NUL"}}})
			return
		}
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" {
			_ = r.ParseForm() // what it cannot parse, PostFormValue does not return either
			if name, ok := unstorableValue(r.PostForm); ok {
				writeProblem(w, r, problem{Type: typeInvalidBody, Status: http.StatusBadRequest, Detail: "The form holds NUL or invalid UTF-8.",
					Errors: []fieldError{{Pointer: name, Detail: "must be UTF-8 without NUL"}}})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// unstorableValue names the first key of v that is not textrule.Storable,
// or whose values are not.
func unstorableValue(v url.Values) (string, bool) {
	for name, values := range v {
		if !textrule.Storable(name) {
			return name, true
		}
		for _, s := range values {
			if !textrule.Storable(s) {
				return name, true
			}
		}
	}
	return "", false
}

// observe gives every request an id (the caller's X-Request-Id when it is
// sane), turns a panic into a 500, and writes exactly one log line and one
// latency observation per request.
func observe(log *slog.Logger, latency *prometheus.HistogramVec, tracer trace.Tracer) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ri := &requestInfo{id: r.Header.Get("X-Request-Id")}
			if !textrule.Token(ri.id, 64) {
				ri.id = newRequestID()
			}
			w.Header().Set("X-Request-Id", ri.id)
			// No answer of ours is anything but what its Content-Type says.
			w.Header().Set("X-Content-Type-Options", "nosniff")
			ctx := tracing.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer.Start(ctx, methodLabel(r.Method), trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", methodLabel(r.Method)), attribute.String("sekali.request_id", ri.id)))
			defer span.End()
			r = r.WithContext(context.WithValue(ctx, requestInfoKey, ri))
			rec := &statusRecorder{ResponseWriter: w}

			defer func() {
				if p := recover(); p != nil {
					if p == http.ErrAbortHandler {
						panic(p)
					}
					ri.err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
					if rec.status == 0 {
						writeProblem(rec, r, problem{Type: typeInternal, Status: http.StatusInternalServerError})
					}
				}
				route := "unmatched"
				if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
					route = rc.RoutePattern()
				}
				if rec.status == 0 {
					rec.status = http.StatusOK
				}
				elapsed := time.Since(start)
				method := methodLabel(r.Method)
				latency.WithLabelValues(method, route, strconv.Itoa(rec.status)).Observe(elapsed.Seconds())
				span.SetName(method + " " + route)
				span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", rec.status))
				if rec.status >= 500 {
					span.SetStatus(codes.Error, http.StatusText(rec.status))
				}

				level := slog.LevelInfo
				attrs := []slog.Attr{
					slog.String("request_id", ri.id),
					slog.String("method", method),
					slog.String("route", route),
					slog.Int("status", rec.status),
					slog.Int("bytes", rec.bytes),
					slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
				}
				if sc := span.SpanContext(); sc.IsValid() {
					attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
				}
				attrs = append(attrs, ri.attrs...)
				if ri.err != nil {
					level = slog.LevelError
					attrs = append(attrs, slog.String("error", ri.err.Error()))
				}
				log.LogAttrs(r.Context(), level, "http request", attrs...)
			}()
			next.ServeHTTP(rec, r)
		})
	}
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// LogHandler wraps the API's log handler so that every line logged with a
// request's context — the request line and anything the domain logs on
// its behalf, such as a failed enqueue — carries its request_id.
func LogHandler(h slog.Handler) slog.Handler { return requestIDHandler{h} }

type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if ri, ok := ctx.Value(requestInfoKey).(*requestInfo); ok && r.Message != "http request" {
		r.AddAttrs(slog.String("request_id", ri.id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
