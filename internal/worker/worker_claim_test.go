package worker_test

import (
	"context"
	"errors"
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
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

// The worker's way to a send: the cache, the claim, the lock and what
// they turn away (a repeat, a race, a block, a template it lacks).

func TestSendsOnceWithDeterministicHeaders(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "budi@example.com")

	e.deliver(t, w, d)
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
		e.deliver(t, w, d)
	}
	if n := e.counter(t, "sekali_duplicate_detected_total", "layer", "cache"); n != 1 {
		t.Errorf("duplicates caught by the cache = %v, want 1", n)
	}
	if err := e.rdb.Del(ctx, workertest.SentKey(d)).Err(); err != nil {
		t.Fatal(err)
	}
	e.deliver(t, w, d)
	if n := e.counter(t, "sekali_duplicate_detected_total", "layer", "database"); n != 1 {
		t.Errorf("duplicates caught by the database = %v, want 1", n)
	}
	e.emails(t, 1, "")

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
	if err := e.rdb.Set(ctx, workertest.SentKey(d), "pending", time.Hour).Err(); err != nil { // a value the worker never writes
		t.Fatal(err)
	}
	e.deliver(t, w, d)
	e.emails(t, 1, "")
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
	e.emails(t, 1, "")
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
	workertest.HoldLock(t, e.rdb, d, time.Minute)
	err := w.ProcessTask(ctx, queue.NewDeliverTask(d))
	if err == nil || worker.IsFailure(err) {
		t.Fatalf("err = %v, want a retryable non-failure", err)
	}
	if delay := worker.RetryDelay(1, err, nil); delay > 2*time.Second {
		t.Errorf("a busy lock waits %v; want a short retry", delay)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusPending || got.Attempts != 0 {
		t.Errorf("row touched while the lock was busy: %+v", got)
	}
	if v, _ := e.rdb.Get(ctx, workertest.LockKey(d)).Result(); v != "another-worker" {
		t.Errorf("the other worker's lock was changed to %q", v)
	}
	if n := e.counter(t, "sekali_lock_acquire_failed_total"); n != 1 {
		t.Errorf("lock_acquire_failed_total = %v", n)
	}
}

func TestBadTasksAreSkippedWithALogLine(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "nyoman@example.com")
	tasks := map[string]*asynq.Task{
		"malformed payload": asynq.NewTask(queue.TaskTypeDeliver, []byte(`{"delivery_id": 42`)),
		"empty payload":     asynq.NewTask(queue.TaskTypeDeliver, nil),
		"unknown delivery":  queue.NewDeliverTask(notify.Delivery{ID: uuid.New(), IdempotencyKey: "x"}),
		"wrong key hash":    queue.NewDeliverTask(notify.Delivery{ID: d.ID, IdempotencyKey: "order-confirmation:other"}),
		// A key hash the claim's statement could not take would fail
		// every claim batched with it: refused before the claim.
		"NUL key hash":      asynq.NewTask(queue.TaskTypeDeliver, []byte(`{"delivery_id":"`+d.ID.String()+`","key_hash":"\u0000"}`)),
		"key hash, not hex": asynq.NewTask(queue.TaskTypeDeliver, []byte(`{"delivery_id":"`+d.ID.String()+`","key_hash":"`+strings.Repeat("Z", 32)+`"}`)),
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

// The second template goes through the same worker.
func TestShippedEmailIsSentOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "ship@example.com")
	ctx := context.Background()
	n, created, err := e.orders.Ship(ctx, d.OrderID, order.Shipment{Carrier: "SiCepat", TrackingNumber: "SC-1"}, order.Caller{})
	if err != nil || !created {
		t.Fatalf("Ship = %v, created %v", err, created)
	}
	shipped := e.delivery(t, n.IdempotencyKey)
	for i := 0; i < 2; i++ {
		e.deliver(t, w, shipped)
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
	e.emails(t, 8, "")
}

// The runbook's temporary filter: a blocked recipient gets nothing while
// the block lasts; the delivery waits as pending and goes out after.
func TestBlockedRecipientWaits(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "complainer@example.com")
	ctx := context.Background()
	b, err := e.ops.AddBlock(ctx, "test", "recipient", "Complainer@example.com", "ticket 4411", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err != nil {
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
	if err := e.ops.RemoveBlock(ctx, "test", b.ID); err != nil {
		t.Fatal(err)
	}
	e.deliver(t, w, d)
	e.emails(t, 1, "after the block was lifted")
}

// Once shutdown begins, a task that has not claimed its delivery yet is
// handed back, not started.
func TestDrainingWorkerHandsTasksBack(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "drain@example.com")
	w.Drain()
	err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d))
	if err == nil || worker.IsFailure(err) {
		t.Fatalf("err = %v, want a hand-back that is not a failure", err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusPending || got.Attempts != 0 || e.sink.Count() != 0 {
		t.Errorf("a draining worker started the delivery: %+v", got)
	}
}

// Shutdown that begins while the claim runs (here: it waits for a row
// lock a test transaction holds) hands the claimed row back, uncounted,
// before anything is sent: a send started then could be cut by the
// shutdown before its outcome is written.
func TestDrainDuringTheClaimHandsTheRowBack(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "drain-claim@example.com")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := e.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // committed below; this only runs on failure
	if _, err := tx.Exec(ctx, "SELECT 1 FROM notification_deliveries WHERE id = $1 FOR UPDATE", d.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.ProcessTask(ctx, queue.NewDeliverTask(d)) }()
	testenv.WaitFor(t, "the claim to wait on the row lock", 30*time.Second, func() bool {
		return testenv.LockWaiters(t, e.db.Pool, "") == 1
	})
	w.Drain()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || worker.IsFailure(err) {
		t.Fatalf("err = %v, want a hand-back that is not a failure", err)
	}
	if got := e.f.Get(d.ID); got.Status != notify.StatusPending || got.Attempts != 0 || e.sink.Count() != 0 {
		t.Errorf("claimed as shutdown began: %s, %d attempts, %d e-mails; want pending, 0, 0", got.Status, got.Attempts, e.sink.Count())
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
	n, _, err := e.orders.Ship(ctx, d.OrderID, order.Shipment{Carrier: "JNE", TrackingNumber: "JNE-9"}, order.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	shipped := e.delivery(t, n.IdempotencyKey)
	err = old.ProcessTask(ctx, queue.NewDeliverTask(shipped))
	if err == nil || worker.IsFailure(err) {
		t.Fatalf("old worker: %v, want the task handed back", err)
	}
	if delay := worker.RetryDelay(5, err, nil); delay < time.Second || delay > time.Minute {
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
	e.deliver(t, current, shipped)
	if got := e.delivery(t, shipped.IdempotencyKey); got.Status != notify.StatusSent || len(e.sink.ByRecipient("rolling@example.com")) != 1 {
		t.Errorf("after the current worker: %s", got.Status)
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
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err == nil {
		t.Fatal("first attempt passed; want it deferred")
	}
	stored := e.delivery(t, d.IdempotencyKey).MessageID
	if stored != mail.MessageID(d.IdempotencyKey, mailDomain) {
		t.Fatalf("stored Message-ID %q", stored)
	}
	other := worker.New(e.db.Pool, e.rdb, worker.Only("smtp", e.smtp(t)), e.templates, worker.Config{
		LockTTL: 10 * time.Second, MaxAge: time.Hour, ProbeInterval: time.Second, SendTimeout: 10 * time.Second,
		MessageIDDomain: "new-domain.example", WorkerID: "other", Queue: e.redis.Queue, Concurrency: 1,
	}, slog.New(slog.NewJSONHandler(e.logs, nil)), worker.NewMetrics(prometheus.NewRegistry()))
	e.deliver(t, other, d)
	if msgs := e.sink.ByMessageID(stored); len(msgs) != 1 {
		t.Errorf("%d messages with the stored Message-ID %s, want 1", len(msgs), stored)
	}
}
