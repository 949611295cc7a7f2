package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// The worker's connections to the provider: kept, reset, replaced.

func TestSMTPConnectionsAreReused(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	for _, email := range []string{"a1@example.com", "a2@example.com", "a3@example.com"} {
		if err := process(context.Background(), w, e.checkout(t, email)); err != nil {
			t.Fatal(err)
		}
	}
	if n, c := e.sink.Count(), e.sink.Connections(); n != 3 || c != 1 {
		t.Errorf("%d e-mails over %d connections, want 3 over 1", n, c)
	}
}

// A kept connection the server closes with 421 (idle timeout) is
// replaced, not reported as a failed attempt.
func TestKeptConnectionClosedWith421IsReplaced(t *testing.T) {
	t.Parallel()
	var idleTimeout atomic.Bool
	e := setup(t, smtpsink.Config{OnMail: func(string) error {
		if idleTimeout.CompareAndSwap(true, false) {
			return &gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 4, 2}, Message: "idle timeout"}
		}
		return nil
	}})
	w := e.worker(t, workerOpts{})
	ctx := context.Background()
	if err := process(ctx, w, e.checkout(t, "first@example.com")); err != nil {
		t.Fatal(err)
	}
	idleTimeout.Store(true)
	d := e.checkout(t, "second@example.com")
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err != nil {
		t.Fatalf("second delivery: %v", err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent || got.Attempts != 1 {
		t.Errorf("row: %+v", got)
	}
	if c := e.sink.Connections(); c != 2 {
		t.Errorf("%d connections, want the kept one and its replacement", c)
	}
}

// A refused message does not leave its connection mid-transaction for the
// next delivery.
func TestConnectionIsResetAfterARefusedMessage(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	refuse.Store(true)
	e := setup(t, smtpsink.Config{OnData: func(*smtpsink.Message) error {
		if refuse.CompareAndSwap(true, false) {
			return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 2, 1}, Message: "mailbox disabled"}
		}
		return nil
	}})
	w := e.worker(t, workerOpts{})
	ctx := context.Background()
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(e.checkout(t, "refused@example.com"))); !isSkipRetry(err) {
		t.Fatalf("refused message: %v", err)
	}
	d := e.checkout(t, "next@example.com")
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err != nil {
		t.Fatalf("next delivery: %v", err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent {
		t.Errorf("next delivery: %+v", got)
	}
	if c := e.sink.Connections(); c != 1 {
		t.Errorf("%d connections, want the one reused", c)
	}
}

// When every kept connection died with the server, the retry dials a
// fresh one instead of trying the next dead one.
func TestRetryAfterADeadKeptConnectionDials(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	e := setup(t, smtpsink.Config{
		OnMail: func(string) error {
			if refuse.CompareAndSwap(true, false) {
				return &gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 4, 2}, Message: "closing"}
			}
			return nil
		},
		DataDelay: func(*smtpsink.Message) time.Duration { return 100 * time.Millisecond },
	})
	p := e.smtp(t) // keeps up to two connections
	send := func(to string) error {
		_, err := p.Send(context.Background(), mail.Message{To: to, Subject: "s", Text: "t", MessageID: to}, func() error { return nil })
		return err
	}
	// Two sends at once leave two kept connections.
	var wg sync.WaitGroup
	for _, to := range []string{"k1@example.com", "k2@example.com"} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = send(to) }()
	}
	wg.Wait()
	if c := e.sink.Connections(); c != 2 {
		t.Fatalf("%d connections, want 2 kept", c)
	}
	refuse.Store(true)
	if err := send("k3@example.com"); err != nil {
		t.Fatalf("send after a 421 on a kept connection: %v", err)
	}
	if c := e.sink.Connections(); c != 3 {
		t.Errorf("%d connections, want a freshly dialled third", c)
	}
}
