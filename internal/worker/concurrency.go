package worker

import (
	"context"
	"sync"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
)

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

// slot is one taken share of a limiter, given back once.
type slot struct {
	l    *limiter
	once sync.Once
}

// take waits for a slot.
func (l *limiter) take(ctx context.Context) (*slot, error) {
	if err := l.acquire(ctx); err != nil {
		return nil, err
	}
	return &slot{l: l}, nil
}

// release gives the slot back; again, it does nothing.
func (s *slot) release() { s.once.Do(s.l.release) }

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
		n, err := notify.Concurrency(ctx, w.rdb, queue)
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
