package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A held delivery an operator found at the provider becomes sent, and its
// last error (why it was held) goes: it no longer describes the delivery.
func TestOperatorMarkSentClearsTheLastError(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	d := e.checkout(t, "held@example.com")
	e.f.Held(d, "outcome unknown and no provider look-up")
	got, err := e.ops.MarkSent(context.Background(), d.ID, "MH-1", "operator", "seen at the provider")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != notify.StatusSent || got.LastError != "" || got.ProviderMessageID != "MH-1" {
		t.Errorf("after mark-sent: %s, last_error %q, provider id %q", got.Status, got.LastError, got.ProviderMessageID)
	}
}

// The admin filter takes the nil UUID as a value: it matches no order,
// rather than meaning "no filter" and returning every delivery.
func TestOperatorListTakesTheNilOrderIDAsAValue(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	e.checkout(t, "someone@example.com")
	all, err := e.ops.List(context.Background(), notify.Filter{Limit: 10})
	if err != nil || len(all) != 1 {
		t.Fatalf("no filter: %d deliveries, %v", len(all), err)
	}
	nilID := uuid.Nil
	none, err := e.ops.List(context.Background(), notify.Filter{Limit: 10, OrderID: &nilID})
	if err != nil || len(none) != 0 {
		t.Errorf("order_id = the nil UUID: %d deliveries, %v", len(none), err)
	}
}

// The series dashboards and alert rules use exist from the start, at
// zero: a rate() alert then fires on the first event, and a panel shows
// "0" rather than "no data".
func TestWorkerSeriesExistFromTheStart(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	e.worker(t, workerOpts{})
	for _, s := range [][]string{
		{"sekali_job_retry_total", "reason", "smtp_4xx"},
		{"sekali_job_retry_total", "reason", "provider_unavailable"},
		{"sekali_job_retry_total", "reason", "lock_busy"},
		{"sekali_duplicate_detected_total", "layer", "fencing"},
		{"sekali_deliveries_total", "template", "order-shipped", "outcome", "failed"},
		{"sekali_tasks_handed_back_total", "reason", "unknown_template"},
		{"sekali_provider_up"},
		{"sekali_lock_expired_before_completion_total"},
	} {
		if !testenv.HasSeries(t, e.reg, s[0], s[1:]...) {
			t.Errorf("%v is missing before any event", s)
		}
	}
	if !testenv.HasSeries(t, e.apiReg, "sekali_idempotency_conflict_total", "reason", "payload_mismatch") {
		t.Error("sekali_idempotency_conflict_total{reason=payload_mismatch} is missing before any conflict")
	}
}

// An operator's action and its record commit together: when the record
// cannot be written, a change in the database is not made at all, and
// one in Redis (the queue paused) stands and says it was not recorded.
func TestOperatorActionsCommitWithTheirRecord(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	ctx := context.Background()
	d := e.checkout(t, "held@example.com")
	e.f.Held(d, "outcome unknown")
	// Corrupted on purpose: operator_actions refuses every record.
	if _, err := e.db.Pool.Exec(ctx, `ALTER TABLE operator_actions ADD CONSTRAINT refuse_all CHECK (false) NOT VALID`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ops.AddBlock(ctx, "operator:Ana (k)", "recipient", "ana@example.com", "complaint", time.Hour); err == nil {
		t.Error("a block whose record failed was added")
	}
	if bs, err := e.ops.Blocks(ctx); err != nil || len(bs) != 0 {
		t.Errorf("blocks after a failed record: %+v, %v; want none", bs, err)
	}
	if _, err := e.ops.MarkSent(ctx, d.ID, "MH-1", "operator:Ana (k)", "seen"); err == nil {
		t.Error("a mark-sent whose record failed succeeded")
	}
	if got := e.f.Get(d.ID); got.Status != notify.StatusHeld {
		t.Errorf("after a mark-sent whose record failed the delivery is %s, want held", got.Status)
	}
	if err := e.ops.Pause(ctx, "operator:Ana (k)", "incident"); !errors.Is(err, notify.ErrNotRecorded) {
		t.Errorf("a pause whose record failed: %v, want ErrNotRecorded", err)
	}
	if q, err := e.ops.Queue(ctx); err != nil || !q.Paused {
		t.Errorf("after a pause whose record failed the queue is %+v, %v; want paused: it was done", q, err)
	}
}
