//go:build chaoslong

package chaos_test

import (
	"testing"
	"time"
)

// A primary of the Redis Cluster dies (SIGKILL) while orders keep coming:
// until its replica is elected the whole cluster answers CLUSTERDOWN
// (cluster-require-full-coverage, the default), then clients keep
// dialing the dead node until they re-read the slot map (go-redis: when
// it is 10 s old), and what the dead primary had not replicated is gone.
// asynq may be left with a task it could not move out of active; its
// lease expires after 30 s and the reconciler queues it again. Each order
// answered 201 still gets one e-mail.
func TestRedisClusterPrimaryKilled(t *testing.T) {
	t.Parallel()
	rc, c, orders := startOnRedisCluster(t)
	victim := c.keyNotOn(rc, rc.Primary(t, c.queueKey()))
	dead := rc.Primary(t, victim)
	t.Logf("killed %s; %s took over", dead, rc.KillPrimary(t, victim))
	time.Sleep(fault(2*time.Second, 60*time.Second))
	// And then the queue's own primary.
	t.Logf("killed the queue's primary; %s took over", rc.KillPrimary(t, c.queueKey()))
	time.Sleep(fault(2*time.Second, 30*time.Second))
	c.endOnRedisCluster(orders, "Redis Cluster: two primaries killed mid-run (long)")
}
