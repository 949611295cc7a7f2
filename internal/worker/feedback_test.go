package worker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
)

func (e *env) events(t *testing.T, d notify.Delivery, name string) int {
	t.Helper()
	_, events, err := e.ops.Get(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	return len(slices.DeleteFunc(events, func(ev notify.Event) bool { return ev.Event != name }))
}

// A hard bounce of a sent confirmation puts the address on the
// suppression list, once however often the provider repeats the event;
// the next e-mail to it is suppressed without a try, and an operator who
// lifts the suppression can send it.
func TestBounceSuppressesTheNextDelivery(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	ctx := context.Background()
	first := e.checkout(t, "Gone@Example.com")
	if err := process(ctx, w, first); err != nil {
		t.Fatal(err)
	}
	first = e.delivery(t, first.IdempotencyKey)
	if first.MessageID == "" {
		t.Fatal("a sent delivery has no Message-ID")
	}

	bounce := mail.Feedback{Provider: "postmark", EventID: "bounce-1", Kind: mail.FeedbackBounced,
		MessageID: first.MessageID, At: time.Now(), Detail: "550 5.1.1 no such user"}
	for i := range 3 { // providers retry webhooks
		out, err := e.ops.RecordFeedback(ctx, bounce)
		if err != nil {
			t.Fatal(err)
		}
		if out.DeliveryID != first.ID || out.Duplicate != (i > 0) || out.Suppressed != (i == 0) {
			t.Errorf("event #%d: %+v", i+1, out)
		}
	}
	if n := e.events(t, first, "bounced"); n != 1 {
		t.Errorf("%d bounced events in the history, want 1", n)
	}
	s, history, err := e.ops.Suppression(ctx, "gone@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != "bounce" || len(history) != 1 || history[0].Actor != "postmark" {
		t.Errorf("suppression %+v, history %+v", s, history)
	}

	second := e.checkout(t, "gone@example.com")
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(second)); err != nil && !isSkipRetry(err) {
		t.Fatal(err)
	}
	if got := e.delivery(t, second.IdempotencyKey); got.Status != notify.StatusSuppressed || got.Attempts != 0 {
		t.Fatalf("to a suppressed address: %s after %d attempts", got.Status, got.Attempts)
	}
	e.emails(t, 1, "(only the first)")

	if err := e.ops.Unsuppress(ctx, "gone@example.com", "customer fixed their mailbox, ticket 812", "ops@shop"); err != nil {
		t.Fatal(err)
	}
	if err := e.ops.Unsuppress(ctx, "gone@example.com", "again", "ops@shop"); !errors.Is(err, notify.ErrSuppressionNotFound) {
		t.Errorf("lifting a lifted suppression: %v", err)
	}
	if _, _, _, err := e.ops.Retry(ctx, second.ID, "ops@shop", "resend after the fix", false); err != nil {
		t.Fatal(err)
	}
	if err := process(ctx, w, second); err != nil {
		t.Fatal(err)
	}
	if got := e.delivery(t, second.IdempotencyKey); got.Status != notify.StatusSent || e.sink.Count() != 2 {
		t.Errorf("after the suppression was lifted: %s, %d e-mails", got.Status, e.sink.Count())
	}
}

// Only a permanent bounce or a complaint suppresses; delivery reports go
// into the history alone, and an event about a message this service
// never sent changes nothing.
func TestFeedbackThatDoesNotSuppress(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	ctx := context.Background()
	d := e.checkout(t, "budi@example.com")
	if err := process(ctx, e.worker(t, workerOpts{}), d); err != nil {
		t.Fatal(err)
	}
	d = e.delivery(t, d.IdempotencyKey)
	for _, kind := range []mail.FeedbackKind{mail.FeedbackDelivered, mail.FeedbackDeferred} {
		out, err := e.ops.RecordFeedback(ctx, mail.Feedback{Provider: "resend", EventID: string(kind), Kind: kind, MessageID: d.MessageID, At: time.Now()})
		if err != nil || out.Suppressed {
			t.Errorf("%s: %+v, %v", kind, out, err)
		}
		if n := e.events(t, d, string(kind)); n != 1 {
			t.Errorf("%d %s events in the history, want 1", n, kind)
		}
	}
	if _, _, err := e.ops.Suppression(ctx, "budi@example.com"); !errors.Is(err, notify.ErrSuppressionNotFound) {
		t.Errorf("suppressed after delivery reports: %v", err)
	}

	stranger := mail.Feedback{Provider: "resend", EventID: "evt-x", Kind: mail.FeedbackComplained, MessageID: "not-ours@elsewhere", ProviderMessageID: "re_not_ours", At: time.Now()}
	if _, err := e.ops.RecordFeedback(ctx, stranger); !errors.Is(err, notify.ErrUnknownMessage) {
		t.Errorf("an event about another sender's message: %v", err)
	}
	if _, err := e.ops.RecordFeedback(ctx, mail.Feedback{Provider: "resend", EventID: "evt-y", Kind: mail.FeedbackBounced}); !errors.Is(err, notify.ErrUnknownMessage) {
		t.Errorf("an event naming no message: %v", err)
	}
	var n int
	if err := e.db.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM provider_events) + (SELECT count(*) FROM suppressions)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d rows in provider_events and suppressions, want the 2 delivery reports", n)
	}

	complaint := mail.Feedback{Provider: "resend", EventID: "evt-c", Kind: mail.FeedbackComplained, MessageID: d.MessageID, At: time.Now()}
	if out, err := e.ops.RecordFeedback(ctx, complaint); err != nil || !out.Suppressed {
		t.Errorf("complaint: %+v, %v", out, err)
	}
	if s, _, err := e.ops.Suppression(ctx, "budi@example.com"); err != nil || s.Source != "complaint" {
		t.Errorf("after a complaint: %+v, %v", s, err)
	}
}

// A delivery whose attempt died before its hand-over (sending, lease run
// out) to a recipient suppressed since: the next attempt suppresses it
// at once, as it would a pending one, instead of waiting for the
// reconciler to put it back to pending first.
func TestDeadAttemptToASuppressedRecipientIsSuppressed(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	ctx := context.Background()
	d := e.checkout(t, "left@example.com")
	e.f.Claimed(d, -time.Second) // the worker died after its claim
	if _, _, err := e.ops.Suppress(ctx, "left@example.com", "asked us to stop, ticket 9", "ops@shop"); err != nil {
		t.Fatal(err)
	}
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err != nil && !isSkipRetry(err) {
		t.Fatalf("%v, want done", err)
	}
	if got := e.f.Get(d.ID); got.Status != notify.StatusSuppressed || !strings.Contains(got.LastError, "ticket 9") {
		t.Errorf("%s, %q; want suppressed", got.Status, got.LastError)
	}
	e.emails(t, 0, "")
}

// A bounce whose diagnostic, passed on from the remote server, holds a
// NUL and bytes that are not UTF-8 is recorded and suppresses the
// recipient: refused by PostgreSQL, the event would fail at every retry
// of the provider's webhook and the recipient would never be suppressed.
func TestBounceWithAnUnstorableDiagnosticSuppresses(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	ctx := context.Background()
	d := e.checkout(t, "nul@example.com")
	if err := process(ctx, e.worker(t, workerOpts{}), d); err != nil {
		t.Fatal(err)
	}
	d = e.f.Get(d.ID)
	out, err := e.ops.RecordFeedback(ctx, mail.Feedback{Provider: "postmark", EventID: "bounce-\x00-1", Kind: mail.FeedbackBounced,
		MessageID: d.MessageID, At: time.Now(), Detail: "550 5.1.1 \x00 no such user \xff"})
	if err != nil || !out.Suppressed {
		t.Fatalf("%+v, %v; want suppressed", out, err)
	}
	if s, _, err := e.ops.Suppression(ctx, "nul@example.com"); err != nil || !strings.Contains(s.Reason, "no such user ?") {
		t.Errorf("suppression %+v, %v", s, err)
	}
}
