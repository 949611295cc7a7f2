package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sekali-dev/sekali/internal/mail"
)

// The worker's circuit breaker on the provider. A send that meets
// OutcomeUnavailable (the provider refuses us, not the message) opens it;
// a probe that succeeds closes it:
//
//	up ──(a send is refused as OutcomeUnavailable)──▶ down
//	down ──(Provider.Probe succeeds, every PROVIDER_PROBE_INTERVAL)──▶ up
//
// While it is open no task claims a delivery: each goes back to the queue
// and comes again shortly after the next probe, using up nothing, so the
// whole backlog goes out within a minute of the provider's return rather
// than after each delivery's own exponential back-off.

// health is one worker's view of the provider.
type health struct {
	mu     sync.Mutex
	down   bool
	reason string
	since  time.Time
	up     prometheus.Gauge
}

func newHealth(up prometheus.Gauge) *health {
	up.Set(1)
	return &health{since: time.Now(), up: up}
}

// available reports whether sends may go to the provider.
func (h *health) available() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.down
}

// markDown opens the breaker (or updates its reason); opened reports a
// transition.
func (h *health) markDown(reason string) (opened bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reason = reason
	if h.down {
		return false
	}
	h.down, h.since = true, time.Now()
	h.up.Set(0)
	return true
}

// markUp closes the breaker; closed reports a transition.
func (h *health) markUp() (closed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return false
	}
	h.down, h.reason, h.since = false, "", time.Now()
	h.up.Set(1)
	return true
}

func (h *health) state() (down bool, reason string, since time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down, h.reason, h.since
}

// ProviderState is what one worker last said about the provider.
type ProviderState struct {
	WorkerID  string    `json:"worker_id"`
	Up        bool      `json:"up"`
	Reason    string    `json:"reason,omitempty"` // why it refuses us, while down; addresses redacted
	Since     time.Time `json:"since"`            // of the current state
	CheckedAt time.Time `json:"checked_at"`
	// ValidUntil: a state not refreshed by then belongs to a worker that
	// stopped, and is dropped.
	ValidUntil time.Time `json:"valid_until"`
}

// providerKey is the Redis hash of every worker's ProviderState, by worker id.
func providerKey(queue string) string { return "sekali:provider:" + queue }

// ProviderStates returns what the live workers of queue say about the
// provider, by worker id; states of workers that stopped are removed.
func ProviderStates(ctx context.Context, rdb redis.UniversalClient, queue string) ([]ProviderState, error) {
	all, err := rdb.HGetAll(ctx, providerKey(queue)).Result()
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
		_ = rdb.HDel(ctx, providerKey(queue), stale...).Err() // tidying only
	}
	slices.SortFunc(out, func(a, b ProviderState) int { return strings.Compare(a.WorkerID, b.WorkerID) })
	return out, nil
}

// WatchProvider probes the provider every interval while the breaker is
// open, closes it when a probe succeeds, and publishes this worker's
// view in Redis for the admin API. It returns when ctx ends.
func (w *Worker) WatchProvider(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		w.publishHealth(ctx, interval)
		select {
		case <-ctx.Done():
			_ = w.lock.rdb.HDel(context.WithoutCancel(ctx), providerKey(w.cfg.Queue), w.cfg.WorkerID).Err()
			return
		case <-t.C:
		}
		if down, _, _ := w.health.state(); !down {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, max(interval, 5*time.Second))
		err := w.provider.Probe(pctx)
		cancel()
		if err != nil {
			w.health.markDown(mail.RedactAddresses(err.Error()))
			continue
		}
		if w.health.markUp() {
			w.log.LogAttrs(ctx, slog.LevelInfo, "provider takes mail again; sending resumes", slog.String("worker_id", w.cfg.WorkerID))
		}
	}
}

// providerUnavailable opens the breaker after a send met
// OutcomeUnavailable, and says so once per outage.
func (w *Worker) providerUnavailable(ctx context.Context, se *mail.SendError) {
	reason := mail.RedactAddresses(se.Error())
	if w.health.markDown(reason) {
		attrs := append([]slog.Attr{slog.String("worker_id", w.cfg.WorkerID), slog.String("stage", string(se.Stage))}, replyAttrs(se.Reply)...)
		w.log.LogAttrs(ctx, slog.LevelWarn, "provider refuses us; deliveries wait until a probe succeeds", append(attrs, slog.String("reason", reason))...)
	}
}

func (w *Worker) publishHealth(ctx context.Context, interval time.Duration) {
	down, reason, since := w.health.state()
	now := time.Now()
	b, _ := json.Marshal(ProviderState{WorkerID: w.cfg.WorkerID, Up: !down, Reason: reason, Since: since,
		CheckedAt: now, ValidUntil: now.Add(3*interval + 5*time.Second)})
	// Best effort: Redis being away is not the provider's health.
	_ = w.lock.rdb.HSet(ctx, providerKey(w.cfg.Queue), w.cfg.WorkerID, b).Err()
}
