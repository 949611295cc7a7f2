// Package opsserver serves what Prometheus and health checks ask of a
// process on a listener of its own (METRICS_ADDR), apart from any public
// traffic: /metrics, and /healthz that answers 200 only while the checks
// it was given pass. The worker and the reconciler serve nothing else.
package opsserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry with the Go runtime (go_*) and process
// (process_*) collectors that every binary exposes besides its own.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Check is one thing /healthz asks after, e.g. that Redis answers.
type Check struct {
	Name string
	Ping func(ctx context.Context) error
}

// Server serves /metrics and /healthz.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen listens on addr; Serve then answers until Shutdown.
func Listen(addr string, reg prometheus.Gatherer, checks ...Check) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on METRICS_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /healthz", Health(checks...))
	return &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}, nil
}

// Health answers 200 {"status":"ok"} while every check passes within two
// seconds, and 503 naming each one that does not.
func Health(checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, body := http.StatusOK, map[string]string{"status": "ok"}
		for _, c := range checks {
			if err := c.Ping(ctx); err != nil {
				status, body["status"], body[c.Name] = http.StatusServiceUnavailable, "unavailable", err.Error()
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	})
}

// Addr is where the server listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve answers until Shutdown, and then returns nil.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve metrics: %w", err)
	}
	return nil
}

// Shutdown stops the server, letting requests in flight finish within ctx.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close stops the server at once (for a server that was never served).
func (s *Server) Close() error { return s.srv.Close() }
