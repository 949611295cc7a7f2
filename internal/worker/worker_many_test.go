package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

// statements is how many statements of kind ran (claim, hand_over,
// sent): the count of sekali_statement_batch_size's observations.
func statements(t *testing.T, g prometheus.Gatherer, kind string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sekali_statement_batch_size" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "statement" && l.GetValue() == kind {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// A task of many deliveries: each is an attempt of its own (its lock, its
// claim, its log line) and all are under way at once, so that one claim,
// one hand-over and one "sent" statement take many of them. The one whose
// lock another worker holds comes back in a task of its own, after its
// own wait, and the task is done; run again, the task finds every
// delivery it sent already sent, and sends nothing.
func TestATaskOfManyDeliveries(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	const n = 10
	ds := make([]notify.Delivery, n)
	for i := range ds {
		ds[i] = e.checkout(t, fmt.Sprintf("many-%d@example.com", i))
	}
	// The checkouts' own tasks are not this test's: only the task of many
	// runs, and a delivery that comes back comes back in a task it queued.
	ins := asynq.NewInspector(e.redis.Opt)
	t.Cleanup(func() { ins.Close() })
	if _, err := ins.DeleteAllPendingTasks(e.redis.Queue); err != nil {
		t.Fatal(err)
	}
	busy := ds[3]
	workertest.HoldLock(t, e.rdb, busy, time.Minute)

	task := queue.NewDeliveriesTask(ds)
	if err := w.ProcessTask(context.Background(), task); err != nil {
		t.Fatalf("the task of many: %v, want done", err)
	}
	e.emails(t, n-1, "after the task of many")
	for i, d := range ds {
		got := e.f.Get(d.ID)
		if want := map[bool]notify.Status{true: notify.StatusPending, false: notify.StatusSent}[i == 3]; got.Status != want {
			t.Errorf("delivery %d: %s, want %s", i, got.Status, want)
		}
	}
	info, err := ins.GetTaskInfo(e.redis.Queue, queue.TaskID(busy.ID))
	if err != nil {
		t.Fatalf("the delivery whose lock was busy has no task of its own: %v", err)
	}
	if info.State != asynq.TaskStateScheduled {
		t.Errorf("its task is %s, next at %v: want scheduled after its own wait", info.State, info.NextProcessAt)
	}
	if claims, deliveries := statements(t, e.reg, "claim"), statements(t, e.reg, "sent"); claims >= n-1 || deliveries >= n-1 {
		t.Errorf("%d claim and %d sent statements for %d deliveries under way at once, want fewer: they share them", claims, deliveries, n-1)
	}
	logs := e.logs.String()
	if got := strings.Count(logs, `"msg":"delivery attempt"`); got != n {
		t.Errorf("%d delivery attempt lines, want one per delivery (%d)", got, n)
	}
	if !strings.Contains(logs, `"msg":"task of many deliveries"`) || !strings.Contains(logs, `"deliveries":10`) ||
		!strings.Contains(logs, `"requeued":1`) || !strings.Contains(logs, `"member":9`) {
		t.Errorf("no line for the task saying its deliveries and the one requeued:\n%s", logs)
	}

	// Run again, as asynq would after a crash before the acknowledgement:
	// nothing sent twice, the busy one still waits for its lock.
	if err := w.ProcessTask(context.Background(), task); err != nil {
		t.Fatalf("the task again: %v", err)
	}
	e.emails(t, n-1, "after the task ran again")
	if dup := e.counter(t, "sekali_duplicate_detected_total", "layer", "cache"); dup != n-1 {
		t.Errorf("%v duplicates caught by the cache, want %d", dup, n-1)
	}
}

// A task of many that names a delivery twice, or a member the claim
// could not take, is refused whole before any attempt: nothing sent.
func TestABadTaskOfManySendsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "twice@example.com")
	payload := `{"deliveries":[{"delivery_id":"` + d.ID.String() + `","key_hash":"` + strings.Repeat("a", 32) + `"},{"delivery_id":"` +
		d.ID.String() + `","key_hash":"` + strings.Repeat("a", 32) + `"}]}`
	err := w.ProcessTask(context.Background(), asynq.NewTask(queue.TaskTypeDeliver, []byte(payload)))
	if !errors.Is(err, asynq.SkipRetry) || !strings.Contains(err.Error(), "named twice") {
		t.Errorf("err = %v, want SkipRetry saying the delivery is named twice", err)
	}
	e.emails(t, 0, "after a bad task")
}
