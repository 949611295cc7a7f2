package reconcile_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

const day = 24 * time.Hour

// retainer is a reconciler whose only work is retention: retention and
// the workers' DELIVERY_MAX_AGE as given.
func (e *env) retainer(t *testing.T, retention, maxAge time.Duration) *reconcile.Reconciler {
	t.Helper()
	return reconcile.New(e.db.Pool, e.enq, e.inspector, reconcile.Config{
		PendingAfter: time.Hour, Batch: 50, DefaultPolicy: reconcile.PolicyHold,
		MessageIDDomain: mailDomain, Actor: "reconciler-" + uuid.NewString()[:8],
		DeliveryRetention: retention, MaxAge: maxAge,
	}, slog.New(slog.NewJSONHandler(e.logs, nil)), prometheus.NewRegistry())
}

// finished makes d a delivery finished with status, whose tries began
// and which was last touched that long ago.
func (e *env) finished(t *testing.T, d notify.Delivery, status notify.Status, ago time.Duration) {
	t.Helper()
	switch status {
	case notify.StatusSent:
		d = e.f.Sent(d, "provider-id")
	case notify.StatusFailed:
		d = e.f.Failed(d, "550 no such user")
	case notify.StatusCancelled:
		var err error
		if d, err = notify.Cancel(context.Background(), e.db.Pool, d.ID, notify.Canceller{Actor: "api", Operator: true}, ""); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("finished: %s is not a final status", status)
	}
	e.f.Aged(d, ago)
}

func (e *env) exists(t *testing.T, d notify.Delivery) bool {
	t.Helper()
	var n int
	if err := e.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM notification_deliveries WHERE id = $1", d.ID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func (e *env) tombstone(t *testing.T, d notify.Delivery) bool {
	t.Helper()
	var n int
	if err := e.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM retired_deliveries WHERE delivery_id = $1", d.ID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// Retention never deletes a delivery whose tries began less than
// DELIVERY_MAX_AGE ago, however long it has been untouched: its key could
// still be in a worker's hands. Past both, it goes.
func TestRetentionKeepsDeliveriesYoungerThanMaxAge(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx := context.Background()
	const retention, maxAge = 30 * day, 60 * day
	old := e.pending(t, "old@example.com")
	oldCancelled := e.pending(t, "old-cancelled@example.com")
	youngSent := e.pending(t, "young-sent@example.com")
	youngFailed := e.pending(t, "young-failed@example.com")
	e.finished(t, old, notify.StatusSent, 100*day)                    // past both
	e.finished(t, oldCancelled, notify.StatusCancelled, 100*day)      // likewise
	e.finished(t, youngSent, notify.StatusSent, 40*day)               // past the retention, not the maximum age
	e.finished(t, youngFailed, notify.StatusFailed, maxAge-time.Hour) // likewise, an hour short of it

	rep, err := e.retainer(t, retention, maxAge).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []notify.Delivery{old, oldCancelled} {
		if e.exists(t, d) || !e.tombstone(t, d) {
			t.Errorf("report %v; %s, past both, exists: %v, has a tombstone: %v; want it deleted and retired",
				rep, d.Recipient, e.exists(t, d), e.tombstone(t, d))
		}
	}
	if rep.CleanedDeliveries != 2 {
		t.Errorf("report %v, want 2 deliveries cleaned", rep)
	}
	for _, d := range []notify.Delivery{youngSent, youngFailed} {
		if !e.exists(t, d) || e.tombstone(t, d) {
			t.Errorf("%s, past DELIVERY_RETENTION but younger than DELIVERY_MAX_AGE: exists %v, tombstone %v; want it kept, not retired",
				d.Recipient, e.exists(t, d), e.tombstone(t, d))
		}
	}

	// The maximum age is what kept them: without it they go.
	rep, err = e.retainer(t, retention, 0).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CleanedDeliveries != 2 || e.exists(t, youngSent) || e.exists(t, youngFailed) {
		t.Errorf("without a maximum age: report %v, want both deleted", rep)
	}
}

// An operator's retry (failed → pending) that commits while retention's
// DELETE waits for the row's lock keeps the row: the DELETE re-checks
// status and age on the row as committed, not only the ids step one
// picked. Two real connections: the retry's transaction holds the row,
// the retention pass blocks on it, then the retry commits.
func TestRetentionKeepsADeliveryRetriedWhileItsDeleteWaits(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := e.pending(t, "retried@example.com")
	e.finished(t, d, notify.StatusFailed, 100*day)

	// The operator's connection: the retry's own statement, uncommitted.
	opConn, err := pgx.Connect(ctx, e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer opConn.Close(context.Background())
	var opPID uint32
	if err := opConn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&opPID); err != nil {
		t.Fatal(err)
	}
	tx, err := opConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // committed below; this only runs on failure
	retried, err := dbsqlc.New(tx).OperatorRetry(ctx, dbsqlc.OperatorRetryParams{ID: d.ID, Actor: "operator:ana", Note: "mailbox fixed"})
	if err != nil || retried.Status != string(notify.StatusPending) {
		t.Fatalf("operator retry: %v, status %q", err, retried.Status)
	}

	// The retention pass, on the reconciler's own pool.
	type result struct {
		rep reconcile.Report
		err error
	}
	rec := e.retainer(t, 30*day, 0)
	done := make(chan result, 1)
	go func() {
		rep, err := rec.RunOnce(ctx)
		done <- result{rep, err}
	}()

	// Wait until the DELETE waits for the retry's row lock.
	waiting := func() bool {
		var n int
		err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			  AND query LIKE '%DELETE FROM notification_deliveries%'
			  AND $1::int = ANY(pg_blocking_pids(pid))`, int(opPID)).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for !waiting() {
		select {
		case r := <-done:
			t.Fatalf("the retention pass ended without waiting for the retry's lock: %v %v", r.rep, r.err)
		case <-ctx.Done():
			t.Fatal("timed out waiting for the retention DELETE to wait on the row lock")
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Step one ran on the row as it was committed, failed and old.
	if !e.tombstone(t, d) {
		t.Fatal("the DELETE waits, but step one left no tombstone: the race did not happen as intended")
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.rep.CleanedDeliveries != 0 {
		t.Errorf("report %v, want nothing deleted", r.rep)
	}
	if !e.exists(t, d) {
		t.Fatal("the retried delivery was deleted: the DELETE did not re-check its status and age under the row lock")
	}
	if got := e.get(t, d.ID); got.Status != notify.StatusPending || got.Attempts != 0 {
		t.Errorf("retried delivery: status %s, attempts %d; want pending, 0", got.Status, got.Attempts)
	}
	if e.tombstone(t, d) {
		t.Error("the kept delivery still has the tombstone step one wrote: retired_deliveries should hold only rows that are gone")
	}
}

// Two replicas' retention passes on the same rows (step one hands both
// the same oldest batch): the one whose DELETE finds the row already
// deleted by the other must keep the tombstone, or the key could be
// recorded, and sent, again. Both DELETEs are made to wait on a lock a
// test transaction holds on the row (the second queues behind the
// first), then run one after the other.
func TestTwoRetentionPassesKeepTheTombstone(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := e.pending(t, "twice-retired@example.com")
	e.finished(t, d, notify.StatusSent, 100*day)

	holder, err := pgx.Connect(ctx, e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // committed below; this only runs on failure
	if _, err := tx.Exec(ctx, "SELECT 1 FROM notification_deliveries WHERE id = $1 FOR UPDATE", d.ID); err != nil {
		t.Fatal(err)
	}

	type result struct {
		n   int
		err error
	}
	done := make(chan result, 2)
	for range 2 {
		go func() {
			n, err := notify.Retire(ctx, e.db.Pool, 30*day, 0, 50)
			done <- result{n, err}
		}()
	}
	for testenv.LockWaiters(t, e.db.Pool, "DELETE FROM notification_deliveries") < 2 {
		select {
		case r := <-done:
			t.Fatalf("a retention pass ended before both waited on the row: %d, %v", r.n, r.err)
		case <-ctx.Done():
			t.Fatal("timed out waiting for both retention DELETEs to wait on the row lock")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for range 2 {
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		deleted += r.n
	}
	if deleted != 1 || e.exists(t, d) {
		t.Errorf("%d deleted in all, row exists %v; want it deleted once", deleted, e.exists(t, d))
	}
	if !e.tombstone(t, d) {
		t.Error("the row is gone and so is its tombstone: its idempotency key could be recorded again")
	}
}
