package debugserver

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestServesProfilesUntilShutdown(t *testing.T) {
	s, err := Start("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + s.Addr() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("goroutine profile: status %d, body %.200q", res.StatusCode, body)
	}
	// The CPU profile, the one bench -profile takes: gzip-compressed
	// protocol buffers.
	res, err = http.Get("http://" + s.Addr() + "/debug/pprof/profile?seconds=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		t.Fatalf("CPU profile: status %d, %d bytes starting %x, want a gzip stream", res.StatusCode, len(body), body[:min(len(body), 4)])
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if res, err := http.Get("http://" + s.Addr() + "/debug/pprof/"); err == nil {
		res.Body.Close()
		t.Fatal("the profile server still answers after Close")
	}
}

func TestRefusesAnAddressInUse(t *testing.T) {
	s, err := Start("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Start(s.Addr(), slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "PPROF_ADDR") {
		t.Fatalf("second Start on %s: %v, want an error naming PPROF_ADDR", s.Addr(), err)
	}
}
