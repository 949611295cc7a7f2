package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

// The worker's lock and status cache on a Redis Cluster: a busy lock is
// a retry, the delivery is sent once with "sent" cached beside its lock's
// slot, and a redelivery is answered by the cache.
func TestWorkerOnRedisCluster(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	standalone := e.rdb
	t.Cleanup(func() { standalone.Close() })
	e.rdb = redisconn.NewClient(testenv.NewRedisCluster(t).Opt) // closed by setup's clean-up
	w := e.worker(t, workerOpts{})
	d := e.checkout(t, "gita@example.com")
	ctx := context.Background()
	lock := workertest.LockKey(d)
	workertest.HoldLock(t, e.rdb, d, time.Minute)
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err == nil || worker.IsFailure(err) {
		t.Fatalf("err = %v with the lock held elsewhere, want a retryable non-failure", err)
	}
	if n := e.counter(t, "sekali_lock_acquire_failed_total"); n != 1 {
		t.Errorf("lock_acquire_failed_total = %v, want 1", n)
	}
	if err := e.rdb.Del(ctx, lock).Err(); err != nil {
		t.Fatal(err)
	}

	e.deliver(t, w, d)
	if got := e.delivery(t, d.IdempotencyKey); got.Status != notify.StatusSent {
		t.Errorf("delivery %s, want sent", got.Status)
	}
	if v := e.rdb.Get(ctx, workertest.SentKey(d)).Val(); v != "sent" {
		t.Errorf("status cache = %q, want sent", v)
	}
	if n := e.rdb.Exists(ctx, lock).Val(); n != 0 {
		t.Error("the lock outlived the attempt")
	}
	e.deliver(t, w, d)
	if n := e.counter(t, "sekali_duplicate_detected_total", "layer", "cache"); n != 1 {
		t.Errorf("duplicates caught by the cache = %v, want 1", n)
	}
	e.emails(t, 1, "")
}
