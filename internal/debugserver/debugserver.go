// Package debugserver serves Go's runtime profiles (net/http/pprof) on an
// address of their own, to find where a running process spends its CPU and
// memory. The binaries start it only when PPROF_ADDR is set. Keep that
// address private (loopback, or a network only operators reach): profiles
// reveal code paths and timings, and a CPU profile costs the process time.
package debugserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Server is a running profile server.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Start listens on addr and serves /debug/pprof/ until Close. (Importing
// net/http/pprof also registers its handlers on http.DefaultServeMux;
// no binary serves that mux, so they are reachable only here.)
func Start(addr string, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on PPROF_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("profile server stopped", "error", err.Error())
		}
	}()
	log.Warn("serving runtime profiles", "pprof_addr", ln.Addr().String(), "hint", "keep PPROF_ADDR private")
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server at once, cutting off profiles being taken.
func (s *Server) Close() error { return s.srv.Close() }
