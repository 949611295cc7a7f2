package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// Send later and cancel: what the claim does with a delivery's time and
// with a delivery called off.

// schedule triggers a shipment e-mail about d's order, to be sent at.
func (e *env) schedule(t *testing.T, d notify.Delivery, event string, at time.Time) notify.Delivery {
	t.Helper()
	sample, err := e.templates.Sample(order.TemplateShipped)
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
		Template: order.TemplateShipped, Data: raw, EventID: event, SendAt: at.Format(time.RFC3339Nano),
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
	info, err := ins.GetTaskInfo(e.redis.Queue, notify.TaskID(d.ID))
	if err != nil || info.State != asynq.TaskStateScheduled || info.NextProcessAt.Before(at.Add(-time.Second)) {
		t.Errorf("the task: %+v, %v; want scheduled for %v", info, err, at)
	}

	err = w.ProcessTask(context.Background(), notify.NewDeliverTask(d)) // early, as a stray task would be
	if err == nil || notify.IsFailure(err) {
		t.Fatalf("an early task: %v, want a wait that is not a failure", err)
	}
	if wait := notify.RetryDelay(1, err, nil); wait < time.Second || wait > 2500*time.Millisecond {
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
	got, err := e.ops.Cancel(context.Background(), d.ID, "operator:Ana", "paid by transfer")
	if err != nil || got.Status != notify.StatusCancelled {
		t.Fatalf("Cancel = %s, %v", got.Status, err)
	}
	if again, err := notify.Cancel(context.Background(), e.db.Pool, d.ID, "api", ""); err != nil || again.Status != notify.StatusCancelled {
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
	if got, err := notify.Cancel(context.Background(), e.db.Pool, claimed.ID, "api", ""); !errors.Is(err, notify.ErrWrongState) || got.Status != notify.StatusSending {
		t.Errorf("cancel of a claimed delivery = %s, %v; want sending, ErrWrongState", got.Status, err)
	}
}

// A cancel and a worker's claim that race end in exactly one of the
// two: cancelled and no e-mail, or one e-mail and not cancelled.
func TestCancelRacesTheClaim(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	const n = 40
	ds := make([]notify.Delivery, n)
	for i := range ds {
		ds[i] = e.checkout(t, "budi@example.com")
	}
	var wg sync.WaitGroup
	cancelled := make([]bool, n)
	for i, d := range ds {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = process(context.Background(), w, d)
		}()
		go func() {
			defer wg.Done()
			// Spread over the time an attempt takes to reach its claim,
			// so that both orders happen.
			time.Sleep(time.Duration(i%10) * 15 * time.Millisecond)
			got, err := notify.Cancel(context.Background(), e.db.Pool, d.ID, "api", "")
			cancelled[i] = err == nil && got.Status == notify.StatusCancelled
		}()
	}
	wg.Wait()
	sent := 0
	for i, d := range ds {
		got := e.delivery(t, d.IdempotencyKey)
		mails := len(e.sink.ByMessageID(got.MessageID))
		switch {
		case got.Status == notify.StatusCancelled && cancelled[i] && mails == 0 && got.MessageID == "":
		case got.Status == notify.StatusSent && !cancelled[i] && mails == 1:
			sent++
		default:
			t.Errorf("delivery %d: %s, cancel said %v, %d e-mails", i, got.Status, cancelled[i], mails)
		}
	}
	t.Logf("%d sent, %d cancelled", sent, n-sent)
	if sent == 0 || sent == n {
		t.Logf("the race went one way only (%d of %d sent): the timing did not exercise both orders this run", sent, n)
	}
}
