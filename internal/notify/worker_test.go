package notify_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

func TestSendsOnceWithDeterministicHeaders(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "budi@example.com")

	if err := process(context.Background(), w, d); err != nil {
		t.Fatal(err)
	}
	msgs := e.sink.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages at the sink, want 1", len(msgs))
	}
	m := msgs[0]
	if m.To[0] != "budi@example.com" || m.From != "orders@shop.example" {
		t.Errorf("envelope %s -> %v", m.From, m.To)
	}
	if want := mail.MessageID(d.IdempotencyKey, mailDomain); m.MessageID != want {
		t.Errorf("Message-ID %q, want %q derived from the key", m.MessageID, want)
	}
	if got := m.Header.Get("Idempotency-Key"); got != d.IdempotencyKey {
		t.Errorf("Idempotency-Key header %q, want %q", got, d.IdempotencyKey)
	}
	if !strings.HasPrefix(m.Header.Get("Content-Type"), "multipart/alternative") ||
		!strings.Contains(string(m.Data), "text/plain") || !strings.Contains(string(m.Data), "text/html") {
		t.Errorf("not a text+HTML alternative:\n%s", m.Data)
	}
	if subj := m.Header.Get("Subject"); !strings.Contains(subj, "is confirmed") {
		t.Errorf("subject %q", subj)
	}

	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusSent || got.SentAt == nil || got.Attempts != 1 || got.ProviderMessageID != m.QueueID {
		t.Errorf("row after send: %+v (queue id %s)", got, m.QueueID)
	}
	if n := e.counter(t, "sekali_deliveries_total", "outcome", "sent", "template", "order-confirmation"); n != 1 {
		t.Errorf("deliveries_total{sent} = %v", n)
	}
}

// The same task delivered again — right after, and again after the status
// cache was lost — never sends a second e-mail.
func TestSameTaskTwiceSendsOneEmail(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "citra@example.com")
	ctx := context.Background()

	for i := 0; i < 2; i++ {
		if err := process(ctx, w, d); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.counter(t, "sekali_duplicate_detected_total", "layer", "cache"); n != 1 {
		t.Errorf("duplicates caught by the cache = %v, want 1", n)
	}
	if err := e.rdb.Del(ctx, "sekali:{"+mail.KeyHash(d.IdempotencyKey)+"}:sent").Err(); err != nil {
		t.Fatal(err)
	}
	if err := process(ctx, w, d); err != nil {
		t.Fatal(err)
	}
	if n := e.counter(t, "sekali_duplicate_detected_total", "layer", "database"); n != 1 {
		t.Errorf("duplicates caught by the database = %v, want 1", n)
	}
	if n := e.sink.Count(); n != 1 {
		t.Errorf("%d e-mails, want 1", n)
	}

	// The whole story is in the history, in order.
	events, err := notify.History(ctx, e.db.Pool, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	var story []string
	for _, ev := range events {
		story = append(story, ev.Event+":"+ev.FromStatus+">"+ev.ToStatus)
	}
	want := "received:>pending claimed:pending>sending handed_over:sending>sending sent:sending>sent duplicate_suppressed:sent>sent"
	if strings.Join(story, " ") != want {
		t.Errorf("history = %s\nwant      %s", strings.Join(story, " "), want)
	}
	if last := events[len(events)-1]; !strings.Contains(string(last.Detail), `"layer": "database"`) {
		t.Errorf("duplicate event detail = %s", last.Detail)
	}
}

// A stale negative cache entry is not believed.
func TestNegativeCacheEntryIsNotTrusted(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "dewi@example.com")
	ctx := context.Background()
	if err := e.rdb.Set(ctx, "sekali:{"+mail.KeyHash(d.IdempotencyKey)+"}:sent", "pending", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := process(ctx, w, d); err != nil {
		t.Fatal(err)
	}
	if n := e.sink.Count(); n != 1 {
		t.Errorf("%d e-mails, want 1", n)
	}
}

// Ten workers, each with its own SMTP connection, race on one delivery.
func TestTenWorkersRacingSendOneEmail(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 50 * time.Millisecond }})
	d := e.checkout(t, "eka@example.com")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	errs := make([]error, 10)
	start := make(chan struct{})
	for i := range errs {
		w := e.worker(t, workerOpts{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = process(ctx, w, d)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	if n := e.sink.Count(); n != 1 {
		t.Errorf("%d e-mails, want 1", n)
	}
	if n := e.counter(t, "sekali_deliveries_total", "outcome", "sent"); n != 1 {
		t.Errorf("%v sent transitions, want 1", n)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent || got.Attempts != 1 {
		t.Errorf("row: status %s, attempts %d", got.Status, got.Attempts)
	}
	t.Logf("lock busy %v times, duplicates by layer: cache %v, database %v, lock %v",
		e.counter(t, "sekali_lock_acquire_failed_total"),
		e.counter(t, "sekali_duplicate_detected_total", "layer", "cache"),
		e.counter(t, "sekali_duplicate_detected_total", "layer", "database"),
		e.counter(t, "sekali_duplicate_detected_total", "layer", "lock"))
}

// A lock held by someone else means "later", not a failed delivery.
func TestBusyLockIsRetriedNotFailed(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "fajar@example.com")
	ctx := context.Background()
	lock := "sekali:{" + mail.KeyHash(d.IdempotencyKey) + "}:lock"
	if err := e.rdb.Set(ctx, lock, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	err := w.ProcessTask(ctx, notify.NewDeliverTask(d))
	if err == nil || notify.IsFailure(err) {
		t.Fatalf("err = %v, want a retryable non-failure", err)
	}
	if delay := notify.RetryDelay(1, err, nil); delay > 2*time.Second {
		t.Errorf("a busy lock waits %v; want a short retry", delay)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusPending || got.Attempts != 0 {
		t.Errorf("row touched while the lock was busy: %+v", got)
	}
	if v, _ := e.rdb.Get(ctx, lock).Result(); v != "someone-else" {
		t.Errorf("the other worker's lock was changed to %q", v)
	}
	if n := e.counter(t, "sekali_lock_acquire_failed_total"); n != 1 {
		t.Errorf("lock_acquire_failed_total = %v", n)
	}
}

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

	err := w.ProcessTask(ctx, notify.NewDeliverTask(d))
	if err == nil || isSkipRetry(err) {
		t.Fatalf("first attempt err = %v, want a retry", err)
	}
	got := e.delivery(t, d.IdempotencyKey)
	// Refused before the recipient was accepted: the attempt is not counted.
	if got.Status != notify.StatusPending || got.Attempts != 0 || !strings.Contains(got.LastError, "451") {
		t.Errorf("after a 451: %+v", got)
	}
	if delay := notify.RetryDelay(1, err, nil); delay < time.Second {
		t.Errorf("retry delay %v, want a back-off", delay)
	}
	if err := process(ctx, w, d); err != nil {
		t.Fatal(err)
	}
	got = e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusSent || got.Attempts != 1 || got.IdempotencyKey != d.IdempotencyKey {
		t.Errorf("after retry: %+v", got)
	}
	if n := e.sink.Count(); n != 1 {
		t.Errorf("%d e-mails, want 1", n)
	}
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

	if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); !isSkipRetry(err) {
		t.Fatalf("err = %v, want SkipRetry", err)
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusFailed || got.Attempts != 1 || !strings.Contains(got.LastError, "550") {
		t.Errorf("after a 550: %+v", got)
	}
	// A redelivered task does not try again.
	if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); err != nil {
		t.Errorf("redelivery: %v", err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Attempts != 1 {
		t.Errorf("attempts %d after redelivery, want 1", got.Attempts)
	}
	if n := e.sink.Count(); n != 0 {
		t.Errorf("%d e-mails, want 0", n)
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
		if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); err == nil || isSkipRetry(err) {
			t.Fatalf("attempt %d: %v, want a retry", i, err)
		}
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusPending || got.Attempts != 8 {
		t.Fatalf("after 8 deferrals: %s with %d attempts, want pending with 8", got.Status, got.Attempts)
	}
	// The same delivery, its tries begun two hours ago.
	e.exec(t, "UPDATE notification_deliveries SET trying_since = now() - interval '2 hours' WHERE id = $1", d.ID)
	if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); !isSkipRetry(err) {
		t.Fatalf("attempt past the max age: %v, want SkipRetry", err)
	}
	got = e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusFailed || !strings.Contains(got.LastError, "DELIVERY_MAX_AGE") || !strings.Contains(got.LastError, "451") {
		t.Errorf("row: %s %q", got.Status, got.LastError)
	}
	if n := e.sink.Count(); n != 0 {
		t.Errorf("%d e-mails recorded, want 0 (every one was refused)", n)
	}
}

// A pending delivery past its max age (the provider refused us, or no
// worker knew its template, all that time) fails without another try.
func TestExpiredPendingDeliveryFailsWithoutATry(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{maxAge: time.Hour})
	d := e.checkout(t, "lama@example.com")
	e.exec(t, "UPDATE notification_deliveries SET trying_since = now() - interval '2 hours', last_error = 'smtp auth: 535 5.7.8' WHERE id = $1", d.ID)
	if err := w.ProcessTask(context.Background(), notify.NewDeliverTask(d)); !isSkipRetry(err) {
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
	if _, _, _, err := e.ops.Retry(context.Background(), d.ID, "operator", "provider fixed"); err != nil {
		t.Fatal(err)
	}
	if err := process(context.Background(), w, d); err != nil {
		t.Fatal(err)
	}
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

	if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); err != nil {
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
	e.exec(t, "UPDATE notification_deliveries SET lease_expires_at = now() - interval '1 second' WHERE id = $1", d.ID)
	if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); err != nil {
		t.Fatal(err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSending || got.Attempts != 1 {
		t.Errorf("after redelivery: %+v", got)
	}
	if n := e.sink.Count(); n != 1 {
		t.Errorf("%d messages at the sink, want the 1 that may have been accepted", n)
	}
	if n := e.counter(t, "sekali_deliveries_total", "outcome", "ambiguous"); n != 2 {
		t.Errorf("deliveries_total{ambiguous} = %v, want 2", n)
	}
}

// pausingProvider runs a hook at a chosen point of the send, standing in
// for what happens to the row while a worker is stalled there.
type pausingProvider struct {
	mail.Provider // Probe as it is; Send wrapped
	beforeData    func()
	afterAccept   func()
}

func (p pausingProvider) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	id, err := p.Provider.Send(ctx, m, func() error {
		if p.beforeData != nil {
			p.beforeData()
		}
		return handOver()
	})
	if err == nil && p.afterAccept != nil {
		p.afterAccept()
	}
	return id, err
}

// takeOver gives the row to another worker, as a claim after an expired
// lease would: a new lease token.
func (e *env) takeOver(t *testing.T, d notify.Delivery) {
	t.Helper()
	if _, err := e.db.Pool.Exec(context.Background(),
		"UPDATE notification_deliveries SET lease_token = $2, lease_expires_at = now() + interval '1 minute' WHERE id = $1",
		d.ID, uuid.New()); err != nil {
		t.Fatal(err)
	}
}

// Another worker took the row over while this one was stalled before the
// data: the last lease check refuses, and nothing is sent or written.
func TestLeaseLostBeforeDataSendsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	d := e.checkout(t, "kartika@example.com")
	w := e.worker(t, workerOpts{provider: pausingProvider{Provider: e.smtp(t), beforeData: func() { e.takeOver(t, d) }}})

	if err := w.ProcessTask(context.Background(), notify.NewDeliverTask(d)); err != nil {
		t.Fatalf("err = %v", err)
	}
	if n := e.sink.Count(); n != 0 {
		t.Errorf("%d e-mails sent by a worker that lost its lease", n)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSending || got.HandedOverAt != nil {
		t.Errorf("the fenced-out worker wrote to the row: %+v", got)
	}
	if n := e.counter(t, "sekali_duplicate_detected_total", "layer", "fencing"); n != 1 {
		t.Errorf("duplicate_detected_total{fencing} = %v", n)
	}
}

// The row changed hands after the provider accepted: the late "sent"
// write is refused by the fencing check and the row keeps its new owner.
func TestLateSentWriteIsFencedOut(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	d := e.checkout(t, "lestari@example.com")
	w := e.worker(t, workerOpts{provider: pausingProvider{Provider: e.smtp(t), afterAccept: func() { e.takeOver(t, d) }}})

	if err := w.ProcessTask(context.Background(), notify.NewDeliverTask(d)); err != nil {
		t.Fatalf("err = %v", err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSending || got.SentAt != nil {
		t.Errorf("the fenced-out worker recorded its outcome: %+v", got)
	}
	if n := e.counter(t, "sekali_duplicate_detected_total", "layer", "fencing"); n != 1 {
		t.Errorf("duplicate_detected_total{fencing} = %v", n)
	}
	if !strings.Contains(e.logs.String(), `"result":"fenced_out"`) {
		t.Errorf("no log line says the worker was fenced out:\n%s", e.logs)
	}
}

// The lock vanishes while the worker waits on the provider (Redis lost it,
// or it expired): the worker does not start the data, counts it, and the
// next attempt sends the one e-mail.
func TestLockLostBeforeDataIsNotSent(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	d := e.checkout(t, "made@example.com")
	ctx := context.Background()
	lock := "sekali:{" + mail.KeyHash(d.IdempotencyKey) + "}:lock"
	w := e.worker(t, workerOpts{lockTTL: time.Second, provider: pausingProvider{Provider: e.smtp(t), beforeData: func() {
		before := e.delivery(t, d.IdempotencyKey).LeaseExpiresAt
		if err := e.rdb.Del(ctx, lock).Err(); err != nil {
			t.Error(err)
		}
		// The heartbeat renews the lock and the lease in one beat: once the
		// lease moved, it has tried (and failed) to renew the lost lock.
		testenv.WaitFor(t, "a heartbeat after the lock was lost", 10*time.Second, func() bool {
			now := e.delivery(t, d.IdempotencyKey).LeaseExpiresAt
			return now != nil && now.After(*before)
		})
		if n, _ := e.rdb.Exists(ctx, lock).Result(); n != 0 {
			t.Error("the heartbeat re-created a lock it did not hold")
		}
	}}})
	err := w.ProcessTask(ctx, notify.NewDeliverTask(d))
	if err == nil || isSkipRetry(err) {
		t.Fatalf("err = %v, want a retry", err)
	}
	if n := e.sink.Count(); n != 0 {
		t.Errorf("%d e-mails sent without the lock", n)
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusPending || !strings.Contains(got.LastError, "lock expired") {
		t.Errorf("row: %+v", got)
	}
	if n := e.counter(t, "sekali_lock_expired_before_completion_total"); n != 1 {
		t.Errorf("lock_expired_before_completion_total = %v, want 1", n)
	}
	if err := process(ctx, e.worker(t, workerOpts{}), d); err != nil {
		t.Fatal(err)
	}
	if n := e.sink.Count(); n != 1 {
		t.Errorf("%d e-mails after the retry, want 1", n)
	}
}

func TestBadTasksAreSkippedWithALogLine(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "nyoman@example.com")
	tasks := map[string]*asynq.Task{
		"malformed payload": asynq.NewTask(notify.TaskTypeDeliver, []byte(`{"delivery_id": 42`)),
		"empty payload":     asynq.NewTask(notify.TaskTypeDeliver, nil),
		"unknown delivery":  notify.NewDeliverTask(notify.Delivery{ID: uuid.New(), IdempotencyKey: "x"}),
		"wrong key hash":    notify.NewDeliverTask(notify.Delivery{ID: d.ID, IdempotencyKey: "order-confirmation:other"}),
	}
	for name, task := range tasks {
		err := w.ProcessTask(context.Background(), task)
		if !errors.Is(err, asynq.SkipRetry) {
			t.Errorf("%s: err = %v, want SkipRetry", name, err)
		}
	}
	logs := e.logs.String()
	for _, want := range []string{`"result":"bad_payload"`, `"result":"unknown_delivery"`, `"level":"ERROR"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusPending || got.Attempts != 0 {
		t.Errorf("a bad task touched a real delivery: %+v", got)
	}
}

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

func TestNoRawAddressInWorkerLogs(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "putri.secret@example.com")
	if err := process(context.Background(), w, d); err != nil {
		t.Fatal(err)
	}
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
	if err := w.ProcessTask(context.Background(), notify.NewDeliverTask(d)); !isSkipRetry(err) {
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

// The second template goes through the same worker.
func TestShippedEmailIsSentOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "ship@example.com")
	ctx := context.Background()
	n, created, err := e.orders.Ship(ctx, d.OrderID, order.Shipment{Carrier: "SiCepat", TrackingNumber: "SC-1"})
	if err != nil || !created {
		t.Fatalf("Ship = %v, created %v", err, created)
	}
	shipped := e.delivery(t, n.IdempotencyKey)
	for i := 0; i < 2; i++ {
		if err := process(ctx, w, shipped); err != nil {
			t.Fatal(err)
		}
	}
	msgs := e.sink.ByRecipient("ship@example.com")
	if len(msgs) != 1 || !strings.Contains(msgs[0].Header.Get("Subject"), "on its way") || !strings.Contains(string(msgs[0].Data), "SC-1") {
		t.Errorf("shipped e-mails: %d", len(msgs))
	}
}

// countingProvider records how many sends ran at once. Each send waits
// until it has company (wantTogether sends at once), so that a limit that
// lets them through is seen for certain; under a limit that does not,
// it gives up waiting after hold, and the test sees top stay at the limit.
type countingProvider struct {
	mail.Provider // Probe as it is; Send wrapped
	active, top   atomic.Int32
	wantTogether  atomic.Int32
	hold          time.Duration
}

func (p *countingProvider) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	n := p.active.Add(1)
	defer p.active.Add(-1)
	for {
		top := p.top.Load()
		if n <= top || p.top.CompareAndSwap(top, n) {
			break
		}
	}
	for deadline := time.Now().Add(p.hold); p.top.Load() < p.wantTogether.Load() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return p.Provider.Send(ctx, m, handOver)
}

// An operator lowers the worker's concurrency at run time, and raises it
// again, without a restart.
func TestConcurrencyCanBeLoweredAtRunTime(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	cp := &countingProvider{Provider: e.smtp(t), hold: 200 * time.Millisecond}
	cp.wantTogether.Store(2)
	w := e.worker(t, workerOpts{provider: cp})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.WatchConcurrency(ctx, e.redis.Queue, 10, 10*time.Millisecond)

	burst := func(prefix string) {
		var wg sync.WaitGroup
		for i := range 4 {
			d := e.checkout(t, prefix+string(rune('a'+i))+"@example.com")
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := process(ctx, w, d); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	waitLog := func(want string) {
		testenv.WaitFor(t, "a log line "+want, 10*time.Second, func() bool { return strings.Contains(e.logs.String(), want) })
	}

	if err := notify.SetConcurrency(ctx, e.rdb, e.redis.Queue, 1); err != nil {
		t.Fatal(err)
	}
	waitLog(`"to":1`)
	burst("one")
	if top := cp.top.Load(); top != 1 {
		t.Errorf("%d sends at once under a limit of 1", top)
	}

	if err := notify.SetConcurrency(ctx, e.rdb, e.redis.Queue, 0); err != nil {
		t.Fatal(err)
	}
	waitLog(`"to":10`)
	cp.hold = 10 * time.Second // now every send waits until a second one runs beside it
	burst("many")
	if top := cp.top.Load(); top < 2 {
		t.Errorf("at most %d send at once after the limit was lifted", top)
	}
	if n := e.sink.Count(); n != 8 {
		t.Errorf("%d e-mails, want 8", n)
	}
}

// The runbook's temporary filter: a blocked recipient gets nothing while
// the block lasts; the delivery waits as pending and goes out after.
func TestBlockedRecipientWaits(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "complainer@example.com")
	ctx := context.Background()
	b, err := e.ops.AddBlock(ctx, "recipient", "Complainer@example.com", "ticket 4411", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); err != nil {
		t.Fatal(err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusPending || got.Attempts != 0 || e.sink.Count() != 0 {
		t.Fatalf("blocked delivery: %+v, %d e-mails", got, e.sink.Count())
	}
	if n := e.counter(t, "sekali_deliveries_blocked_total"); n != 1 {
		t.Errorf("deliveries_blocked_total = %v", n)
	}
	_, events, err := e.ops.Get(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events, func(ev notify.Event) bool { return ev.Event == "blocked" }) {
		t.Errorf("the block left no trace in the history: %+v", events)
	}
	if err := e.ops.RemoveBlock(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := process(ctx, w, d); err != nil {
		t.Fatal(err)
	}
	if n := e.sink.Count(); n != 1 {
		t.Errorf("%d e-mails after the block was lifted, want 1", n)
	}
}

// handOverHook lets a test act right after the last lease check passed.
type handOverHook struct {
	mail.Provider // Probe as it is; Send wrapped
	after         func()
}

func (p handOverHook) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	return p.Provider.Send(ctx, m, func() error {
		err := handOver()
		if err == nil {
			p.after()
		}
		return err
	})
}

// A worker frozen right after its last lease check, for longer than
// SMTP_TIMEOUT, cannot start the data when it wakes: the data's deadline
// counts from before the check and is not renewed.
func TestNoDataAfterTheDeadlineThatFollowsTheLeaseCheck(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	p, err := smtp.New(smtp.Config{Host: e.sink.Host(), Port: e.sink.Port(), TLS: smtp.TLSNone,
		From: "orders@" + mailDomain, IdempotencyHeader: "Idempotency-Key", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	w := e.worker(t, workerOpts{provider: handOverHook{Provider: p, after: func() { time.Sleep(500 * time.Millisecond) }}})
	d := e.checkout(t, "frozen@example.com")
	err = w.ProcessTask(context.Background(), notify.NewDeliverTask(d))
	if err == nil || isSkipRetry(err) {
		t.Fatalf("err = %v, want a temporary failure", err)
	}
	if n := e.sink.Count(); n != 0 {
		t.Errorf("%d e-mails written after the deadline", n)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusPending {
		t.Errorf("row: %+v", got)
	}
}

// The provider accepted the message just as SEND_TIMEOUT ran out: it is
// still recorded as sent.
func TestAcceptedMessageIsRecordedEvenPastTheSendTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	slow := pausingProvider{Provider: e.smtp(t), afterAccept: func() { time.Sleep(700 * time.Millisecond) }}
	w := notify.NewWorker(e.db.Pool, e.rdb, slow, e.templates, notify.WorkerConfig{
		LockTTL: 10 * time.Second, MaxAge: time.Hour, ProbeInterval: time.Second, SendTimeout: 500 * time.Millisecond,
		MessageIDDomain: mailDomain, WorkerID: t.Name(), Concurrency: 1,
	}, slog.New(slog.NewJSONHandler(e.logs, nil)), e.metrics)
	d := e.checkout(t, "slow@example.com")
	if err := w.ProcessTask(context.Background(), notify.NewDeliverTask(d)); err != nil {
		t.Fatal(err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent {
		t.Errorf("row after a late accept: %s (%s)", got.Status, got.LastError)
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
	if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); err != nil {
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
	if err := w.ProcessTask(ctx, notify.NewDeliverTask(e.checkout(t, "refused@example.com"))); !isSkipRetry(err) {
		t.Fatalf("refused message: %v", err)
	}
	d := e.checkout(t, "next@example.com")
	if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); err != nil {
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

// Once shutdown begins, a task that has not claimed its delivery yet is
// handed back, not started.
func TestDrainingWorkerHandsTasksBack(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "drain@example.com")
	w.Drain()
	err := w.ProcessTask(context.Background(), notify.NewDeliverTask(d))
	if err == nil || notify.IsFailure(err) {
		t.Fatalf("err = %v, want a hand-back that is not a failure", err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusPending || got.Attempts != 0 || e.sink.Count() != 0 {
		t.Errorf("a draining worker started the delivery: %+v", got)
	}
}

// During a rolling deploy an older worker meets a delivery of a template
// it does not know: it hands the task back, untouched, for one that does.
func TestUnknownTemplateIsHandedBackNotFailed(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	old := e.worker(t, workerOpts{templates: e.templates.Without(order.TemplateShipped)})
	current := e.worker(t, workerOpts{})
	ctx := context.Background()
	d := e.checkout(t, "rolling@example.com")
	n, _, err := e.orders.Ship(ctx, d.OrderID, order.Shipment{Carrier: "JNE", TrackingNumber: "JNE-9"})
	if err != nil {
		t.Fatal(err)
	}
	shipped := e.delivery(t, n.IdempotencyKey)
	err = old.ProcessTask(ctx, notify.NewDeliverTask(shipped))
	if err == nil || notify.IsFailure(err) {
		t.Fatalf("old worker: %v, want the task handed back", err)
	}
	if delay := notify.RetryDelay(5, err, nil); delay < time.Second || delay > time.Minute {
		t.Errorf("handed back for %v", delay)
	}
	if got := e.delivery(t, shipped.IdempotencyKey); got.Status != notify.StatusPending || got.Attempts != 0 {
		t.Errorf("old worker touched the delivery: %+v", got)
	}
	if c := e.counter(t, "sekali_tasks_handed_back_total", "reason", "unknown_template"); c != 1 {
		t.Errorf("handed back %v, want 1", c)
	}
	if !strings.Contains(e.logs.String(), `"result":"unknown_template"`) {
		t.Error("no log line says why the task went back")
	}
	if err := process(ctx, current, shipped); err != nil {
		t.Fatal(err)
	}
	if got := e.delivery(t, shipped.IdempotencyKey); got.Status != notify.StatusSent || len(e.sink.ByRecipient("rolling@example.com")) != 1 {
		t.Errorf("after the current worker: %s", got.Status)
	}
}

// A known template that cannot render the data stored with the delivery
// is an operator's problem: the delivery is held, visibly, not failed.
func TestUnrenderableDeliveryIsHeld(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "broken-data@example.com")
	e.exec(t, `UPDATE notification_deliveries SET template_data = '{"order_id": "x"}' WHERE id = $1`, d.ID)
	if err := w.ProcessTask(context.Background(), notify.NewDeliverTask(d)); !isSkipRetry(err) {
		t.Fatalf("err = %v, want SkipRetry", err)
	}
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusHeld || !strings.Contains(got.LastError, "cannot render") {
		t.Errorf("row: %s %q", got.Status, got.LastError)
	}
	if e.sink.Count() != 0 {
		t.Error("an unrenderable delivery reached the provider")
	}
	if c := e.counter(t, "sekali_deliveries_total", "template", "order-confirmation", "outcome", "held"); c != 1 {
		t.Errorf("deliveries_total{held} = %v", c)
	}
}

// The first claim stores the Message-ID; every later attempt sends that
// one, even from a worker whose MAIL_FROM domain has changed since.
func TestMessageIDIsStoredAtTheFirstClaim(t *testing.T) {
	t.Parallel()
	var refused atomic.Bool
	e := setup(t, smtpsink.Config{OnRcpt: func(string) error {
		if refused.CompareAndSwap(false, true) {
			return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "later"}
		}
		return nil
	}})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "mid@example.com")
	ctx := context.Background()
	if err := w.ProcessTask(ctx, notify.NewDeliverTask(d)); err == nil {
		t.Fatal("first attempt passed; want it deferred")
	}
	stored := e.delivery(t, d.IdempotencyKey).MessageID
	if stored != mail.MessageID(d.IdempotencyKey, mailDomain) {
		t.Fatalf("stored Message-ID %q", stored)
	}
	other := notify.NewWorker(e.db.Pool, e.rdb, e.smtp(t), e.templates, notify.WorkerConfig{
		LockTTL: 10 * time.Second, MaxAge: time.Hour, ProbeInterval: time.Second, SendTimeout: 10 * time.Second,
		MessageIDDomain: "new-domain.example", WorkerID: "other", Queue: e.redis.Queue, Concurrency: 1,
	}, slog.New(slog.NewJSONHandler(e.logs, nil)), notify.NewMetrics(prometheus.NewRegistry()))
	if err := process(ctx, other, d); err != nil {
		t.Fatal(err)
	}
	if msgs := e.sink.ByMessageID(stored); len(msgs) != 1 {
		t.Errorf("%d messages with the stored Message-ID %s, want 1", len(msgs), stored)
	}
}

// The claim and the "sent" write skip the WAL flush for their own
// transaction only: the hand-over, the one write that must be durable
// before the data goes out, and everything after on the same connection
// still wait for it.
func TestAsyncCommitDoesNotLeakOntoTheConnection(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	pool, _ := testenv.OneBackend(t, e.db)
	d := e.checkout(t, "durable@example.com")
	w := notify.NewWorker(pool, e.rdb, e.smtp(t), e.templates, notify.WorkerConfig{
		WorkerID: "test", LockTTL: 5 * time.Second, SendTimeout: 5 * time.Second, MaxAge: time.Hour, MessageIDDomain: "shop.example", Concurrency: 1,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), notify.NewMetrics(prometheus.NewRegistry()))
	if err := w.ProcessTask(context.Background(), notify.NewDeliverTask(d)); err != nil {
		t.Fatal(err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent {
		t.Fatalf("status %s", got.Status)
	}
	var setting string
	if err := pool.QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "on" {
		t.Errorf("after an attempt, the worker's connection has synchronous_commit=%s", setting)
	}
}
