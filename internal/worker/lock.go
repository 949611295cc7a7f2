package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sekali-dev/sekali/internal/keylock"
	"github.com/sekali-dev/sekali/internal/notify"
)

// heartbeat renews a task's locks and leases while its sends run: one
// goroutine, one pipeline to Redis and one statement to PostgreSQL a
// beat, for all of them.
type heartbeat struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startHeartbeat renews the locks and leases of the claimed jobs every
// LockTTL/3 until stop. A lock it finds gone marks its job (lockLost):
// that job sends nothing more. The lease is renewed even when the lock is
// gone: while the row's lease is ours, no other worker can claim it.
func (w *Worker) startHeartbeat(ctx context.Context, jobs []*job) *heartbeat {
	var held []*job
	for _, j := range jobs {
		if j.claimed && j.lockToken != "" {
			held = append(held, j)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	hb := &heartbeat{cancel: cancel}
	if len(held) == 0 {
		return hb
	}
	leases := make([]notify.Leased, len(held))
	locks := make([]keylock.Call, len(held))
	for i, j := range held {
		leases[i] = notify.Leased{ID: j.p.DeliveryID, Lease: j.lease}
		locks[i] = keylock.Call{KeyHash: j.p.KeyHash, Token: j.lockToken}
	}
	hb.wg.Go(func() {
		t := time.NewTicker(w.cfg.LockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			extended, err := w.lock.ExtendAll(ctx, locks)
			if ctx.Err() != nil {
				return
			}
			for i, j := range held {
				if err != nil || !extended[i] {
					j.lockLost.Store(true)
				}
			}
			notify.ExtendLeases(ctx, w.db, leases)
		}
	})
	return hb
}

// stop ends the heartbeat and waits for its last beat; again, it does
// nothing.
func (h *heartbeat) stop() {
	h.cancel()
	h.wg.Wait()
}

// unlockAll releases every lock the task's jobs hold, in one pipeline,
// caching "sent" for those recorded sent.
func (w *Worker) unlockAll(ctx context.Context, jobs []*job) {
	var held []*job
	var calls []keylock.Call
	for _, j := range jobs {
		if j.lockToken != "" {
			held = append(held, j)
			// A row found sent already is cached as one just recorded sent.
			sent := j.recordedSent || (j.step != nil && j.step.cacheSent)
			calls = append(calls, keylock.Call{KeyHash: j.p.KeyHash, Token: j.lockToken, Sent: sent})
		}
	}
	if len(calls) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	rs, err := w.lock.ReleaseAll(rctx, calls)
	for i, j := range held {
		r := keylock.Result{Err: err}
		if err == nil {
			r = rs[i]
		}
		if r.Err != nil {
			j.l.set(slog.String("release_error", r.Err.Error()))
			continue
		}
		if !r.Released && !j.lockLost.Load() {
			// The lock expired under us without the heartbeat noticing.
			w.metrics.lockExpired.Inc()
		}
	}
}
