package chaos_test

import (
	"context"

	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Redis loses everything mid-run: the queue, the locks and the cache. The
// reconciler re-queues what PostgreSQL still has pending.
func TestRedisLosesItsData(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"flushall", "restart"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 300 * time.Millisecond }})
			c.startAPI()
			c.startWorker("WORKER_CONCURRENCY", "2")
			c.startReconciler()
			c.placeOrders("redis-"+how, 15)
			testenv.WaitFor(t, "sending to be under way", 30*time.Second, func() bool { return c.emailCount() >= 1 })
			if how == "flushall" {
				rdb := redisconn.NewClient(c.redis.Opt)
				if err := rdb.FlushAll(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				rdb.Close()
			} else {
				c.redis.Restart(t)
			}
			c.placeOrders("redis-"+how+"-after", 5)
			c.settled(120 * time.Second)
			c.verdict("Redis "+how+" mid-run", expect{})
		})
	}
}

// PostgreSQL kills every backend of the service mid-run
// (pg_terminate_backend): pools reconnect, attempts in flight are retried
// or reconciled.
func TestPostgresBackendsTerminated(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 100 * time.Millisecond }})
	c.startAPI()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("pgkill", 10)
	testenv.WaitFor(t, "sending to be under way", 30*time.Second, func() bool { return c.emailCount() >= 1 })
	for i := 0; i < 3; i++ {
		if _, err := c.db.Pool.Exec(context.Background(),
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", c.db.Name); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// Checkouts may fail while the API's connections die; those that
	// answered 201 are recorded and must be delivered.
	for i := 0; i < 5; i++ {
		if status, p, err := c.checkout("pgkill-after-"+string(rune('a'+i))+"@example.com", ""); err == nil && status == 201 {
			c.orders = append(c.orders, p)
		}
	}
	c.settled(120 * time.Second)
	c.verdict("PostgreSQL backends terminated mid-run", expect{})
}

// An SMTP provider with every fault at once: 4xx at random, 5xx for some
// recipients, stalls longer than the lock TTL, and connections dropped
// after the data was accepted.
func TestMisbehavingProvider(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(42, 7))
	flaky := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64() < 0.3
	}
	dropped := map[string]bool{}
	sink := smtpsink.Config{
		OnRcpt: func(to string) error {
			if strings.HasPrefix(to, "bounce") {
				return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
			}
			if flaky() {
				return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"}
			}
			return nil
		},
		DataDelay: func(m *smtpsink.Message) time.Duration {
			if strings.HasPrefix(m.To[0], "stall") {
				return 4 * time.Second // longer than LOCK_TTL (3s) and SMTP_TIMEOUT (2s)
			}
			return 0
		},
		DropAfterData: func(m *smtpsink.Message) bool {
			mu.Lock()
			defer mu.Unlock()
			if strings.HasPrefix(m.To[0], "drop") && !dropped[m.To[0]] {
				dropped[m.To[0]] = true
				return true
			}
			return false
		},
	}
	c := newCluster(t, sink)
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("ok", 10)
	c.placeOrders("bounce", 3)
	c.placeOrders("stall", 3)
	c.placeOrders("drop", 3)
	c.settled(180 * time.Second)
	r := c.verdict("SMTP 4xx at random, 5xx, stalls, drops after DATA", expect{mayFail: func(email string) bool {
		return strings.HasPrefix(email, "bounce")
	}})
	if r.Failed != 3 {
		t.Errorf("%d deliveries failed, want the 3 bounces", r.Failed)
	}
}
