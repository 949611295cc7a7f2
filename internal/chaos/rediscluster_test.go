package chaos_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Scale-out on a Redis Cluster: two workers, the reconciler and the API
// reach Redis as a cluster (REDIS_URL=redis-cluster://...), so the queue
// lives on the primary that owns its hash slot and every delivery's lock
// and cache entry on whichever primary owns theirs. While orders keep
// coming, the queue's primary is failed over (CLUSTER FAILOVER on its
// replica, as for maintenance), then another primary, which holds about
// a third of the locks and cache entries. Each order answered 201 gets
// one e-mail. TestRedisClusterPrimaryKilled (make chaos-long) kills a
// primary instead.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	rc, c, orders := startOnRedisCluster(t)
	queuePrimary := rc.Failover(t, c.queueKey())
	t.Logf("the queue's primary failed over to %s", queuePrimary)
	testenv.WaitFor(t, "sending to go on", 30*time.Second, func() bool { return c.emailCount() >= 10 })
	other := rc.Failover(t, c.keyNotOn(rc, queuePrimary))
	t.Logf("another primary failed over to %s", other)
	time.Sleep(fault(time.Second, 60*time.Second))
	c.endOnRedisCluster(orders, "Redis Cluster: two primaries failed over mid-run")
}

// startOnRedisCluster starts a cluster, the API, two workers and the
// reconciler on it, places 20 orders, waits until sending is under way,
// and keeps placing orders (one every 100 ms) until endOnRedisCluster
// calls orders.
func startOnRedisCluster(t *testing.T) (rc *testenv.RedisCluster, c *cluster, orders func() []placed) {
	t.Helper()
	rc = testenv.NewRedisCluster(t)
	c = newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 100 * time.Millisecond }})
	c.redisURL = rc.URL
	c.startAPI()
	c.startWorker("WORKER_CONCURRENCY", "2")
	c.startWorker("WORKER_CONCURRENCY", "2")
	c.startReconciler()
	c.placeOrders("rc-before", 20)
	testenv.WaitFor(t, "sending to be under way", 30*time.Second, func() bool { return c.emailCount() >= 3 })
	return rc, c, c.streamOrders("rc-during")
}

// streamOrders places an order every 100 ms until stop is called, which
// returns them. Checkouts do not need Redis to answer 201 (a task that
// cannot be queued after the commit is queued by the reconciler), so any
// other answer fails the test.
func (c *cluster) streamOrders(prefix string) (stop func() []placed) {
	done, during := make(chan struct{}), make(chan []placed)
	go func() {
		var out []placed
		defer func() { during <- out }()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			email := fmt.Sprintf("%s-%d@example.com", prefix, i)
			status, p, err := c.checkout(email, "")
			if err != nil || status != http.StatusCreated {
				c.t.Errorf("checkout %s: %d %v", email, status, err)
				return
			}
			out = append(out, p)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return func() []placed {
		close(done)
		return <-during
	}
}

// endOnRedisCluster stops the stream of orders, places ten more, waits
// for every delivery to settle, gives the verdict, and checks that the
// operator's view of the queue (asynq's inspector and the workers'
// provider states, both on the cluster) answers.
func (c *cluster) endOnRedisCluster(orders func() []placed, scenario string) {
	c.t.Helper()
	c.orders = append(c.orders, orders()...)
	c.placeOrders("rc-after", 10)
	c.settled(fault(60*time.Second, 180*time.Second))
	c.verdict(scenario, expect{})
	q := c.adminQueue()
	if q.ProcessedToday == 0 {
		c.t.Errorf("/admin/v1/queue says no task was processed: %+v", q)
	}
	if q.Provider == nil || !q.Provider.Up {
		c.t.Errorf("/admin/v1/queue says the provider is %+v, want up", q.Provider)
	}
}

// queueKey is a key in the delivery queue's hash slot (asynq tags every
// key of a queue with {<queue>}).
func (c *cluster) queueKey() string { return "asynq:{" + c.redis.Queue + "}:pending" }

// keyNotOn is a delivery-like key whose slot another primary than addr
// serves.
func (c *cluster) keyNotOn(rc *testenv.RedisCluster, addr string) string {
	c.t.Helper()
	for i := 0; ; i++ {
		if key := "sekali:{" + strconv.Itoa(i) + "}"; rc.Primary(c.t, key) != addr {
			return key
		}
	}
}

type adminQueue struct {
	Pending        int `json:"pending"`
	Active         int `json:"active"`
	ProcessedToday int `json:"processed_today"`
	Provider       *struct {
		Up bool `json:"up"`
	} `json:"provider"`
}

// adminQueue is GET /admin/v1/queue.
func (c *cluster) adminQueue() adminQueue {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.apiURL+"/admin/v1/queue", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	var q adminQueue
	if err := json.NewDecoder(res.Body).Decode(&q); err != nil || res.StatusCode != http.StatusOK {
		c.t.Fatalf("GET /admin/v1/queue: %d %v", res.StatusCode, err)
	}
	return q
}
