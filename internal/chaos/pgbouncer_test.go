package chaos_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The binaries reach PostgreSQL through PgBouncer in transaction pooling
// mode, as docs/deploy.md describes, with three server connections for
// their pools. Mid-run, PostgreSQL terminates the bouncer's server
// connections behind its back; then the bouncer itself is killed, stays
// down for a while (checkouts fail meanwhile) and comes back on the same
// port, every client connection of every binary cut. Each order answered
// 201 gets one e-mail.
func TestPgBouncerRestartedMidRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 100 * time.Millisecond }})
	b := testenv.NewPgBouncer(t, c.db, testenv.PgBouncerOptions{PoolSize: 3})
	c.dbURL = testenv.WithParams(t, b.URL, "default_query_exec_mode", "cache_describe")
	c.startAPI()
	c.startWorker("WORKER_CONCURRENCY", "2")
	c.startWorker("WORKER_CONCURRENCY", "2")
	c.startReconciler()
	c.placeOrders("bouncer-before", 20)
	testenv.WaitFor(t, "sending to be under way", 30*time.Second, func() bool { return c.emailCount() >= 3 })

	// The server connections, found by the bouncer's side of them.
	var ports []int
	for _, s := range b.Admin(t, "SHOW SERVERS") {
		if p, err := strconv.Atoi(s["local_port"]); err == nil {
			ports = append(ports, p)
		}
	}
	var killed int
	if err := c.db.Pool.QueryRow(context.Background(),
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND client_port = ANY($2)",
		c.db.Name, ports).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("no server connection of the bouncer to terminate")
	}
	c.tryCheckouts("bouncer-killed", 5)

	b.Stop(t)
	down := time.Now().Add(fault(time.Second, 15*time.Second))
	tried, answered := 0, 0
	for ; time.Now().Before(down); tried++ {
		answered += c.tryCheckouts(fmt.Sprintf("bouncer-down-%d", tried), 1)
		time.Sleep(100 * time.Millisecond)
	}
	// The binaries' only way to PostgreSQL is the bouncer.
	if answered > 0 {
		t.Errorf("%d of %d checkouts answered 201 while the bouncer was down", answered, tried)
	}
	b.Start(t)
	testenv.WaitFor(t, "checkouts to succeed again", 30*time.Second, func() bool {
		return c.tryCheckouts("bouncer-back", 1) == 1
	})
	c.placeOrders("bouncer-after", 10)
	c.settled(120 * time.Second)
	c.verdict("PgBouncer: server connections terminated, then the bouncer killed and restarted", expect{})
}

// tryCheckouts places n orders whose checkouts may fail, remembers those
// that answered 201 (which must be delivered), and returns how many did.
func (c *cluster) tryCheckouts(prefix string, n int) int {
	c.t.Helper()
	if c.start.IsZero() {
		c.start = time.Now()
	}
	ok := 0
	for i := 0; i < n; i++ {
		if status, p, err := c.checkout(fmt.Sprintf("%s-%d-%d@example.com", prefix, len(c.orders), i), ""); err == nil && status == http.StatusCreated {
			c.orders = append(c.orders, p)
			ok++
		}
	}
	return ok
}
