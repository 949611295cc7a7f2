package worker

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/keylock"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// BenchmarkLockRoundTrip is the Redis work of one delivery through the
// worker's own lock code, on a redis-server and on a three-primary
// cluster of the benchmark's own (every iteration leaves a "sent" key
// behind):
//
//   - delivery: the first attempt, as the worker makes it: the status
//     cache misses and the lock is taken, then it is released with
//     "sent" cached;
//   - redelivery: the same task again, answered by the cache.
//
// roundtrips/op counts the requests each node received (a command, a
// pipeline, a script); a pipeline whose keys live on two nodes counts
// twice. Renewals are absent: one happens only every LOCK_TTL/3.
// redis-µs/op (standalone) is the Redis server's CPU for it.
func BenchmarkLockRoundTrip(b *testing.B) {
	b.Run("standalone", func(b *testing.B) {
		benchLock(b, testenv.NewRedisServer(b).Opt)
	})
	b.Run("cluster", func(b *testing.B) {
		benchLock(b, testenv.NewRedisCluster(b).Opt)
	})
}

func benchLock(b *testing.B, opt asynq.RedisConnOpt) {
	rdb := redisconn.NewClient(opt)
	defer rdb.Close()
	var trips atomic.Int64
	countRoundTrips(rdb, &trips)
	l := keylock.New(rdb, 30*time.Second)
	ctx := context.Background()

	seq := 0 // a fresh delivery each time, across -count runs
	delivery := func() string {
		seq++
		h := mail.KeyHash("order-confirmation:" + strconv.Itoa(seq) + ":bench@example.com")
		rs, err := l.AcquireAll(ctx, []keylock.Call{{KeyHash: h}})
		if err != nil || rs[0].Got != keylock.Taken {
			b.Fatal("acquire:", rs, err)
		}
		rel, err := l.ReleaseAll(ctx, []keylock.Call{{KeyHash: h, Token: rs[0].Token, Sent: true}})
		if err != nil || !rel[0].Released {
			b.Fatal("release:", rel, err)
		}
		return h
	}
	// Warm up outside the counts: connections to every node, the slot
	// map, scripts loaded.
	for range 100 {
		delivery()
	}

	b.Run("delivery", func(b *testing.B) {
		start, n, cpu := trips.Load(), 0, redisCPU(b, rdb)
		for b.Loop() {
			delivery()
			n++
		}
		b.ReportMetric(float64(trips.Load()-start)/float64(n), "roundtrips/op")
		if _, cluster := rdb.(*redis.ClusterClient); !cluster { // INFO answers for one node
			b.ReportMetric(float64((redisCPU(b, rdb)-cpu).Microseconds())/float64(n), "redis-µs/op")
		}
	})
	b.Run("redelivery", func(b *testing.B) {
		h := delivery()
		start, n := trips.Load(), 0
		for b.Loop() {
			if rs, err := l.AcquireAll(ctx, []keylock.Call{{KeyHash: h}}); err != nil || rs[0].Got != keylock.CachedSent {
				b.Fatal("a sent delivery not answered by the cache:", rs, err)
			}
			n++
		}
		b.ReportMetric(float64(trips.Load()-start)/float64(n), "roundtrips/op")
	})
}

// countRoundTrips counts, in n, every request a node's client sends:
// one per command or pipeline, on each node a cluster client reaches.
func countRoundTrips(rdb redis.UniversalClient, n *atomic.Int64) {
	hook := roundTripHook{n: n}
	if c, ok := rdb.(*redis.ClusterClient); ok {
		c.OnNewNode(func(node *redis.Client) { node.AddHook(hook) })
		return
	}
	rdb.AddHook(hook)
}

type roundTripHook struct{ n *atomic.Int64 }

func (h roundTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h roundTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h roundTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}
