package chaos_test

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A worker is killed (SIGKILL) at each named point of an attempt. Another
// worker and the reconciler take over; every order still gets exactly one
// e-mail.
func TestWorkerKilledAtEachPoint(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"after-dequeue", "after-lock", "after-claim", "before-data", "after-accept", "after-sent"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, smtpsink.Config{})
			c.startAPI()
			victim := c.startWorker("SEKALI_FAILPOINTS", point+"=kill")
			c.placeOrders("kill-"+point, 3)
			select {
			case <-victim.Done():
				if err := victim.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("worker exited with %v, want killed at %s", err, point)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("the worker never reached %s", point)
			}
			c.startWorker()
			c.startReconciler()
			c.settled(120 * time.Second)
			c.verdict("worker SIGKILL "+point, expect{})
		})
	}
}

// A worker is frozen (SIGSTOP) past its lock TTL and lease at three
// points, another worker and the reconciler take over, then the frozen
// one is woken (SIGCONT). Fencing and the data deadline keep it from
// writing or sending anything.
func TestWorkerFrozenPastItsLease(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"before-data", "after-handover", "after-accept"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, smtpsink.Config{})
			c.startAPI()
			frozen := c.startWorker("SEKALI_FAILPOINTS", point+"=stop", "WORKER_CONCURRENCY", "1")
			c.placeOrders("stop-"+point, 2)
			testenv.WaitFor(t, "the worker to freeze at "+point, 60*time.Second, frozen.Stopped)
			c.startWorker()
			c.startReconciler()
			c.settled(120 * time.Second)
			frozen.Signal(t, syscall.SIGCONT)
			// The woken worker finds its lease gone and writes nothing:
			// refused at the lease check, by its data deadline, or by the
			// fenced "sent" write.
			testenv.WaitFor(t, "the woken worker to be fenced out", 30*time.Second, func() bool {
				return strings.Contains(frozen.Output(), `"result":"fenced_out"`)
			})
			c.verdict("worker SIGSTOP past lease "+point, expect{})
		})
	}
}

// The API dies between its commit and its enqueue: the intent exists, the
// task does not. The client retries with its Idempotency-Key against the
// restarted API and gets the order; the reconciler queues the e-mail.
func TestAPIKilledBetweenCommitAndEnqueue(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{})
	api := c.startAPI("SEKALI_FAILPOINTS", "api-after-commit=kill")
	c.startWorker()
	c.startReconciler()
	c.start = time.Now()
	status, _, err := c.checkout("api-crash@example.com", "retry-me")
	if err == nil {
		t.Fatalf("checkout answered %d; want the connection to break as the API dies", status)
	}
	<-api.Done()
	c.startAPI()
	status, p, err := c.checkout("api-crash@example.com", "retry-me")
	if err != nil || status != 201 {
		t.Fatalf("retry after the crash: %d %v", status, err)
	}
	c.orders = append(c.orders, p)
	c.settled(60 * time.Second)
	c.verdict("API SIGKILL between commit and enqueue", expect{})
}

// The same task enqueued ten times (other task ids, as a buggy producer
// or a replay would), with five workers racing for them.
func TestSameTaskTenTimesFiveWorkers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 50 * time.Millisecond }})
	c.startAPI()
	c.placeOrders("tenfold", 5)
	client := asynq.NewClient(c.redis.Opt)
	defer client.Close()
	for _, o := range c.orders {
		d := notify.Delivery{ID: o.DeliveryID, IdempotencyKey: o.Key}
		for i := 0; i < 10; i++ {
			if _, err := client.Enqueue(queue.NewDeliverTask(d), asynq.Queue(c.redis.Queue)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < 5; i++ {
		c.startWorker()
	}
	c.settled(60 * time.Second)
	c.verdict("same task x10, 5 workers", expect{})
}

// A client that times out and resends the same checkout, 50 times at
// once, with one Idempotency-Key: one order, one e-mail.
func TestProducerResendsFiftyTimes(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{})
	c.startAPI()
	c.startWorker()
	c.start = time.Now()
	var wg sync.WaitGroup
	ids := make(chan uuid.UUID, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; attempt < 100; attempt++ {
				status, p, err := c.checkout("resend@example.com", "one-click")
				if err == nil && status == 201 {
					ids <- p.OrderID
					return
				}
				time.Sleep(20 * time.Millisecond) // 409: the first is still in flight
			}
			t.Error("a resend never got its order")
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[uuid.UUID]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != 1 {
		t.Errorf("the resends were answered with %d different orders", len(seen))
	}
	c.settled(60 * time.Second)
	if r := c.verdict("producer resend x50, one Idempotency-Key", expect{}); r.Orders != 1 {
		t.Errorf("%d orders, want 1", r.Orders)
	}
}

// SIGTERM while a batch is being sent: the worker finishes what it holds
// and exits cleanly; nothing is left pending or sending.
func TestSIGTERMDuringABatch(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 200 * time.Millisecond }})
	c.startAPI()
	victim := c.startWorker()
	c.startWorker()
	c.placeOrders("term", 20)
	testenv.WaitFor(t, "the batch to be under way", 30*time.Second, func() bool { return c.emailCount() >= 2 })
	victim.Signal(t, syscall.SIGTERM)
	select {
	case <-victim.Done():
		if err := victim.Err(); err != nil {
			t.Errorf("the worker exited with %v after SIGTERM, want a clean exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not exit after SIGTERM")
	}
	c.settled(60 * time.Second)
	c.verdict("SIGTERM during a batch", expect{})
}
