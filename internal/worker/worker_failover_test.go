package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
)

// Failover: each attempt goes to the first provider that is up, and a
// delivery whose outcome at a provider is unknown goes nowhere else.

// refusingRelay is a second SMTP server that refuses our session (421
// 4.3.2 at MAIL FROM, as a relay does that is shutting down; a 4.7.x
// rate reply would be throttling, which is paced, not failed over)
// while down is set, and takes mail otherwise.
func refusingRelay(t *testing.T, down *atomic.Bool) *smtpsink.Server {
	t.Helper()
	s, err := smtpsink.Start(smtpsink.Config{OnMail: func(string) error {
		if down.Load() {
			return &gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 3, 2}, Message: "system not accepting network messages"}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// failoverWorker is a worker whose first provider, "primary", is a
// relay that refuses us while down is set, and whose second, "fallback",
// is the test's sink.
func (e *env) failoverWorker(t *testing.T, down *atomic.Bool) (*smtpsink.Server, testWorker) {
	t.Helper()
	primary := refusingRelay(t, down)
	return primary, e.worker(t, workerOpts{providers: []worker.NamedProvider{
		{Name: "primary", Provider: smtpAt(t, primary.Host(), primary.Port())},
		{Name: "fallback", Provider: e.smtp(t)},
	}})
}

// providersOf reads from d's history the provider of each event that
// names one, as "event@provider".
func providersOf(t *testing.T, e *env, d notify.Delivery) []string {
	t.Helper()
	events, err := notify.History(context.Background(), e.db.Pool, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range events {
		if _, p, ok := strings.Cut(string(ev.Detail), `"provider": "`); ok {
			p, _, _ = strings.Cut(p, `"`)
			out = append(out, ev.Event+"@"+p)
		}
	}
	return out
}

func TestFailoverWhileTheFirstProviderRefusesUs(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	var down atomic.Bool
	down.Store(true)
	primary, w := e.failoverWorker(t, &down)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.WatchProvider(ctx, 100*time.Millisecond)

	first := e.checkout(t, "first@example.com")
	e.deliver(t, w, first)
	if got := e.delivery(t, first.IdempotencyKey); got.Status != notify.StatusSent || got.Provider != "fallback" || got.Attempts != 1 {
		t.Errorf("while the first refuses us: %s through %q, %d attempts counted; want sent through fallback, 1", got.Status, got.Provider, got.Attempts)
	}
	if got := strings.Join(providersOf(t, e, first), " "); got != "retry_scheduled@primary handed_over@fallback sent@fallback" {
		t.Errorf("history %q: want the refusal at primary, then the hand-over and acceptance at fallback", got)
	}
	if up := e.counter(t, "sekali_provider_up", "provider", "primary"); up != 0 {
		t.Errorf("sekali_provider_up{provider=primary} = %v, want 0", up)
	}
	if up := e.counter(t, "sekali_provider_up", "provider", "fallback"); up != 1 {
		t.Errorf("sekali_provider_up{provider=fallback} = %v, want 1", up)
	}
	// The operator's view: each provider's state, over the live workers.
	testenv.WaitFor(t, "the queue's view of both providers", 5*time.Second, func() bool {
		q, err := e.ops.Queue(ctx)
		return err == nil && len(q.Provider.Providers) == 2 &&
			q.Provider.Providers[0].Name == "fallback" && q.Provider.Providers[0].Up &&
			q.Provider.Providers[1].Name == "primary" && !q.Provider.Providers[1].Up && strings.Contains(q.Provider.Providers[1].Reason, "421") &&
			strings.HasPrefix(q.Provider.Reason, "primary: ")
	})
	second := e.checkout(t, "second@example.com")
	e.deliver(t, w, second)
	if got := strings.Join(providersOf(t, e, second), " "); got != "handed_over@fallback sent@fallback" {
		t.Errorf("with the first's breaker open: %q, want straight to fallback", got)
	}

	// Back: the probe closes its breaker, and mail goes to it again.
	down.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for e.counter(t, "sekali_provider_up", "provider", "primary") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first provider's breaker stayed open after it came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	third := e.checkout(t, "third@example.com")
	e.deliver(t, w, third)
	if got := e.delivery(t, third.IdempotencyKey); got.Provider != "primary" {
		t.Errorf("after the first came back: through %q, want primary", got.Provider)
	}
	if e.sink.Count() != 2 || primary.Count() != 1 {
		t.Errorf("%d e-mails at fallback, %d at primary; want 2 and 1: one per order", e.sink.Count(), primary.Count())
	}
}

// A delivery sent again under a provider's key after an unknown outcome
// there (the reconciler pinned it) waits for that provider, however long
// it is down, rather than going to another that would send a second
// copy.
func TestAPinnedDeliveryWaitsForItsProvider(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	var down atomic.Bool
	down.Store(true)
	primary, w := e.failoverWorker(t, &down)
	ctx := context.Background()
	d := e.checkout(t, "pinned@example.com")
	e.f.HandedOverTo(d, -time.Second, "primary") // the worker died; primary may have it
	stale, found, err := notify.GetStaleSending(ctx, e.db.Pool, d.ID)
	if err != nil || !found {
		t.Fatalf("no stale row: %v", err)
	}
	if ok, err := notify.ReconcileToPending(ctx, e.db.Pool, stale, "primary", true, "", "provider_dedupes", "primary refuses a second copy under its key", "test"); err != nil || !ok {
		t.Fatalf("reconcile the stale row: applied %v, %v", ok, err)
	}

	for range 3 { // primary refuses; then its breaker is open and fallback is up
		if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err == nil || worker.IsFailure(err) {
			t.Fatalf("a pinned delivery while its provider is down: %v, want a wait", err)
		}
	}
	got := e.delivery(t, d.IdempotencyKey)
	if e.sink.Count() != 0 || got.Status != notify.StatusPending || !got.ProviderPinned || got.Provider != "primary" {
		t.Fatalf("%d e-mails at fallback, row %s at %q pinned %v: want none, pending, pinned to primary",
			e.sink.Count(), got.Status, got.Provider, got.ProviderPinned)
	}
	// Once primary's breaker is open, the claim itself leaves the row
	// alone: one attempt (the refusal), not one per task.
	if got := strings.Join(providersOf(t, e, d), " "); got != "handed_over@primary reconciled@primary retry_scheduled@primary" {
		t.Errorf("history %q: want the dead worker's hand-over, the reconciler's decision, and one refusal at primary", got)
	}
	events, err := notify.History(ctx, e.db.Pool, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	claims := 0
	for _, ev := range events {
		if ev.Event == "claimed" {
			claims++
		}
	}
	if claims != 2 {
		t.Errorf("%d claims, want 2: the dead worker's and the one primary refused; the waiting tasks claim nothing", claims)
	}
	if !strings.Contains(e.logs.String(), `"pinned_to":"primary"`) {
		t.Error("no task line says what the delivery waits for")
	}

	down.Store(false)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.WatchProvider(wctx, 100*time.Millisecond)
	e.deliver(t, w, d)
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent || got.Provider != "primary" || primary.Count() != 1 || e.sink.Count() != 0 {
		t.Errorf("after primary came back: %s through %q, %d at primary, %d at fallback; want sent through primary alone",
			got.Status, got.Provider, primary.Count(), e.sink.Count())
	}
}

// A delivery pinned to a provider no worker sends through (taken out of
// PROVIDERS) can neither go out nor move: the operator's retry that
// keeps such a pin is refused, and a worker that meets one says so at
// WARN, counted, rather than waiting quietly until DELIVERY_MAX_AGE.
func TestADeliveryPinnedToAMissingProviderIsLoud(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	var down atomic.Bool
	primary, w := e.failoverWorker(t, &down)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.WatchProvider(ctx, 100*time.Millisecond)
	testenv.WaitFor(t, "the worker's providers in Redis", 5*time.Second, func() bool {
		states, err := notify.ProviderStates(ctx, e.rdb, e.redis.Queue)
		return err == nil && len(states) == 2
	})

	checked := e.f.HeldAt(e.checkout(t, "checked@example.com"), "postmark")
	if _, _, _, err := e.ops.Retry(ctx, checked.ID, "ops", "again", false); !errors.Is(err, notify.ErrPinnedUnreachable) || !strings.Contains(err.Error(), `"postmark"`) {
		t.Fatalf("a retry keeping a pin to a provider no worker has: %v, want refused, naming it", err)
	}
	if _, _, _, err := e.ops.Retry(ctx, checked.ID, "ops", "not in postmark's log", true); err != nil {
		t.Fatalf("the retry that lifts the pin: %v", err)
	}
	e.deliver(t, w, checked)
	if got := e.delivery(t, checked.IdempotencyKey); got.Status != notify.StatusSent || got.Provider != "primary" || primary.Count() != 1 {
		t.Errorf("unpinned: %s through %q, want sent through primary", got.Status, got.Provider)
	}

	stuck := e.f.Retried(e.f.HeldAt(e.checkout(t, "stuck@example.com"), "postmark"), false)
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(stuck)); err == nil || worker.IsFailure(err) {
		t.Fatalf("pinned to a provider this worker lacks: %v, want a wait", err)
	}
	if got := e.delivery(t, stuck.IdempotencyKey); got.Status != notify.StatusPending || e.sink.Count()+primary.Count() != 1 {
		t.Errorf("row %s, %d e-mails: want it pending and unsent", got.Status, e.sink.Count()+primary.Count())
	}
	if n := e.counter(t, "sekali_tasks_handed_back_total", "reason", "pinned_to_missing_provider"); n != 1 {
		t.Errorf("handed back as pinned to a missing provider: %v, want 1", n)
	}
	if !strings.Contains(e.logs.String(), `"level":"WARN","msg":"delivery attempt"`) || !strings.Contains(e.logs.String(), `"result":"pinned_to_missing_provider"`) {
		t.Error("no WARN task line for the delivery pinned to a missing provider")
	}
}

// A delivery pinned to a provider that keeps a second message under our
// key to one e-mail for a while (Resend: 24 h) is sent there again only
// within that while, counted from the earliest attempt whose outcome is
// unknown; past it, a second e-mail could be delivered, and it is held
// for an operator instead. The relay here stands for such a provider,
// with a window of an hour.
func TestPinnedDeliveryPastItsResendWindowIsHeld(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{maxAge: 24 * time.Hour, providers: []worker.NamedProvider{{Name: "relay", Provider: e.smtp(t), Resend: time.Hour}}})

	within := e.f.MaybeAccepted(e.checkout(t, "within@example.com"), "relay")
	within = e.f.Aged(within, 50*time.Minute)
	past := e.f.MaybeAccepted(e.checkout(t, "past@example.com"), "relay")
	past = e.f.Aged(past, 61*time.Minute)
	// A later unknown attempt does not restart the count: the earliest
	// may be the one the provider took.
	later := e.f.MaybeAccepted(e.checkout(t, "later@example.com"), "relay")
	later = e.f.MaybeAccepted(e.f.Aged(later, 61*time.Minute), "relay")
	for _, d := range []notify.Delivery{past, later} {
		if d.UnsettledSince == nil || time.Since(*d.UnsettledSince) < time.Hour {
			t.Fatalf("%s: unsettled since %v, want more than an hour ago", d.Recipient, d.UnsettledSince)
		}
	}

	e.deliver(t, w, within)
	if got := e.f.Get(within.ID); got.Status != notify.StatusSent {
		t.Errorf("within the window: %s, want sent", got.Status)
	}
	for _, d := range []notify.Delivery{past, later} {
		if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d)); !isSkipRetry(err) {
			t.Errorf("%s: %v, want SkipRetry", d.Recipient, err)
		}
		if got := e.f.Get(d.ID); got.Status != notify.StatusHeld || !strings.Contains(got.LastError, "second e-mail") {
			t.Errorf("%s past the window: %s, %q; want held, saying why", d.Recipient, got.Status, got.LastError)
		}
	}
	e.emails(t, 1, "only the delivery within its window is sent again")

	// A retry that keeps the pin (a bulk retry of held deliveries, which
	// checks no provider's log) is held again: the attempt is still unknown.
	e.f.Retried(e.f.Get(past.ID), false)
	if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(past)); !isSkipRetry(err) {
		t.Errorf("retried keeping the pin: %v, want SkipRetry", err)
	}
	if got := e.f.Get(past.ID); got.Status != notify.StatusHeld {
		t.Errorf("retried keeping the pin: %s, want held again", got.Status)
	}
	// The operator, having found nothing in the provider's log, retries
	// lifting the pin: it goes.
	e.f.Retried(e.f.Get(past.ID), true)
	e.deliver(t, w, past)
	if got := e.f.Get(past.ID); got.Status != notify.StatusSent || got.UnsettledSince != nil {
		t.Errorf("after the operator's retry with unpin: %s, unsettled since %v; want sent", got.Status, got.UnsettledSince)
	}
	e.emails(t, 2, "the one within its window, and the one the operator released")
}
