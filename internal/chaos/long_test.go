//go:build chaoslong

package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The long variant (make chaos-long): scenarios that restart PostgreSQL
// or run for minutes.

// PostgreSQL crashes and restarts (pg_ctl restart -m immediate) while
// orders are being sent.
func TestPostgresRestartedMidRun(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPostgresCluster(t)
	pool, err := pgxpool.New(context.Background(), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c := newClusterOn(t, testenv.DB{Pool: pool, URL: pg.URL, Name: "postgres"},
		smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 200 * time.Millisecond }})
	c.startAPI()
	c.startWorker("WORKER_CONCURRENCY", "2")
	c.startWorker("WORKER_CONCURRENCY", "2")
	c.startReconciler()
	c.placeOrders("pgrestart", 20)
	testenv.WaitFor(t, "sending to be under way", 30*time.Second, func() bool { return c.emailCount() >= 2 })
	pg.Restart(t)
	// Checkouts right after the restart may fail; every one that answered
	// 201 must be delivered.
	for i := 0; i < 10; i++ {
		if status, p, err := c.checkout(fmt.Sprintf("pgrestart-after-%d@example.com", i), ""); err == nil && status == 201 {
			c.orders = append(c.orders, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.settled(180 * time.Second)
	c.verdict("PostgreSQL restarted -m immediate mid-run", expect{})
}

// A soak: a stream of orders while workers are killed and replaced at
// random and Redis is flushed once. CHAOS_SOAK_ORDERS sets the length
// (default 300).
func TestSoak(t *testing.T) {
	t.Parallel()
	n := 300
	if v, err := strconv.Atoi(os.Getenv("CHAOS_SOAK_ORDERS")); err == nil && v > 0 {
		n = v
	}
	// Slow enough that a killed worker usually dies with sends in hand.
	c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 150 * time.Millisecond }})
	c.startAPI()
	c.startReconciler()
	workers := []*testenv.Process{c.startWorker(), c.startWorker(), c.startWorker()}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i++ {
		c.placeOrders(fmt.Sprintf("soak-%d", i), 1)
		switch {
		case i%25 == 24:
			k := rng.IntN(len(workers))
			workers[k].Signal(t, syscall.SIGKILL)
			workers[k] = c.startWorker()
		case i == n/2:
			rdb := redisconn.NewClient(c.redis.Opt)
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			rdb.Close()
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
	}
	c.settled(300 * time.Second)
	c.verdict(fmt.Sprintf("soak: %d orders, a worker SIGKILLed every 25, one FLUSHALL", n), expect{})
}
