package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/notify"
)

// LockKey and SentKey name a delivery's lock and cache entry in Redis,
// for operators and tests (notifytest). They share the hash tag
// {<keyhash>}: on a Redis Cluster they live in one hash slot, so one
// script may read and write both. (Before the tag they were
// sekali:lock:<keyhash> and sekali:sent:<keyhash>; a worker of either
// layout stays correct beside one of the other, see acquire.)
func LockKey(keyHash string) string { return "sekali:{" + keyHash + "}:lock" }

// SentKey: see LockKey.
func SentKey(keyHash string) string { return "sekali:{" + keyHash + "}:sent" }

// sentCacheTTL is how long the status cache remembers a sent delivery:
// long enough for what brings a sent delivery's task back (asynq
// recovering a task whose worker died after the send, within a minute
// and a half; a retry queued before the send went through, within the
// 5-minute back-off cap), short enough that Redis holds a quarter of an
// hour of orders, not days of them. Past it the row answers, as it
// always may: the cache only speeds up a positive answer.
const sentCacheTTL = 15 * time.Minute

// The lock's scripts compare before they act: a worker only ever extends
// or deletes the lock it holds, never one another worker took after its
// own expired. Each touches one delivery's keys only, which share a slot.
var (
	// acquireScript answers from the status cache or takes the lock, in
	// one round trip: 2 when the cache says "sent" (no lock taken), 1 when
	// the lock is now ours, 0 when another worker holds it. A cache entry
	// that cannot be read (pcall: a wrong type) is a miss, as before.
	//
	// KEYS: sent, lock. ARGV: "sent", token, ttl in ms.
	acquireScript = redis.NewScript(`
if redis.pcall("GET", KEYS[1]) == ARGV[1] then
  return 2
end
if redis.call("SET", KEYS[2], ARGV[2], "NX", "PX", ARGV[3]) then
  return 1
end
return 0`)

	extendScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)

	// releaseScript writes "sent" into the status cache when ARGV[2] is
	// not empty, whoever holds the lock, then deletes the lock if it is
	// still ours: 1 when it deleted it. The cache is written with pcall
	// so that a refused write (out of memory) still releases the lock; its
	// error is answered after.
	//
	// KEYS: lock, sent. ARGV: token, "sent" or "", cache ttl in ms.
	releaseScript = redis.NewScript(`
local cached = true
if ARGV[2] ~= "" then
  cached = redis.pcall("SET", KEYS[2], ARGV[2], "PX", ARGV[3])
end
local released = 0
if redis.call("GET", KEYS[1]) == ARGV[1] then
  released = redis.call("DEL", KEYS[1])
end
if type(cached) == "table" and cached.err then
  return cached
end
return released`)
)

// redisLock is the Redis side of a delivery: a lock that keeps two workers
// from doing the same work at once, and a cache that may say "sent"
// sooner than PostgreSQL. Neither is ever trusted for correctness.
type redisLock struct {
	rdb redis.UniversalClient
	ttl time.Duration
}

// lockOutcome is what acquire found.
type lockOutcome int

const (
	lockBusy       lockOutcome = iota // another worker holds the lock
	lockTaken                         // the lock is ours, under the token returned
	lockCachedSent                    // the cache says "sent": nothing to do, no lock taken
)

// acquire asks the status cache and, unless it says "sent", takes the
// lock with SET NX PX and a random token: one script, one round trip.
// Only a "sent" answer is believed; anything else in the cache, or
// nothing, is "don't know".
//
// Neither answer is needed for correctness, which is why a mixed deploy
// (workers that name the keys sekali:lock:<keyhash> and sekali:sent:<keyhash>
// beside workers that use the tagged names) is safe: two workers may then
// both hold "the" lock, and PostgreSQL's conditional claim lets one of
// them in; a cache written under the other layout is a miss, and the
// claim finds the row sent.
func (l redisLock) acquire(ctx context.Context, keyHash string) (token string, got lockOutcome, err error) {
	rs, _ := l.acquireAll(ctx, []lockCall{{keyHash: keyHash}})
	if rs[0].err != nil {
		return "", lockBusy, rs[0].err
	}
	return rs[0].token, rs[0].got, nil
}

// release deletes the lock if it is still ours. With sent, it first
// writes the status cache, in the same script.
func (l redisLock) release(ctx context.Context, keyHash, token string, sent bool) (bool, error) {
	rs, _ := l.releaseAll(ctx, []lockCall{{keyHash: keyHash, token: token, sent: sent}})
	return rs[0].released, rs[0].err
}

// cacheSent writes "sent" into the status cache of a delivery whose lock
// this worker does not hold (a task that found it sent).
func (l redisLock) cacheSent(ctx context.Context, keyHash string) error {
	if err := l.rdb.Set(ctx, SentKey(keyHash), string(notify.StatusSent), sentCacheTTL).Err(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("cache sent status: %w", err)
	}
	return nil
}

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
	locks := make([]lockCall, len(held))
	for i, j := range held {
		leases[i] = notify.Leased{ID: j.p.DeliveryID, Lease: j.lease}
		locks[i] = lockCall{keyHash: j.p.KeyHash, token: j.lockToken}
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
			extended, err := w.lock.extendAll(ctx, locks)
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

// extend pushes the lock's expiry out by the TTL if it is still ours.
func (l redisLock) extend(ctx context.Context, keyHash, token string) (bool, error) {
	ok, err := l.extendAll(ctx, []lockCall{{keyHash: keyHash, token: token}})
	if err != nil {
		return false, err
	}
	return ok[0], nil
}

// extendAll pushes the expiry of each of cs' locks out by the TTL if it
// is still theirs, in one pipeline.
func (l redisLock) extendAll(ctx context.Context, cs []lockCall) ([]bool, error) {
	cmds, err := l.pipelined(ctx, extendScript, len(cs), func(i int) ([]string, []any) {
		return []string{LockKey(cs[i].keyHash)}, []any{cs[i].token, l.ttl.Milliseconds()}
	})
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(cs))
	for i, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("extend lock: %w", err)
		}
		n, _ := c.Int()
		out[i] = n == 1
	}
	return out, nil
}

// unlockAll releases every lock the task's jobs hold, in one pipeline,
// caching "sent" for those recorded sent.
func (w *Worker) unlockAll(ctx context.Context, jobs []*job) {
	var held []*job
	var calls []lockCall
	for _, j := range jobs {
		if j.lockToken != "" {
			held = append(held, j)
			// A row found sent already is cached as one just recorded sent.
			sent := j.recordedSent || (j.step != nil && j.step.cacheSent)
			calls = append(calls, lockCall{keyHash: j.p.KeyHash, token: j.lockToken, sent: sent})
		}
	}
	if len(calls) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	rs, err := w.lock.releaseAll(rctx, calls)
	for i, j := range held {
		r := lockResult{err: err}
		if err == nil {
			r = rs[i]
		}
		if r.err != nil {
			j.l.set(slog.String("release_error", r.err.Error()))
			continue
		}
		if !r.released && !j.lockLost.Load() {
			// The lock expired under us without the heartbeat noticing.
			w.metrics.lockExpired.Inc()
		}
	}
}

// The lock's round trips for a task's deliveries: one pipeline of the
// same script, each still on its own delivery's keys (one slot each on a
// Redis Cluster, which go-redis sends to each key's node).

// lockCall is one attempt's acquire (token "" before) or release.
type lockCall struct {
	keyHash, token string
	sent           bool // release: cache "sent" first
}

// lockResult is one call's answer: acquire's outcome (and token), or
// whether release deleted the lock; err is the call's own.
type lockResult struct {
	token    string
	got      lockOutcome
	released bool
	err      error
}

// acquireAll runs acquireScript for each of cs in one pipeline.
func (l redisLock) acquireAll(ctx context.Context, cs []lockCall) ([]lockResult, error) {
	out := make([]lockResult, len(cs))
	for i := range cs {
		var b [16]byte
		_, _ = rand.Read(b[:])
		out[i].token = hex.EncodeToString(b[:])
	}
	cmds, err := l.pipelined(ctx, acquireScript, len(cs), func(i int) ([]string, []any) {
		return []string{SentKey(cs[i].keyHash), LockKey(cs[i].keyHash)}, []any{string(notify.StatusSent), out[i].token, l.ttl.Milliseconds()}
	})
	if err != nil {
		return nil, err
	}
	for i, c := range cmds {
		n, err := c.Int()
		switch {
		case err != nil:
			out[i] = lockResult{got: lockBusy, err: fmt.Errorf("acquire lock: %w", err)}
		case n == 2:
			out[i] = lockResult{got: lockCachedSent}
		case n == 1:
			out[i].got = lockTaken
		default:
			out[i] = lockResult{got: lockBusy}
		}
	}
	return out, nil
}

// releaseAll runs releaseScript for each of cs in one pipeline.
func (l redisLock) releaseAll(ctx context.Context, cs []lockCall) ([]lockResult, error) {
	cmds, err := l.pipelined(ctx, releaseScript, len(cs), func(i int) ([]string, []any) {
		status := ""
		if cs[i].sent {
			status = string(notify.StatusSent)
		}
		return []string{LockKey(cs[i].keyHash), SentKey(cs[i].keyHash)}, []any{cs[i].token, status, sentCacheTTL.Milliseconds()}
	})
	if err != nil {
		return nil, err
	}
	out := make([]lockResult, len(cs))
	for i, c := range cmds {
		n, err := c.Int()
		if err != nil {
			out[i].err = fmt.Errorf("cache status and release lock: %w", err)
			continue
		}
		out[i].released = n == 1
	}
	return out, nil
}

// pipelined runs script n times in one pipeline, the i-th on args(i), by
// its digest; the calls Redis does not know the script for (NOSCRIPT:
// restarted, flushed) run again by its body, in a second pipeline. Each
// command carries its own error, a lost round trip's included: each
// caller gets its own.
func (l redisLock) pipelined(ctx context.Context, script *redis.Script, n int, args func(i int) ([]string, []any)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	_, _ = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			keys, argv := args(i)
			cmds[i] = script.EvalSha(ctx, p, keys, argv...)
		}
		return nil
	})
	var again []int
	for i, c := range cmds {
		if c.Err() != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		_, _ = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				keys, argv := args(i)
				cmds[i] = script.Eval(ctx, p, keys, argv...)
			}
			return nil
		})
	}
	return cmds, nil
}
