package chaos_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Scale-out on a highly available Redis: two workers and two reconcilers
// reach Redis through Sentinel (REDIS_URL=redis-sentinel://...). The
// primary is killed mid-run; Sentinel promotes the replica, the clients
// follow it, and what the old primary had not replicated (queued tasks,
// locks) is rebuilt from PostgreSQL by the reconcilers.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	ha := testenv.NewRedisSentinel(t)
	c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 100 * time.Millisecond }})
	c.redisURL = ha.URL
	c.startAPI()
	c.startWorker("WORKER_CONCURRENCY", "2")
	c.startWorker("WORKER_CONCURRENCY", "2")
	c.startReconciler()
	c.startReconciler()
	c.placeOrders("ha-before", 20)
	testenv.WaitFor(t, "sending to be under way", 30*time.Second, func() bool { return c.emailCount() >= 3 })
	ha.KillPrimary(t)
	// Checkouts during the failover may fail; every one answered 201 must
	// be delivered, once.
	for i := 0; i < 20; i++ {
		if status, p, err := c.checkout(fmt.Sprintf("ha-after-%d@example.com", i), ""); err == nil && status == 201 {
			c.orders = append(c.orders, p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.settled(120 * time.Second)
	c.verdict("Redis Sentinel failover, 2 workers, 2 reconcilers", expect{})
}
