package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
)

// The worker against a real server we did not write (the provider alone
// is tested in internal/smtp): our own sink once forgave envelope paths
// without angle brackets, which Mailpit refuses (501 5.5.4), and every
// e-mail failed in production.
func TestWorkerDeliversThroughMailpit(t *testing.T) {
	t.Parallel()
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{})
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{provider: smtpAt(t, mp.Host, mp.Port)})
	d := e.checkout(t, "ana@example.com")
	if err := process(context.Background(), w, d); err != nil {
		t.Fatal(err)
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusSent {
		t.Fatalf("delivery %s (%s)", got.Status, got.LastError)
	}
	msgs := mp.ByRecipient(t, "ana@example.com")
	if len(msgs) != 1 {
		t.Fatalf("%d messages at Mailpit, want 1", len(msgs))
	}
	if msgs[0].MessageID != got.MessageID || got.MessageID != mail.MessageID(d.IdempotencyKey, mailDomain) {
		t.Errorf("Message-ID at Mailpit %q, stored %q", msgs[0].MessageID, got.MessageID)
	}
	h := mp.Headers(t, msgs[0].ID)
	if h.Get("Idempotency-Key") != d.IdempotencyKey {
		t.Errorf("Idempotency-Key header %q", h.Get("Idempotency-Key"))
	}
	// EHLO carries the machine's name, not the sender's domain.
	if r := strings.Join(h["Received"], " "); !strings.Contains(r, "worker-7.shop.example") {
		t.Errorf("Received %q does not name our EHLO", r)
	}
}

// While Mailpit refuses our sender, deliveries wait: nothing is failed or
// used up, the worker stops trying and probes, and the delivery goes out
// once the probe gets through.
func TestProviderRefusingUsMakesDeliveriesWait(t *testing.T) {
	t.Parallel()
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{Chaos: true})
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{provider: smtpAt(t, mp.Host, mp.Port)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	mp.SetChaos(t, testenv.MailpitChaos{Sender: &testenv.MailpitTrigger{ErrorCode: 550, Probability: 100}})
	first, second := e.checkout(t, "ana@example.com"), e.checkout(t, "budi@example.com")
	err := w.ProcessTask(ctx, queue.NewDeliverTask(first))
	if err == nil || worker.IsFailure(err) {
		t.Fatalf("refused sender: %v, want a wait that is not a failure", err)
	}
	if delay := worker.RetryDelay(0, err, nil); delay < 100*time.Millisecond || delay > time.Second {
		t.Errorf("wait %v, want about the probe interval (100ms) to 6 of them", delay)
	}
	if got := e.delivery(t, first.IdempotencyKey); got.Status != notify.StatusPending || got.Attempts != 0 || !strings.Contains(got.LastError, "550") {
		t.Errorf("after the refusal: %s, %d attempts, %q", got.Status, got.Attempts, got.LastError)
	}
	if up := e.counter(t, "sekali_provider_up"); up != 0 {
		t.Errorf("sekali_provider_up = %v while refused", up)
	}
	// With the breaker open, the next task makes no attempt at all.
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(second)); err == nil || worker.IsFailure(err) {
		t.Fatalf("second task: %v, want handed back", err)
	}
	if got := e.delivery(t, second.IdempotencyKey); got.Attempts != 0 || got.LastError != "" {
		t.Errorf("second delivery was tried: %+v", got)
	}
	if n := e.counter(t, "sekali_tasks_handed_back_total", "reason", "provider_unavailable"); n != 1 {
		t.Errorf("handed back %v, want 1", n)
	}

	go w.WatchProvider(ctx, 100*time.Millisecond)
	testenv.WaitFor(t, "the admin view to show the reason", 5*time.Second, func() bool {
		states, err := notify.ProviderStates(ctx, e.rdb, e.redis.Queue)
		return err == nil && len(states) == 1 && !states[0].Up && strings.Contains(states[0].Reason, "550")
	})
	time.Sleep(300 * time.Millisecond) // a few probes that fail
	if up := e.counter(t, "sekali_provider_up"); up != 0 {
		t.Fatal("a probe passed while MAIL FROM is still refused")
	}
	mp.ClearChaos(t)
	testenv.WaitFor(t, "a probe to close the breaker", 5*time.Second, func() bool { return e.counter(t, "sekali_provider_up") == 1 })
	for _, d := range []notify.Delivery{first, second} {
		if err := process(ctx, w, d); err != nil {
			t.Fatal(err)
		}
		if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent || got.Attempts != 1 {
			t.Errorf("%s: %s with %d attempts, want sent with 1", d.Recipient, got.Status, got.Attempts)
		}
	}
	if n := mp.Count(t); n != 2 {
		t.Errorf("%d messages at Mailpit, want 2", n)
	}
	if !strings.Contains(e.logs.String(), "provider refuses us") || !strings.Contains(e.logs.String(), "sending resumes") {
		t.Errorf("the outage and the recovery were not logged:\n%s", e.logs.String())
	}
}
