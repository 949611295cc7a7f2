package worker_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

// Fencing: a worker that lost its lease or lock, or stalled past its
// deadline, sends and writes nothing more.

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

// takeOver gives the row to another worker: its lease runs out, and a
// new one is taken (notifytest.TakenOver).
func (e *env) takeOver(t *testing.T, d notify.Delivery) {
	t.Helper()
	e.f.TakenOver(d)
}

// Another worker took the row over while this one was stalled before the
// data: the last lease check refuses, and nothing is sent or written.
func TestLeaseLostBeforeDataSendsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	d := e.checkout(t, "kartika@example.com")
	w := e.worker(t, workerOpts{provider: pausingProvider{Provider: e.smtp(t), beforeData: func() { e.takeOver(t, d) }}})

	if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d)); err != nil {
		t.Fatalf("err = %v", err)
	}
	e.emails(t, 0, "sent by a worker that lost its lease")
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

	if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d)); err != nil {
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
	lock := workertest.LockKey(d)
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
	err := w.ProcessTask(ctx, queue.NewDeliverTask(d))
	if err == nil || isSkipRetry(err) {
		t.Fatalf("err = %v, want a retry", err)
	}
	e.emails(t, 0, "sent without the lock")
	got := e.delivery(t, d.IdempotencyKey)
	if got.Status != notify.StatusPending || !strings.Contains(got.LastError, "lock expired") {
		t.Errorf("row: %+v", got)
	}
	if n := e.counter(t, "sekali_lock_expired_before_completion_total"); n != 1 {
		t.Errorf("lock_expired_before_completion_total = %v, want 1", n)
	}
	e.deliver(t, e.worker(t, workerOpts{}), d)
	e.emails(t, 1, "after the retry")
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
	err = w.ProcessTask(context.Background(), queue.NewDeliverTask(d))
	if err == nil || isSkipRetry(err) {
		t.Fatalf("err = %v, want a temporary failure", err)
	}
	e.emails(t, 0, "written after the deadline")
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
	w := worker.New(e.db.Pool, e.rdb, worker.Only("smtp", slow), e.templates, worker.Config{
		LockTTL: 10 * time.Second, MaxAge: time.Hour, ProbeInterval: time.Second, SendTimeout: 500 * time.Millisecond,
		MessageIDDomain: mailDomain, WorkerID: t.Name(), Concurrency: 1,
	}, slog.New(slog.NewJSONHandler(e.logs, nil)), e.metrics)
	d := e.checkout(t, "slow@example.com")
	if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d)); err != nil {
		t.Fatal(err)
	}
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent {
		t.Errorf("row after a late accept: %s (%s)", got.Status, got.LastError)
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
	w := worker.New(pool, e.rdb, worker.Only("smtp", e.smtp(t)), e.templates, worker.Config{
		WorkerID: "test", LockTTL: 5 * time.Second, SendTimeout: 5 * time.Second, MaxAge: time.Hour, MessageIDDomain: "shop.example", Concurrency: 1,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), worker.NewMetrics(prometheus.NewRegistry()))
	if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(d)); err != nil {
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

// A provider that panics mid-send (asynq recovers the panic and the
// worker goes on) must not leave the attempt's heartbeat renewing its
// lease for ever: the row would never look stale to the reconciler, and
// every later task would find the lock busy.
func TestPanicInTheProviderStopsTheHeartbeat(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	const ttl = 3 * time.Second
	w := e.worker(t, workerOpts{provider: panicking{}, lockTTL: ttl})
	d := e.checkout(t, "panic@example.com")
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the provider's panic did not reach the caller")
			}
		}()
		_ = w.ProcessTask(context.Background(), queue.NewDeliverTask(d))
	}()
	// Two lease lengths later the lease has run out: nothing renews it.
	time.Sleep(2 * ttl)
	if got := e.f.Get(d.ID); got.Status != notify.StatusSending || got.LeaseExpiresAt == nil || got.LeaseExpiresAt.After(time.Now()) {
		t.Errorf("%s, lease until %v; want sending with its lease run out, for the reconciler", got.Status, got.LeaseExpiresAt)
	}
}

// panicking hands over, then panics.
type panicking struct{}

func (panicking) Send(_ context.Context, _ mail.Message, handOver func() error) (string, error) {
	if err := handOver(); err != nil {
		return "", err
	}
	panic("provider bug")
}

func (panicking) Probe(context.Context) error { return nil }
