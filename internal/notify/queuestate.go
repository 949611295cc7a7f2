package notify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// What the workers of a queue and its operators share in Redis: the
// per-worker concurrency limit an operator sets and every worker follows
// (internal/worker's WatchConcurrency), and each worker's view of its
// providers, which the workers publish and the admin API reads.

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

// ProviderState is what one worker last said about one provider.
type ProviderState struct {
	WorkerID  string    `json:"worker_id"`
	Provider  string    `json:"provider"`
	Up        bool      `json:"up"`
	Reason    string    `json:"reason,omitempty"` // why it refuses us, while down; addresses redacted
	Since     time.Time `json:"since"`            // of the current state
	CheckedAt time.Time `json:"checked_at"`
	// ValidUntil: a state not refreshed by then belongs to a worker that
	// stopped, and is dropped.
	ValidUntil time.Time `json:"valid_until"`
	// Pace is the pace the worker sends through the provider at; nil:
	// unpaced (or a worker from before paces were published).
	Pace *PaceConfig `json:"pace,omitempty"`
}

// ProviderStateKey is the Redis hash of every worker's ProviderState, by
// worker id and provider.
func ProviderStateKey(queue string) string { return "sekali:provider:" + queue }

// ProviderStates returns what the live workers of queue say about the
// provider, by worker id; states of workers that stopped are removed.
func ProviderStates(ctx context.Context, rdb redis.UniversalClient, queue string) ([]ProviderState, error) {
	all, err := rdb.HGetAll(ctx, ProviderStateKey(queue)).Result()
	if err != nil {
		return nil, fmt.Errorf("read provider state: %w", err)
	}
	now := time.Now()
	out := []ProviderState{}
	var stale []string
	for id, v := range all {
		var s ProviderState
		if json.Unmarshal([]byte(v), &s) != nil || s.ValidUntil.Before(now) {
			stale = append(stale, id)
			continue
		}
		out = append(out, s)
	}
	if len(stale) > 0 {
		_ = rdb.HDel(ctx, ProviderStateKey(queue), stale...).Err() // tidying only
	}
	slices.SortFunc(out, func(a, b ProviderState) int {
		return cmp.Or(strings.Compare(a.WorkerID, b.WorkerID), strings.Compare(a.Provider, b.Provider))
	})
	return out, nil
}

// DefaultQueue is the asynq queue deliveries travel on unless configured.
const DefaultQueue = "notifications"

// LaterQueue is the queue beside queue whose tasks workers take only
// while queue has none (asynq's strict priority): mail that may wait —
// a subscription template's, a delivery scheduled for later — so that a
// flash sale's confirmations never wait behind a newsletter's ten
// thousand when the provider's pace is scarce.
func LaterQueue(queue string) string { return queue + "-later" }

// Queues are queue and its LaterQueue: every queue a delivery of queue
// travels on, the order workers take them in.
func Queues(queue string) []string { return []string{queue, LaterQueue(queue)} }

// QueueInfo returns asynq's statistics for queue. A queue that has never
// held a task is not in asynq's list of queues and reads as empty; it can
// still be paused, which asynq's inspector does not report for it, so
// that is read from the queue's pause key (asynq:{<queue>}:paused, asynq
// v0.26's layout).
func QueueInfo(ctx context.Context, ins *asynq.Inspector, rdb redis.UniversalClient, queue string) (*asynq.QueueInfo, error) {
	queues, err := ins.Queues()
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	if !slices.Contains(queues, queue) {
		n, err := rdb.Exists(ctx, "asynq:{"+queue+"}:paused").Result()
		if err != nil {
			return nil, fmt.Errorf("read pause of queue %s: %w", queue, err)
		}
		return &asynq.QueueInfo{Queue: queue, Paused: n == 1}, nil
	}
	info, err := ins.GetQueueInfo(queue)
	if err != nil {
		return nil, fmt.Errorf("inspect queue %s: %w", queue, err)
	}
	return info, nil
}
