package testenv

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/redisconn"
)

// The cluster spreads keys over three primaries, and both ways of
// failing one over leave its slots served by the former replica, which a
// cluster client follows.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	c := NewRedisCluster(t)
	rdb := redisconn.NewClient(c.Opt)
	defer rdb.Close()
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("client of %s is %T, want a cluster client", c.URL, rdb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	owners := map[string]bool{}
	for i := range 50 {
		key := "k" + strconv.Itoa(i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		owners[c.Primary(t, key)] = true
	}
	if len(owners) != 3 {
		t.Errorf("50 keys landed on %d primaries, want 3", len(owners))
	}

	before := c.Primary(t, "k0")
	after := c.Failover(t, "k0")
	if after == before || c.Primary(t, "k0") != after {
		t.Errorf("failover: primary of k0 was %s, is %s (Failover said %s)", before, c.Primary(t, "k0"), after)
	}
	// A planned failover loses nothing.
	if v, err := rdb.Get(ctx, "k0").Int(); err != nil || v != 0 {
		t.Errorf("GET k0 after the failover = %v, %v", v, err)
	}

	// Kill the primary of a key another primary serves.
	victim := ""
	for i := range 50 {
		if key := "k" + strconv.Itoa(i); c.Primary(t, key) != after {
			victim = key
			break
		}
	}
	dead := c.Primary(t, victim)
	promoted := c.KillPrimary(t, victim)
	if promoted == dead || c.Primary(t, victim) != promoted {
		t.Errorf("kill: primary of %s was %s, is %s", victim, dead, c.Primary(t, victim))
	}
	// go-redis (v9.14) re-reads the slot map on a MOVED, or once it is
	// 10 s old; a refused connection is retried on the dead node until
	// then. So the client follows within about 10 s.
	WaitFor(t, "a write to "+victim+"'s slot", 20*time.Second, func() bool {
		return rdb.Set(ctx, victim, "again", 0).Err() == nil
	})
	if v, err := rdb.Get(ctx, victim).Result(); err != nil || v != "again" {
		t.Errorf("GET %s after the kill = %q, %v", victim, v, err)
	}
}
