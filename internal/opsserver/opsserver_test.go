package opsserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sekali-dev/sekali/internal/opsserver"
)

// /healthz tells the truth about what it was given to check; /metrics
// carries the Go and process collectors.
func TestHealthFollowsItsChecks(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	srv, err := opsserver.Listen("127.0.0.1:0", opsserver.NewRegistry(), opsserver.Check{Name: "redis", Ping: func(context.Context) error {
		if down.Load() {
			return errors.New("dial tcp 127.0.0.1:6379: connection refused")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	get := func(path string) (int, string) {
		res, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("healthy: %d %s", code, body)
	}
	down.Store(true)
	code, body := get("/healthz")
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(got["redis"], "refused") {
		t.Errorf("with Redis down: %d %s", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_resident_memory_bytes") {
		t.Errorf("/metrics: %d, %d bytes", code, len(body))
	}
}
