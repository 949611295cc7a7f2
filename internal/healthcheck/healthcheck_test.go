package healthcheck

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer healthy.Close()
	_, port, _ := net.SplitHostPort(healthy.Listener.Addr().String())
	if err := Probe(":" + port); err != nil {
		t.Errorf("healthy server: %v", err)
	}
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer sick.Close()
	if err := Probe(sick.Listener.Addr().String()); err == nil {
		t.Error("a 503 passed the healthcheck")
	}
	if err := Probe("127.0.0.1:1"); err == nil {
		t.Error("nothing listening passed the healthcheck")
	}
	if err := Probe("nonsense"); err == nil {
		t.Error("a malformed address passed")
	}
}
