package chaos_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// BenchmarkScaleOut runs the same closed-loop load — 32 clients placing
// 3000 checkouts with Idempotency-Keys as fast as they are answered —
// through the real binaries on the engines users scale out on: one or two
// worker processes, a Redis Cluster of three primaries with replicas, and
// PgBouncer in transaction pooling mode. It reports checkouts/s from the
// first checkout to the last e-mail, and checks one e-mail per order.
// Not part of make test: go test -run '^$' -bench ScaleOut -benchtime 1x ./internal/chaos.
func BenchmarkScaleOut(b *testing.B) {
	for _, v := range []struct {
		name    string
		workers int
		setup   func(b *testing.B, c *cluster)
	}{
		{"redis,postgres,1-worker", 1, func(*testing.B, *cluster) {}},
		{"redis,postgres,2-workers", 2, func(*testing.B, *cluster) {}},
		{"redis-cluster,postgres,2-workers", 2, func(b *testing.B, c *cluster) { c.redisURL = testenv.NewRedisCluster(b).URL }},
		{"redis,pgbouncer,2-workers", 2, func(b *testing.B, c *cluster) {
			bouncer := testenv.NewPgBouncer(b, c.db, testenv.PgBouncerOptions{PoolSize: 20})
			c.dbURL = testenv.WithParams(b, bouncer.URL, "default_query_exec_mode", "cache_describe")
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				c := newCluster(b, smtpsink.Config{})
				v.setup(b, c)
				c.startAPI()
				for range v.workers {
					c.startWorker("WORKER_CONCURRENCY", "16", "LOCK_TTL", "30s", "SMTP_TIMEOUT", "15s", "SEND_TIMEOUT", "30s", "SHUTDOWN_TIMEOUT", "45s")
				}
				c.startReconciler()
				const orders, clients = 3000, 32
				var next atomic.Int64
				var mu sync.Mutex
				var wg sync.WaitGroup
				start := time.Now()
				for range clients {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > orders {
								return
							}
							email := fmt.Sprintf("scale-%d@example.com", i)
							status, p, err := c.checkout(email, fmt.Sprintf("scale-key-%d", i))
							if err != nil || status != http.StatusCreated {
								b.Errorf("checkout %s: %d %v", email, status, err)
								return
							}
							mu.Lock()
							c.orders = append(c.orders, p)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				c.start = start
				c.settled(5 * time.Minute)
				took := time.Since(start)
				b.ReportMetric(orders/took.Seconds(), "checkouts/s")
				c.verdict("scale-out "+v.name, expect{})
			}
		})
	}
}
