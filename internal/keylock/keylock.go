// Package keylock is the Redis side of a delivery: a lock that keeps two
// workers from doing the same work at once, and a cache that may say
// "sent" sooner than PostgreSQL. Neither is ever trusted for
// correctness: PostgreSQL's conditional claim and fenced hand-over are.
// A task's calls go in one pipeline of one script, each on its own
// delivery's keys.
package keylock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/notify"
)

// LockKey and SentKey name a delivery's lock and cache entry in Redis,
// for operators and tests (workertest). They share the hash tag
// {<keyhash>}: on a Redis Cluster they live in one hash slot, so one
// script may read and write both. (Before the tag they were
// sekali:lock:<keyhash> and sekali:sent:<keyhash>; a worker of either
// layout stays correct beside one of the other, see AcquireAll.)
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

// Locks are the deliveries' locks and status cache in rdb, a lock held
// for ttl unless extended.
type Locks struct {
	rdb redis.UniversalClient
	ttl time.Duration
}

// New returns the locks and cache kept in rdb, each lock for ttl.
func New(rdb redis.UniversalClient, ttl time.Duration) Locks { return Locks{rdb: rdb, ttl: ttl} }

// Outcome is what AcquireAll found of a delivery.
type Outcome int

const (
	Busy       Outcome = iota // another worker holds the lock
	Taken                     // the lock is ours, under the token returned
	CachedSent                // the cache says "sent": nothing to do, no lock taken
)

// CacheSent writes "sent" into the status cache of a delivery whose lock
// the caller does not hold (a task that found it sent).
func (l Locks) CacheSent(ctx context.Context, keyHash string) error {
	if err := l.rdb.Set(ctx, SentKey(keyHash), string(notify.StatusSent), sentCacheTTL).Err(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("cache sent status: %w", err)
	}
	return nil
}

// ExtendAll pushes the expiry of each of cs' locks out by the TTL if it
// is still theirs, in one pipeline.
func (l Locks) ExtendAll(ctx context.Context, cs []Call) ([]bool, error) {
	cmds, err := l.pipelined(ctx, extendScript, len(cs), func(i int) ([]string, []any) {
		return []string{LockKey(cs[i].KeyHash)}, []any{cs[i].Token, l.ttl.Milliseconds()}
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

// The lock's round trips for a task's deliveries: one pipeline of the
// same script, each still on its own delivery's keys (one slot each on a
// Redis Cluster, which go-redis sends to each key's node).

// Call is one attempt's acquire (token "" before) or release.
type Call struct {
	KeyHash, Token string
	Sent           bool // release: cache "sent" first
}

// Result is one call's answer: AcquireAll's outcome (and token), or
// whether ReleaseAll deleted the lock; Err is the call's own.
type Result struct {
	Token    string
	Got      Outcome
	Released bool
	Err      error
}

// AcquireAll asks each of cs' status cache and, unless it says "sent",
// takes its lock (SET NX PX, a random token): acquireScript for each, in
// one pipeline. Only a "sent" answer is believed; anything else in the
// cache, or nothing, is "don't know". Neither answer is needed for
// correctness, which is why a mixed deploy (workers that name the keys
// sekali:lock:<keyhash> and sekali:sent:<keyhash> beside workers that
// use the tagged names) is safe: two workers may then both hold "the"
// lock, and PostgreSQL's conditional claim lets one of them in; a cache
// written under the other layout is a miss, and the claim finds the row
// sent.
func (l Locks) AcquireAll(ctx context.Context, cs []Call) ([]Result, error) {
	out := make([]Result, len(cs))
	for i := range cs {
		var b [16]byte
		_, _ = rand.Read(b[:])
		out[i].Token = hex.EncodeToString(b[:])
	}
	cmds, err := l.pipelined(ctx, acquireScript, len(cs), func(i int) ([]string, []any) {
		return []string{SentKey(cs[i].KeyHash), LockKey(cs[i].KeyHash)}, []any{string(notify.StatusSent), out[i].Token, l.ttl.Milliseconds()}
	})
	if err != nil {
		return nil, err
	}
	for i, c := range cmds {
		n, err := c.Int()
		switch {
		case err != nil:
			out[i] = Result{Got: Busy, Err: fmt.Errorf("acquire lock: %w", err)}
		case n == 2:
			out[i] = Result{Got: CachedSent}
		case n == 1:
			out[i].Got = Taken
		default:
			out[i] = Result{Got: Busy}
		}
	}
	return out, nil
}

// ReleaseAll deletes each of cs' locks if it is still theirs, caching
// "sent" first for those with Sent: releaseScript for each, in one
// pipeline.
func (l Locks) ReleaseAll(ctx context.Context, cs []Call) ([]Result, error) {
	cmds, err := l.pipelined(ctx, releaseScript, len(cs), func(i int) ([]string, []any) {
		status := ""
		if cs[i].Sent {
			status = string(notify.StatusSent)
		}
		return []string{LockKey(cs[i].KeyHash), SentKey(cs[i].KeyHash)}, []any{cs[i].Token, status, sentCacheTTL.Milliseconds()}
	})
	if err != nil {
		return nil, err
	}
	out := make([]Result, len(cs))
	for i, c := range cmds {
		n, err := c.Int()
		if err != nil {
			out[i].Err = fmt.Errorf("cache status and release lock: %w", err)
			continue
		}
		out[i].Released = n == 1
	}
	return out, nil
}

// pipelined runs script n times in one pipeline, the i-th on args(i), by
// its digest; the calls Redis does not know the script for (NOSCRIPT:
// restarted, flushed) run again by its body, in a second pipeline. Each
// command carries its own error, a lost round trip's included: each
// caller gets its own.
func (l Locks) pipelined(ctx context.Context, script *redis.Script, n int, args func(i int) ([]string, []any)) ([]*redis.Cmd, error) {
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
