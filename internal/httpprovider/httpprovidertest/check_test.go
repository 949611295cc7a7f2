package httpprovidertest_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	"github.com/sekali-dev/sekali/internal/mail"
)

// careless sends whatever its hand-over says, with no deadline.
type careless struct{ sent atomic.Int64 }

func (p *careless) Send(_ context.Context, _ mail.Message, handOver func() error) (string, error) {
	_ = handOver()
	p.sent.Add(1)
	return "id", nil
}

func (p *careless) Probe(context.Context) error { return nil }

// recorder is a T that records what a check reports; Fatalf ends the
// check's goroutine, as testing.T's does.
type recorder struct{ errors []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// reports runs check and returns what it reported.
func reports(check func(httpprovidertest.T)) []string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.errors
}

// The checks catch a provider that sends after a refused or stalled
// hand-over.
func TestChecksCatchACarelessProvider(t *testing.T) {
	t.Parallel()
	p := &careless{}
	sent := func() int { return int(p.sent.Load()) }
	if got := reports(func(r httpprovidertest.T) { httpprovidertest.RefusedHandOverSendsNothing(r, p, mail.Message{}, sent) }); len(got) == 0 {
		t.Error("a send after a refused hand-over passed")
	}
	if got := reports(func(r httpprovidertest.T) {
		httpprovidertest.StallAfterHandOverSendsNothing(r, p, mail.Message{}, time.Millisecond, sent)
	}); len(got) == 0 {
		t.Error("a send after a stalled hand-over passed")
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	var q httpprovidertest.Faults[int]
	q.Add("messages", 1, 2)
	if f := q.Begin("events"); f != nil {
		t.Errorf("events: fault %d, want none", *f)
	}
	for _, want := range []int{1, 2} {
		if f := q.Begin("messages"); f == nil || *f != want {
			t.Errorf("messages: fault %v, want %d", f, want)
		}
	}
	if f := q.Begin("messages"); f != nil {
		t.Errorf("messages: fault %d after the queue ran out", *f)
	}
	if q.Requests("messages") != 3 || q.Requests("events") != 1 || q.Requests("domains") != 0 {
		t.Errorf("requests: %d messages, %d events, %d domains; want 3, 1, 0", q.Requests("messages"), q.Requests("events"), q.Requests("domains"))
	}
}
