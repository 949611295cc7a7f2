package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// asynq fixes a server's concurrency when it starts. An operator who must
// slow sending down (the runbook's "reduce worker concurrency") sets a
// lower limit in Redis instead; every worker reads it every few seconds
// and lets at most that many deliveries run at once, up to its own
// WORKER_CONCURRENCY. Deleting the key restores the full concurrency.

// ConcurrencyKey is the Redis key holding the per-worker limit for queue.
func ConcurrencyKey(queue string) string { return "sekali:concurrency:" + queue }

// SetConcurrency sets (n > 0) or clears (n == 0) the per-worker limit.
func SetConcurrency(ctx context.Context, rdb redis.UniversalClient, queue string, n int) error {
	var err error
	if n == 0 {
		err = rdb.Del(ctx, ConcurrencyKey(queue)).Err()
	} else {
		err = rdb.Set(ctx, ConcurrencyKey(queue), n, 0).Err()
	}
	if err != nil {
		return fmt.Errorf("set worker concurrency: %w", err)
	}
	return nil
}

// Concurrency returns the per-worker limit in force, 0 when none is set.
func Concurrency(ctx context.Context, rdb redis.UniversalClient, queue string) (int, error) {
	n, err := rdb.Get(ctx, ConcurrencyKey(queue)).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read worker concurrency: %w", err)
	}
	return n, nil
}

// limiter is a counting semaphore whose size can change while in use.
type limiter struct {
	mu      sync.Mutex
	limit   int
	active  int
	changed chan struct{}
}

func newLimiter(n int) *limiter { return &limiter{limit: n, changed: make(chan struct{})} }

func (l *limiter) acquire(ctx context.Context) error {
	for {
		l.mu.Lock()
		if l.active < l.limit {
			l.active++
			l.mu.Unlock()
			return nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *limiter) release() {
	l.mu.Lock()
	l.active--
	l.wake()
	l.mu.Unlock()
}

func (l *limiter) set(n int) {
	l.mu.Lock()
	if n != l.limit {
		l.limit = n
		l.wake()
	}
	l.mu.Unlock()
}

// wake lets every waiter look again; l.mu is held.
func (l *limiter) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// WatchConcurrency keeps the worker's limit in step with the one in Redis
// until ctx ends; full is the server's WORKER_CONCURRENCY.
func (w *Worker) WatchConcurrency(ctx context.Context, queue string, full int, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	current := full
	for {
		n, err := Concurrency(ctx, w.lock.rdb, queue)
		switch {
		case err != nil && ctx.Err() == nil:
			w.log.Warn("cannot read the concurrency limit; keeping the current one", "error", err.Error(), "limit", current)
		case err == nil:
			if n <= 0 || n > full {
				n = full
			}
			if n != current {
				w.log.Info("worker concurrency changed", "from", current, "to", n, "queue", queue)
				current = n
				w.limit.set(n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
