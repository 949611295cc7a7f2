package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
)

// Send later and cancel: what the claim does with a delivery's time and
// with a delivery called off.

// reminder is the template of the tests' triggers: a shop's own, as the
// generic trigger sends.
const reminder = "payment-reminder"

// schedule triggers a payment reminder about d's order, to be sent at.
func (e *env) schedule(t *testing.T, d notify.Delivery, event string, at time.Time) notify.Delivery {
	t.Helper()
	sample, err := e.templates.Sample(reminder)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(sample, &data); err != nil {
		t.Fatal(err)
	}
	data["order_id"] = d.OrderID.String()
	raw, _ := json.Marshal(data)
	n, created, _, err := e.orders.Notify(context.Background(), d.OrderID, order.Trigger{
		Template: reminder, Data: raw, EventID: event, SendAt: at.Format(time.RFC3339Nano),
	}, order.Caller{}, "")
	if err != nil || !created {
		t.Fatalf("schedule: %+v, created %v, %v", n, created, err)
	}
	return e.delivery(t, n.IdempotencyKey)
}

// The claim itself refuses a delivery before its time, whatever runs its
// task (asynq's schedule is only punctual): the task comes back at the
// time, and the e-mail goes out then, once. Its tries are counted from
// the time, not from when it was recorded.
func TestScheduledDeliveryWaitsForItsTime(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	at := time.Now().Add(1500 * time.Millisecond)
	d := e.schedule(t, e.checkout(t, "budi@example.com"), "parcel-1", at)
	if d.NotBefore == nil || !d.NotBefore.Equal(at.UTC().Truncate(time.Microsecond)) || !d.TryingSince.Equal(*d.NotBefore) {
		t.Fatalf("recorded not_before %v, trying since %v; want both %v", d.NotBefore, d.TryingSince, at)
	}

	ins := asynq.NewInspector(e.redis.Opt)
	defer ins.Close()
	info, err := ins.GetTaskInfo(e.redis.Queue, queue.TaskID(d.ID))
	if err != nil || info.State != asynq.TaskStateScheduled || info.NextProcessAt.Before(at.Add(-time.Second)) {
		t.Errorf("the task: %+v, %v; want scheduled for %v", info, err, at)
	}

	err = w.ProcessTask(context.Background(), queue.NewDeliverTask(d)) // early, as a stray task would be
	if err == nil || worker.IsFailure(err) {
		t.Fatalf("an early task: %v, want a wait that is not a failure", err)
	}
	if wait := worker.RetryDelay(1, err, nil); wait < time.Second || wait > 2500*time.Millisecond {
		t.Errorf("the early task comes back in %s, want at its time (about 1.5 s)", wait)
	}
	e.emails(t, 0, "before the time")
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusPending || got.Attempts != 0 {
		t.Errorf("after an early task the delivery is %s after %d attempts, want pending and untouched", got.Status, got.Attempts)
	}

	e.deliver(t, w, d)
	msgs := e.sink.Messages()
	if len(msgs) != 1 || msgs[0].ReceivedAt.Before(at) {
		t.Fatalf("%d e-mails; the first at %v, want one at or after %v", len(msgs), msgs[0].ReceivedAt, at)
	}
}

// A cancel takes a pending delivery out for good, once, with its history
// row; a claimed one is too late; the task of a cancelled one sends
// nothing.
func TestCancel(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.schedule(t, e.checkout(t, "budi@example.com"), "parcel-1", time.Now().Add(time.Hour))
	got, err := e.ops.Cancel(context.Background(), d.ID, "operator:Ana", "paid by transfer", false)
	if err != nil || got.Status != notify.StatusCancelled {
		t.Fatalf("Cancel = %s, %v", got.Status, err)
	}
	if again, err := notify.Cancel(context.Background(), e.db.Pool, d.ID, notify.Canceller{Actor: "api", Operator: true}, ""); err != nil || again.Status != notify.StatusCancelled {
		t.Errorf("a second cancel = %s, %v; want cancelled, no error", again.Status, err)
	}
	_, history, err := e.ops.Get(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range history {
		if ev.Event == "cancelled" {
			n++
			if ev.Actor != "operator:Ana" || ev.FromStatus != "pending" || ev.ToStatus != "cancelled" || string(ev.Detail) != `{"note": "paid by transfer"}` {
				t.Errorf("history row %+v", ev)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d cancelled rows in the history, want 1", n)
	}
	e.deliver(t, w, d)
	e.emails(t, 0, "for a cancelled delivery")

	claimed := e.checkout(t, "ani@example.com")
	e.f.Claimed(claimed, time.Minute)
	if got, err := notify.Cancel(context.Background(), e.db.Pool, claimed.ID, notify.Canceller{Actor: "api", Operator: true}, ""); !errors.Is(err, notify.ErrWrongState) || got.Status != notify.StatusSending {
		t.Errorf("cancel of a claimed delivery = %s, %v; want sending, ErrWrongState", got.Status, err)
	}
}

// A cancel and a worker's claim that race end in exactly one of the
// two: cancelled and no e-mail, or one e-mail and not cancelled. The race
// is forced, not hoped for: a transaction holds the row locked while
// both the claim and the cancel reach it and wait on the lock (counted
// in pg_stat_activity, so the test fails if either never ran), then lets
// go. PostgreSQL hands the row to the first waiter, so the order is the
// test's choice, and both orders run.
func TestCancelRacesTheClaim(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	ctx := context.Background()
	op := notify.Canceller{Actor: "api", Operator: true}
	for i, claimFirst := range []bool{true, false, true, false} {
		d := e.checkout(t, fmt.Sprintf("budi-%d@example.com", i))
		tx, err := e.db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1 FROM notification_deliveries WHERE id = $1 FOR UPDATE", d.ID); err != nil {
			t.Fatal(err)
		}
		processed := make(chan error, 1)
		claim := func() { go func() { processed <- process(ctx, w, d) }() }
		var cancelled notify.Delivery
		var cancelErr error
		cancelDone := make(chan struct{})
		cancel := func() {
			go func() { defer close(cancelDone); cancelled, cancelErr = notify.Cancel(ctx, e.db.Pool, d.ID, op, "") }()
		}
		first, second, firstName, secondName := claim, cancel, "ClaimDeliveries", "CancelDelivery"
		if !claimFirst {
			first, second, firstName, secondName = cancel, claim, "CancelDelivery", "ClaimDeliveries"
		}
		first()
		testenv.WaitFor(t, firstName+" to wait on the row", 30*time.Second, func() bool { return testenv.LockWaiters(t, e.db.Pool, firstName) == 1 })
		second()
		testenv.WaitFor(t, secondName+" to wait on the row too", 30*time.Second, func() bool {
			return testenv.LockWaiters(t, e.db.Pool, secondName) == 1 && testenv.LockWaiters(t, e.db.Pool, firstName) == 1
		})
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		<-cancelDone
		if err := <-processed; err != nil {
			t.Fatalf("round %d: the task: %v", i, err)
		}
		got := e.delivery(t, d.IdempotencyKey)
		mails := len(e.sink.ByMessageID(got.MessageID))
		switch {
		case claimFirst && got.Status == notify.StatusSent && mails == 1 && errors.Is(cancelErr, notify.ErrWrongState) && cancelled.Status != notify.StatusCancelled:
		case !claimFirst && got.Status == notify.StatusCancelled && cancelErr == nil && cancelled.Status == notify.StatusCancelled && mails == 0 && got.MessageID == "":
		default:
			t.Errorf("round %d (claim first: %v): %s, cancel answered %s %v, %d e-mails", i, claimFirst, got.Status, cancelled.Status, cancelErr, mails)
		}
	}
}

// scheduleAs is schedule for an API key of owner.
func (e *env) scheduleAs(t *testing.T, d notify.Delivery, event string, owner uuid.UUID) notify.Delivery {
	t.Helper()
	sample, err := e.templates.Sample(reminder)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(sample, &data); err != nil {
		t.Fatal(err)
	}
	data["order_id"] = d.OrderID.String()
	raw, _ := json.Marshal(data)
	n, _, _, err := e.orders.Notify(context.Background(), d.OrderID, order.Trigger{
		Template: reminder, Data: raw, EventID: event, SendAt: time.Now().Add(time.Hour).Format(time.RFC3339Nano),
	}, order.Caller{Key: owner, Owner: owner}, "")
	if err != nil {
		t.Fatal(err)
	}
	return e.delivery(t, n.IdempotencyKey)
}

// "cancelled" says no provider has the e-mail. A pending delivery an
// earlier attempt of which may have been taken — pinned after a 5xx that
// came after the request was written, or by the reconciler, then
// retried — is not cancelled by anyone, the operator included: the
// cancel is refused as ErrMayHaveBeenSent and the row goes on as it was.
// Once nothing is unknown (a retry that lifts the pin: the operator
// checked the provider's log), or where nothing was ever taken (refused
// before the data), it is; and an operator who checked the provider's
// log may cancel it saying so (NotAtProvider), which no API key may.
func TestCancelNeverHidesAnAttemptThatMayHaveBeenTaken(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	ctx := context.Background()
	op := notify.Canceller{Actor: "operator:Ana", Operator: true}
	maybe := e.f.MaybeAccepted(e.checkout(t, "ana@example.com"), "resend")
	reconciled := e.f.Retried(e.f.HeldAt(e.checkout(t, "budi@example.com"), "postmark"), false)
	for name, d := range map[string]notify.Delivery{"a 5xx after the request": maybe, "held by the reconciler, retried pinned": reconciled} {
		if d.Status != notify.StatusPending || !d.MayHaveBeenSent() {
			t.Fatalf("%s: %s, may have been sent %v; want a pending delivery that may have been", name, d.Status, d.MayHaveBeenSent())
		}
		got, err := notify.Cancel(ctx, e.db.Pool, d.ID, op, "paid")
		if !errors.Is(err, notify.ErrMayHaveBeenSent) || !errors.Is(err, notify.ErrWrongState) || got.Status != notify.StatusPending {
			t.Errorf("%s: cancel = %s, %v; want it pending and ErrMayHaveBeenSent", name, got.Status, err)
		}
		if n, err := notify.CancelTemplate(ctx, e.db.Pool, d.OrderID, d.Template, op); err != nil || n != 0 {
			t.Errorf("%s: the template's cancel cancelled %d (%v), want 0", name, n, err)
		}
		if after := e.f.Get(d.ID); after.Status != notify.StatusPending || !after.ProviderPinned || after.UnsettledSince == nil {
			t.Errorf("%s: after the cancels: %s, pinned %v, unsettled since %v; want it untouched", name, after.Status, after.ProviderPinned, after.UnsettledSince)
		}
		history, err := notify.History(ctx, e.db.Pool, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range history {
			if ev.Event == "cancelled" {
				t.Errorf("%s: a cancelled row in the history: %+v", name, ev)
			}
		}
	}

	// Any key's (recorded before owners were: raw SQL on purpose), so that
	// only the operator's say-so is missing.
	e.corrupt(t, "UPDATE notification_deliveries SET owner_id = NULL WHERE id = $1", maybe.ID)
	checked := notify.Canceller{Actor: "api:key:shop", Owner: uuid.New(), NotAtProvider: true}
	if _, err := notify.Cancel(ctx, e.db.Pool, maybe.ID, checked, ""); !errors.Is(err, notify.ErrMayHaveBeenSent) {
		t.Errorf("a key's cancel saying not at the provider: %v, want ErrMayHaveBeenSent (only an operator may say so)", err)
	}
	got, err := e.ops.Cancel(ctx, maybe.ID, "operator:Ana", "resend's log has no such message", true)
	if err != nil || got.Status != notify.StatusCancelled {
		t.Errorf("an operator's cancel after checking the provider = %s, %v; want cancelled", got.Status, err)
	}
	history, err := notify.History(ctx, e.db.Pool, maybe.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := history[len(history)-1]; last.Event != "cancelled" || string(last.Detail) != `{"note": "resend's log has no such message", "not_at_provider": "resend"}` {
		t.Errorf("the history's cancel: %+v (%s); want the note and the provider checked", last, last.Detail)
	}

	unpinned := e.f.Retried(e.f.HeldAt(e.checkout(t, "citra@example.com"), "postmark"), true)
	deferred := e.f.Deferred(e.checkout(t, "dewi@example.com"), "421 try later", false)
	for name, d := range map[string]notify.Delivery{"retried with the pin lifted": unpinned, "refused before the data": deferred} {
		if d.MayHaveBeenSent() {
			t.Errorf("%s: may have been sent, want not", name)
		}
		if got, err := notify.Cancel(ctx, e.db.Pool, d.ID, op, "paid"); err != nil || got.Status != notify.StatusCancelled {
			t.Errorf("%s: cancel = %s, %v; want cancelled", name, got.Status, err)
		}
	}
}

// A notification is its owner's: an API key of another owner cannot
// cancel it, one by one or by template, and is told, as for one that does
// not exist, ErrNotFound; its own owner's key can, and an operator can
// cancel any. The public checkout's confirmations are no key's; rows
// recorded before owners were are any key's, as all were then.
func TestCancelBelongsToTheOwner(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	ctx := context.Background()
	shop, marketing := uuid.New(), uuid.New()
	byShop := notify.Canceller{Actor: "api:key:shop", Owner: shop}
	byMarketing := notify.Canceller{Actor: "api:key:marketing", Owner: marketing}

	reminder := e.scheduleAs(t, e.checkout(t, "ana@example.com"), "parcel-1", shop)
	if reminder.Owner == nil || *reminder.Owner != shop {
		t.Fatalf("the reminder's owner is %v, want the shop's key's %s", reminder.Owner, shop)
	}
	if got, err := notify.Cancel(ctx, e.db.Pool, reminder.ID, byMarketing, ""); !errors.Is(err, notify.ErrNotFound) || got.ID != uuid.Nil {
		t.Errorf("another owner's cancel = %+v, %v; want nothing told and ErrNotFound", got.Status, err)
	}
	if n, err := notify.CancelTemplate(ctx, e.db.Pool, reminder.OrderID, reminder.Template, byMarketing); err != nil || n != 0 {
		t.Errorf("another owner's cancel by template cancelled %d (%v), want 0", n, err)
	}
	if got := e.f.Get(reminder.ID); got.Status != notify.StatusPending {
		t.Fatalf("after another owner's cancels the reminder is %s, want pending", got.Status)
	}
	if n, err := notify.CancelTemplate(ctx, e.db.Pool, reminder.OrderID, reminder.Template, byShop); err != nil || n != 1 {
		t.Errorf("its owner's cancel by template cancelled %d (%v), want 1", n, err)
	}

	// The confirmation of a checkout without a key (the public
	// checkout's): PublicOwner.
	confirmation := e.checkout(t, "budi@example.com")
	if confirmation.Owner == nil || *confirmation.Owner != notify.PublicOwner {
		t.Fatalf("a public checkout's confirmation is owned by %v, want notify.PublicOwner", confirmation.Owner)
	}
	for _, c := range []notify.Canceller{byShop, {Actor: "api", Owner: notify.PublicOwner}} {
		if _, err := notify.Cancel(ctx, e.db.Pool, confirmation.ID, c, ""); !errors.Is(err, notify.ErrNotFound) {
			t.Errorf("a cancel of a public checkout's confirmation by %+v: %v, want ErrNotFound", c, err)
		}
	}
	if got, err := e.ops.Cancel(ctx, confirmation.ID, "operator:Ana", "fraud", false); err != nil || got.Status != notify.StatusCancelled {
		t.Errorf("an operator's cancel = %s, %v; want cancelled", got.Status, err)
	}

	// Recorded before migration 16: no owner. Raw SQL on purpose, to make
	// the row as an older release left it.
	legacy := e.scheduleAs(t, e.checkout(t, "citra@example.com"), "parcel-1", shop)
	e.corrupt(t, "UPDATE notification_deliveries SET owner_id = NULL WHERE id = $1", legacy.ID)
	if got, err := notify.Cancel(ctx, e.db.Pool, legacy.ID, byMarketing, ""); err != nil || got.Status != notify.StatusCancelled {
		t.Errorf("a key's cancel of a delivery recorded before owners = %s, %v; want cancelled", got.Status, err)
	}
}
