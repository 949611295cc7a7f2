package keylock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The lock and the status cache behave the same on one redis-server and
// on a Redis Cluster, where a script touching both keys is refused unless
// they share a hash slot.
func TestLockAndCache(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  func(testing.TB) asynq.RedisConnOpt
	}{
		{"standalone", func(t testing.TB) asynq.RedisConnOpt { return testenv.NewRedis(t).Opt }},
		{"cluster", func(t testing.TB) asynq.RedisConnOpt { return testenv.NewRedisCluster(t).Opt }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := redisconn.NewClient(tc.opt(t))
			t.Cleanup(func() { rdb.Close() })
			testLockAndCache(t, rdb)
		})
	}
}

func testLockAndCache(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	l := New(rdb, 10*time.Second)
	h := randomKeyHash(t)

	token, got, err := l.acquire(ctx, h)
	if err != nil || got != Taken || token == "" {
		t.Fatalf("first acquire = %q, %v, %v; want the lock", token, got, err)
	}
	if ttl := rdb.PTTL(ctx, LockKey(h)).Val(); ttl <= 9*time.Second || ttl > 10*time.Second {
		t.Errorf("lock expires in %v, want LOCK_TTL (10s)", ttl)
	}
	if other, got, err := l.acquire(ctx, h); err != nil || got != Busy || other != "" {
		t.Errorf("second acquire = %q, %v, %v; want busy", other, got, err)
	}
	if ok, err := l.extend(ctx, h, "not-mine"); err != nil || ok {
		t.Errorf("extend with another token = %v, %v; want refused", ok, err)
	}
	if ok, err := l.extend(ctx, h, token); err != nil || !ok {
		t.Errorf("extend with the holder's token = %v, %v", ok, err)
	}

	// Releasing with another token leaves the lock alone but still caches
	// "sent": the worker that recorded it may have lost its lock.
	if released, err := l.release(ctx, h, "not-mine", true); err != nil || released {
		t.Errorf("release with another token = %v, %v; want refused", released, err)
	}
	if v := rdb.Get(ctx, LockKey(h)).Val(); v != token {
		t.Errorf("the holder's lock is now %q", v)
	}
	if v, ttl := rdb.Get(ctx, SentKey(h)).Val(), rdb.PTTL(ctx, SentKey(h)).Val(); v != "sent" || ttl < sentCacheTTL-time.Minute {
		t.Errorf("status cache = %q for %v, want sent for %v", v, ttl, sentCacheTTL)
	}
	// A cached "sent" answers before the lock is even looked at.
	if other, got, err := l.acquire(ctx, h); err != nil || got != CachedSent || other != "" {
		t.Errorf("acquire of a sent delivery = %q, %v, %v; want the cache's answer", other, got, err)
	}
	if released, err := l.release(ctx, h, token, false); err != nil || !released {
		t.Errorf("release by the holder = %v, %v", released, err)
	}
	if n := rdb.Exists(ctx, LockKey(h)).Val(); n != 0 {
		t.Error("the lock is still there after its release")
	}

	// Only "sent" is believed: any other value, or one that cannot be
	// read, is "don't know" and the lock is taken.
	for _, poison := range []func(key string) error{
		func(key string) error { return rdb.Set(ctx, key, "pending", time.Minute).Err() },
		func(key string) error { return rdb.HSet(ctx, key, "status", "sent").Err() },
	} {
		h := randomKeyHash(t)
		if err := poison(SentKey(h)); err != nil {
			t.Fatal(err)
		}
		if token, got, err := l.acquire(ctx, h); err != nil || got != Taken || token == "" {
			t.Errorf("acquire under a cache entry that is not \"sent\" = %q, %v, %v; want the lock", token, got, err)
		}
	}
}

// The lock and the cache of a delivery survive a planned failover of
// their primary, and the worker's scripts run on the new one (which has
// never seen them: EVALSHA falls back to EVAL).
func TestLockAcrossClusterFailover(t *testing.T) {
	t.Parallel()
	rc := testenv.NewRedisCluster(t)
	rdb := redisconn.NewClient(rc.Opt)
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	l := New(rdb, 10*time.Second)

	h := randomKeyHash(t)
	if slot, other := rdb.ClusterKeySlot(ctx, LockKey(h)).Val(), rdb.ClusterKeySlot(ctx, SentKey(h)).Val(); slot != other {
		t.Fatalf("lock in slot %d, cache in slot %d: a script cannot touch both", slot, other)
	}
	token, got, err := l.acquire(ctx, h)
	if err != nil || got != Taken {
		t.Fatalf("acquire = %v, %v", got, err)
	}
	rc.Failover(t, LockKey(h))
	if ok, err := l.extend(ctx, h, token); err != nil || !ok {
		t.Errorf("extend after the failover = %v, %v", ok, err)
	}
	if released, err := l.release(ctx, h, token, true); err != nil || !released {
		t.Errorf("release after the failover = %v, %v", released, err)
	}
	rc.Failover(t, SentKey(h))
	if _, got, err := l.acquire(ctx, h); err != nil || got != CachedSent {
		t.Errorf("acquire after a second failover = %v, %v; want the cached \"sent\"", got, err)
	}
}

func randomKeyHash(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// The attempts' lock round trips go in one pipeline (AcquireAll,
// ReleaseAll): each call its own answer — one lock taken, one busy, one
// cached sent — and each release its own; a Redis that forgot the
// scripts (restarted, SCRIPT FLUSH) answers NOSCRIPT to their digests,
// and the calls run again by the scripts' bodies. On one redis-server
// and on a Redis Cluster, where the pipeline's calls go to their keys'
// nodes.
func TestLockRoundTripsShared(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  func(testing.TB) asynq.RedisConnOpt
	}{
		{"standalone", func(t testing.TB) asynq.RedisConnOpt { return testenv.NewRedisServer(t).Opt }},
		{"cluster", func(t testing.TB) asynq.RedisConnOpt { return testenv.NewRedisCluster(t).Opt }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rdb := redisconn.NewClient(tc.opt(t))
			t.Cleanup(func() { rdb.Close() })
			l := New(rdb, 10*time.Second)
			free, busy, sent := randomKeyHash(t), randomKeyHash(t), randomKeyHash(t)
			if _, got, err := l.acquire(ctx, busy); err != nil || got != Taken {
				t.Fatalf("another worker's lock: %v, %v", got, err)
			}
			if err := l.CacheSent(ctx, sent); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			rs, err := l.AcquireAll(ctx, []Call{{KeyHash: free}, {KeyHash: busy}, {KeyHash: sent}})
			if err != nil || len(rs) != 3 {
				t.Fatalf("AcquireAll after SCRIPT FLUSH: %v, %v", rs, err)
			}
			if rs[0].Got != Taken || rs[0].Token == "" || rs[0].Err != nil || rs[1].Got != Busy || rs[1].Err != nil || rs[2].Got != CachedSent {
				t.Fatalf("AcquireAll = %+v: want taken, busy, cached sent", rs)
			}
			rel, err := l.ReleaseAll(ctx, []Call{{KeyHash: free, Token: rs[0].Token, Sent: true}, {KeyHash: busy, Token: "not-mine"}})
			if err != nil || !rel[0].Released || rel[1].Released || rel[0].Err != nil || rel[1].Err != nil {
				t.Fatalf("ReleaseAll = %+v, %v: want the one ours released, the other's kept", rel, err)
			}
			if v, _ := rdb.Get(ctx, SentKey(free)).Result(); v != "sent" {
				t.Errorf("the release did not cache sent: %q", v)
			}
			if v, _ := rdb.Exists(ctx, LockKey(busy)).Result(); v != 1 {
				t.Errorf("another worker's lock was released")
			}
		})
	}
}

// acquire, release and extend are AcquireAll, ReleaseAll and ExtendAll
// for one delivery.
func (l Locks) acquire(ctx context.Context, keyHash string) (string, Outcome, error) {
	rs, _ := l.AcquireAll(ctx, []Call{{KeyHash: keyHash}})
	return rs[0].Token, rs[0].Got, rs[0].Err
}

func (l Locks) release(ctx context.Context, keyHash, token string, sent bool) (bool, error) {
	rs, _ := l.ReleaseAll(ctx, []Call{{KeyHash: keyHash, Token: token, Sent: sent}})
	return rs[0].Released, rs[0].Err
}

func (l Locks) extend(ctx context.Context, keyHash, token string) (bool, error) {
	ok, err := l.ExtendAll(ctx, []Call{{KeyHash: keyHash, Token: token}})
	if err != nil {
		return false, err
	}
	return ok[0], nil
}
