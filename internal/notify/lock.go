package notify

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
)

// KeyHash is how Redis names a delivery: a hash of its idempotency key, so
// that no e-mail address is ever written to Redis.
func KeyHash(idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return hex.EncodeToString(sum[:16])
}

// ProviderKey is the idempotency key given to a provider that keeps
// keys of its own (Resend, over HTTP or in its SMTP header):
// "sekali-" and the hex SHA-256 of key, 71 characters of [a-z0-9-]. Our
// keys can be longer than providers take (Resend: 256) and carry an
// address; the digest is the same on every attempt, over every channel.
func ProviderKey(idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return "sekali-" + hex.EncodeToString(sum[:])
}

func lockKey(keyHash string) string { return "sekali:lock:" + keyHash }
func sentKey(keyHash string) string { return "sekali:sent:" + keyHash }

// sentCacheTTL is how long the status cache remembers a sent delivery. It
// outlives any redelivery of the task (its retention is 24h).
const sentCacheTTL = 48 * time.Hour

// Compare-and-act scripts: a worker only ever extends or deletes the lock
// it holds, never one another worker took after its own expired.
var (
	extendScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)
)

// releaseSource deletes the lock only if it holds this worker's token. It
// is sent whole (EVAL) because it runs inside a pipeline, where the
// EVALSHA-then-EVAL fallback of redis.Script cannot happen.
const releaseSource = `
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`

// redisLock is the Redis side of a delivery: a lock that keeps two workers
// from doing the same work at once, and a cache that may say "sent"
// sooner than PostgreSQL. Neither is ever trusted for correctness.
type redisLock struct {
	rdb redis.UniversalClient
	ttl time.Duration
}

// acquire takes the lock with SET NX PX and a random token.
func (l redisLock) acquire(ctx context.Context, keyHash string) (token string, ok bool, err error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token = hex.EncodeToString(b[:])
	ok, err = l.rdb.SetNX(ctx, lockKey(keyHash), token, l.ttl).Result()
	if err != nil {
		return "", false, fmt.Errorf("acquire lock: %w", err)
	}
	return token, ok, nil
}

// extend pushes the lock's expiry out by ttl if it is still ours.
func (l redisLock) extend(ctx context.Context, keyHash, token string) (bool, error) {
	n, err := extendScript.Run(ctx, l.rdb, []string{lockKey(keyHash)}, token, l.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("extend lock: %w", err)
	}
	return n == 1, nil
}

// release deletes the lock if it is still ours. With sent, it first
// writes the status cache, in the same round trip.
func (l redisLock) release(ctx context.Context, keyHash, token string, sent bool) (bool, error) {
	var result *redis.Cmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if sent {
			p.Set(ctx, sentKey(keyHash), string(StatusSent), sentCacheTTL)
		}
		result = p.Eval(ctx, releaseSource, []string{lockKey(keyHash)}, token)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("cache status and release lock: %w", err)
	}
	n, err := result.Int()
	if err != nil {
		return false, fmt.Errorf("release lock: %w", err)
	}
	return n == 1, nil
}

// cachedSent reports whether the cache says the delivery was sent. A miss
// or an error is "don't know", never "not sent".
func (l redisLock) cachedSent(ctx context.Context, keyHash string) bool {
	v, err := l.rdb.Get(ctx, sentKey(keyHash)).Result()
	return err == nil && v == string(StatusSent)
}

func (l redisLock) cacheSent(ctx context.Context, keyHash string) error {
	if err := l.rdb.Set(ctx, sentKey(keyHash), string(StatusSent), sentCacheTTL).Err(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("cache sent status: %w", err)
	}
	return nil
}

// heartbeat renews the Redis lock and the row's lease while a send runs.
type heartbeat struct {
	lost   atomic.Bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (w *Worker) startHeartbeat(ctx context.Context, q *dbsqlc.Queries, a *attempt) *heartbeat {
	ctx, cancel := context.WithCancel(ctx)
	hb := &heartbeat{cancel: cancel}
	hb.wg.Add(1)
	go func() {
		defer hb.wg.Done()
		t := time.NewTicker(w.cfg.LockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ok, err := w.lock.extend(ctx, a.keyHash, a.lockToken)
			if ctx.Err() != nil {
				return
			}
			if err != nil || !ok {
				hb.lost.Store(true)
			}
			// The lease is renewed even when the lock is gone: while the
			// row's lease is ours, no other worker can claim it.
			extendLease(ctx, q, a.row.ID, a.lease)
		}
	}()
	return hb
}

func (h *heartbeat) lockLost() bool { return h.lost.Load() }

func (h *heartbeat) stop() {
	h.cancel()
	h.wg.Wait()
}
