package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/worker"
)

// What the worker records once the provider has answered, or not.

func TestTemporaryFailureIsRetriedThenSent(t *testing.T) {
	t.Parallel()
	var refusals atomic.Int32
	e := setup(t, smtpsink.Config{OnRcpt: func(string) error {
		if refusals.Add(1) <= 1 {
			return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "try later"}
		}
		return nil
	}})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "gita@example.com")
	ctx := context.Background()

	err := w.ProcessTask(ctx, queue.NewDeliverTask(d))
	if err == nil || isSkipRetry(err) {
		t.Fatalf("first attempt err = %v, want a retry", err)
	}
	got := e.delivery(t, d.IdempotencyKey)
	// Refused before the recipient was accepted: the attempt is not counted.
	if got.Status != notify.StatusPending || got.Attempts != 0 || !strings.Contains(got.LastError, "451") {
		t.Errorf("after a 451: %+v", got)
	}
	if delay := worker.RetryDelay(1, err, nil); delay < time.Second {
		t.Errorf("retry delay %v, want a back-off", delay)
	}
	e.deliver(t, w, d)
	got = e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusSent || got.Attempts != 1 || got.IdempotencyKey != d.IdempotencyKey {
		t.Errorf("after retry: %+v", got)
	}
	e.emails(t, 1, "")
	if n := e.counter(t, "sekali_job_retry_total", "reason", "smtp_4xx"); n != 1 {
		t.Errorf("job_retry_total{smtp_4xx} = %v", n)
	}
}

func TestPermanentFailureIsFailedAndNeverRetried(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{OnRcpt: func(string) error {
		return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	}})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "nobody@example.com")
	ctx := context.Background()

	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); !isSkipRetry(err) {
		t.Fatalf("err = %v, want SkipRetry", err)
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusFailed || got.Attempts != 1 || !strings.Contains(got.LastError, "550") {
		t.Errorf("after a 550: %+v", got)
	}
	// A redelivered task does not try again.
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err != nil {
		t.Errorf("redelivery: %v", err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Attempts != 1 {
		t.Errorf("attempts %d after redelivery, want 1", got.Attempts)
	}
	e.emails(t, 0, "")
}

// A refusal whose text is longer than the stored error, in a script of
// several bytes a character: the stored text is cut at a character
// boundary, or PostgreSQL refuses it and the delivery never fails (it
// would be claimed, refused and left sending, again and again). Three
// recipients, their replies offset by one byte each, so that byte 1000
// falls inside a character for at least two of them.
func TestLongMultibyteRefusalIsStored(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{OnRcpt: func(to string) error {
		pad := strings.Repeat("x", int(to[0]-'a'))
		return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: pad + strings.Repeat("日", 400)}
	}})
	w := e.worker(t, workerOpts{})
	for _, to := range []string{"a@example.com", "b@example.com", "c@example.com"} {
		d := e.checkout(t, to)
		if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d)); !isSkipRetry(err) {
			t.Errorf("%s: err = %v, want SkipRetry", to, err)
		}
		if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusFailed || !strings.Contains(got.LastError, "550") || !strings.HasSuffix(got.LastError, "日...") {
			t.Errorf("%s: %s, last error ends %q", to, got.Status, got.LastError[max(len(got.LastError)-12, 0):])
		}
	}
}

// A delivery gives up by age, never by count: a message the provider
// keeps deferring (4xx after the data) is tried again and again, and
// fails only once its tries are older than DELIVERY_MAX_AGE.
func TestGivesUpByAgeNotByCount(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{OnData: func(*smtpsink.Message) error {
		return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "try again later"}
	}})
	w := e.worker(t, workerOpts{maxAge: time.Hour})
	d := e.checkout(t, "hana@example.com")
	ctx := context.Background()
	for i := 1; i <= 8; i++ {
		if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err == nil || isSkipRetry(err) {
			t.Fatalf("attempt %d: %v, want a retry", i, err)
		}
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusPending || got.Attempts != 8 {
		t.Fatalf("after 8 deferrals: %s with %d attempts, want pending with 8", got.Status, got.Attempts)
	}
	// The same delivery, its tries begun two hours ago.
	e.f.Aged(d, 2*time.Hour)
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); !isSkipRetry(err) {
		t.Fatalf("attempt past the max age: %v, want SkipRetry", err)
	}
	got = e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusFailed || !strings.Contains(got.LastError, "DELIVERY_MAX_AGE") || !strings.Contains(got.LastError, "451") {
		t.Errorf("row: %s %q", got.Status, got.LastError)
	}
	e.emails(t, 0, "recorded (every one was refused)")
}

// A pending delivery past its max age (the provider refused us, or no
// worker knew its template, all that time) fails without another try.
func TestExpiredPendingDeliveryFailsWithoutATry(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{maxAge: time.Hour})
	d := e.checkout(t, "lama@example.com")
	e.f.Aged(e.f.Deferred(d, "smtp auth: 535 5.7.8", false), 2*time.Hour) // the provider refused us all that time
	if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d)); !isSkipRetry(err) {
		t.Fatalf("err = %v, want SkipRetry", err)
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusFailed || got.Attempts != 0 || !strings.Contains(got.LastError, "expired") || !strings.Contains(got.LastError, "535") {
		t.Errorf("row: %s, %d attempts, %q", got.Status, got.Attempts, got.LastError)
	}
	if e.sink.Connections() != 0 {
		t.Errorf("the worker connected to the provider for an expired delivery")
	}
	// An operator's retry starts a new series of tries.
	if _, _, _, err := e.ops.Retry(context.Background(), d.ID, "operator", "provider fixed", false); err != nil {
		t.Fatal(err)
	}
	e.deliver(t, w, d)
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent || e.sink.Count() != 1 {
		t.Errorf("after the retry: %s, %d e-mails", got.Status, e.sink.Count())
	}
}

// The connection breaks after the whole message went out: the provider
// may have it. The worker must not send again; the row waits for the
// reconciler with the reason recorded.
func TestAmbiguousOutcomeIsNotRetried(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{DropAfterData: func(*smtpsink.Message) bool { return true }})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "joko@example.com")
	ctx := context.Background()

	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err != nil {
		t.Fatalf("err = %v, want the task acknowledged", err)
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusSending || got.HandedOverAt == nil || !strings.HasPrefix(got.LastError, "ambiguous") {
		t.Fatalf("row: %+v", got)
	}
	if got.LeaseExpiresAt == nil || got.LeaseExpiresAt.After(time.Now().Add(11*time.Second)) {
		t.Errorf("lease ends %v; want one more LOCK_TTL (10s) for the provider to finish", got.LeaseExpiresAt)
	}
	// Once that lease is over, the task comes again (asynq redelivery):
	// still no second e-mail.
	e.f.Aged(d, 11*time.Second)
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err != nil {
		t.Fatal(err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSending || got.Attempts != 1 {
		t.Errorf("after redelivery: %+v", got)
	}
	e.emails(t, 1, "(the one the provider may have accepted)")
	if n := e.counter(t, "sekali_deliveries_total", "outcome", "ambiguous"); n != 2 {
		t.Errorf("deliveries_total{ambiguous} = %v, want 2", n)
	}
}

func TestNoRawAddressInWorkerLogs(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "putri.secret@example.com")
	e.deliver(t, w, d)
	if strings.Contains(e.logs.String(), "putri.secret") {
		t.Errorf("a log line carries the e-mail address:\n%s", e.logs)
	}
	if !strings.Contains(e.logs.String(), mail.KeyHash(d.IdempotencyKey)) {
		t.Errorf("the log line does not carry the key hash:\n%s", e.logs)
	}
}

// A server that quotes the address in its refusal, as Postfix does, must
// not put it into a log line: the reply stays in last_error, which only
// the admin API shows, and the logs carry it redacted.
func TestProviderRepliesAreScrubbedOfAddressesInLogs(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{
		OnRcpt: func(to string) error {
			return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "<" + to + ">: Recipient address rejected: User unknown in virtual mailbox table"}
		},
	})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "unknown.user@example.com")
	if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d)); !isSkipRetry(err) {
		t.Fatalf("err = %v, want the refusal to fail the delivery", err)
	}
	if got := e.delivery(t, d.IdempotencyKey); !strings.Contains(got.LastError, "unknown.user@example.com") {
		t.Errorf("last_error %q lost the provider's reply", got.LastError)
	}
	if strings.Contains(e.logs.String(), "unknown.user") {
		t.Errorf("a log line carries the address:\n%s", e.logs)
	}
	if !strings.Contains(e.logs.String(), "Recipient address rejected") {
		t.Errorf("the log line lost the reply itself:\n%s", e.logs)
	}
}

// A known template that cannot render the data stored with the delivery
// is an operator's problem: the delivery is held, visibly, not failed.
func TestUnrenderableDeliveryIsHeld(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "broken-data@example.com")
	// Data the order package would never store: corrupted on purpose.
	e.corrupt(t, `UPDATE notification_deliveries SET template_data = '{"order_id": "x"}' WHERE id = $1`, d.ID)
	if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d)); !isSkipRetry(err) {
		t.Fatalf("err = %v, want SkipRetry", err)
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusHeld || !strings.Contains(got.LastError, "cannot render") {
		t.Errorf("row: %s %q", got.Status, got.LastError)
	}
	e.emails(t, 0, "for an unrenderable delivery")
	if c := e.counter(t, "sekali_deliveries_total", "template", "order-confirmation", "outcome", "held"); c != 1 {
		t.Errorf("deliveries_total{held} = %v", c)
	}
}

// A provider's id for an accepted message is its own bytes: one that
// PostgreSQL's text refuses (invalid UTF-8, a NUL) is stored cleaned,
// and the acceptance is recorded. Before, the sent statement failed,
// the row stayed sending and handed over, and the reconciler had to
// guess what the worker knew.
func TestAcceptedWithAnUnstorableProviderIDIsSent(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{provider: oddID{e.smtp(t)}})
	d := e.checkout(t, "odd-id@example.com")
	e.deliver(t, w, d)
	if got := e.f.Get(d.ID); got.Status != notify.StatusSent || got.ProviderMessageID != "queued-?" {
		t.Errorf("%s, provider id %q; want sent, queued-?", got.Status, got.ProviderMessageID)
	}
	e.emails(t, 1, "")
}

// oddID sends through its provider and reports an id of bytes no text
// column takes.
type oddID struct{ mail.Provider }

func (p oddID) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	if _, err := p.Provider.Send(ctx, m, handOver); err != nil {
		return "", err
	}
	return "queued-\xff\x00", nil
}
