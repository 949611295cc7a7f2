package testenv

import (
	"context"
	"io"
	"testing"
	"time"
)

// RunFunc is a binary's run, as cmd/<binary>/main.go declares it: main
// calls it, and its tests call it directly.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Run is a binary's run going in a goroutine of the test, the in-process
// counterpart of Process.
type Run struct {
	// Logs is what run wrote to stdout, its JSON log.
	Logs *Buffer

	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// StartRun calls run with args and exactly env as its environment in a
// goroutine, keeping its stdout in Logs and discarding its stderr. When
// the test ends its context is cancelled and run is waited for.
func StartRun(t testing.TB, run RunFunc, env map[string]string, args ...string) *Run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Run{Logs: &Buffer{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = run(ctx, args, func(k string) string { return env[k] }, r.Logs, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// Done is closed when run has returned; Err is then what it returned.
func (r *Run) Done() <-chan struct{} { return r.done }

// Err is what run returned, valid once Done is closed.
func (r *Run) Err() error { return r.err }

// Stop cancels run's context and returns what run returned, failing the
// test if it has not returned within timeout.
func (r *Run) Stop(t testing.TB, timeout time.Duration) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(timeout):
		t.Fatalf("run did not return within %v of cancel:\n%s", timeout, r.Logs)
		return nil
	}
}

// WaitLog waits for a JSON log line whose msg is msg and returns the value
// of field in it, failing the test if run returns first or timeout passes.
func (r *Run) WaitLog(t testing.TB, msg, field string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if v, ok := r.Logs.Field(msg, field); ok {
			return v
		}
		select {
		case <-r.done:
			t.Fatalf("run returned (%v) before logging %q:\n%s", r.err, msg, r.Logs)
		case <-deadline:
			t.Fatalf("run did not log %q within %v:\n%s", msg, timeout, r.Logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// RunUntilLogged runs run until it returns or logs msg (a JSON log line's
// msg). started is true if it logged it; run is then stopped and err is
// what it returned. Neither within 30 s fails the test.
func RunUntilLogged(t testing.TB, run RunFunc, env map[string]string, msg string, args ...string) (started bool, err error) {
	t.Helper()
	r := StartRun(t, run, env, args...)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-r.done:
			return false, r.err
		case <-deadline:
			t.Fatalf("run neither returned nor logged %q within 30s:\n%s", msg, r.Logs)
		case <-time.After(10 * time.Millisecond):
		}
		if _, ok := r.Logs.Field(msg, "msg"); ok {
			return true, r.Stop(t, 30*time.Second)
		}
	}
}
