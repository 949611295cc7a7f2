// Package workertest is what tests of other packages need of a worker:
// serving one as cmd/worker does, and a delivery's names in Redis.
package workertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/keylock"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/worker"
)

// LockKey and SentKey are a delivery's names in Redis: the lock a
// worker holds while it tries, and the cache entry that says "sent".
func LockKey(d notify.Delivery) string { return keylock.LockKey(mail.KeyHash(d.IdempotencyKey)) }
func SentKey(d notify.Delivery) string { return keylock.SentKey(mail.KeyHash(d.IdempotencyKey)) }

// HoldLock takes d's lock as another worker would, for ttl.
func HoldLock(t testing.TB, rdb redis.UniversalClient, d notify.Delivery, ttl time.Duration) {
	t.Helper()
	if err := rdb.Set(context.Background(), LockKey(d), "another-worker", ttl).Err(); err != nil {
		t.Fatalf("workertest: hold the lock of %s: %v", d.ID, err)
	}
}

// Serve runs w from its queue as cmd/worker does (worker.Worker.Run)
// until the test ends or stop is called; stop drains w and waits for the
// sends under way, as SIGTERM does.
func Serve(t testing.TB, w *worker.Worker, cfg worker.ServerConfig) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, cfg) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("workertest: worker server: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
