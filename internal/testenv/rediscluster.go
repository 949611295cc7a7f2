package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/redisconn"
)

// RedisCluster is a Redis Cluster of one test's own: three primaries with
// one replica each, on free loopback ports, without persistence. Its URL
// (redis-cluster://…) lists the three primaries it started with.
type RedisCluster struct {
	Redis // Opt and URL are the cluster's; Queue is a private name

	mu      sync.Mutex
	nodes   []*clusterNode
	clients map[string]*redis.Client // plain clients of single nodes, by address
}

type clusterNode struct {
	addr   string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd's process has exited
	dead   bool
}

// clusterNodeTimeout is how long the cluster takes a silent primary for
// alive; a killed one is replaced within a few of these.
const clusterNodeTimeout = 1000 * time.Millisecond

// NewRedisCluster starts the six servers, joins them with redis-cli
// --cluster create, and waits until every node reports the cluster ok and
// every replica is in sync with its primary.
func NewRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (apt-get install redis-server): %v", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli is not on PATH (apt-get install redis-server, which brings redis-tools): %v", err)
	}
	dir := t.TempDir()
	c := &RedisCluster{clients: map[string]*redis.Client{}}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, rdb := range c.clients {
			_ = rdb.Close()
		}
		for _, n := range c.nodes {
			_ = n.cmd.Process.Kill()
			<-n.exited
		}
	})
	// Twelve distinct ports (a node's and its cluster bus's). Another
	// process may still take one before its node binds it: such a node
	// exits at once, and starts again on other ports.
	ports := FreePorts(t, 12)
	for i := range 6 {
		n := &clusterNode{dir: mkdir(t, dir, "node-"+strconv.Itoa(i))}
		c.startNode(t, server, n, ports[2*i], ports[2*i+1])
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		for try := 1; !c.answers(n, 10*time.Second); try++ {
			if try == 3 {
				t.Fatalf("redis-server for the cluster at %s did not come up:\n%s", n.addr, c.logs())
			}
			more := FreePorts(t, 2)
			c.startNode(t, server, n, more[0], more[1])
		}
	}

	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append(args, "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s\n%s", err, out, c.logs())
	}
	c.waitFor(t, "the cluster to be ok on every node, each replica in sync", 30*time.Second, c.healthy)

	var primaries []string
	for _, n := range c.nodes {
		if role, _ := c.role(context.Background(), n.addr); role == "master" {
			primaries = append(primaries, n.addr)
		}
	}
	c.URL = "redis-cluster://" + strings.Join(primaries, ",")
	if c.Opt, err = redisconn.Parse(c.URL); err != nil {
		t.Fatal(err)
	}
	c.Queue = "test-" + randomHex(6)
	return c
}

// startNode starts n's redis-server on port and bus.
func (c *RedisCluster) startNode(t testing.TB, server string, n *clusterNode, port, bus int) {
	t.Helper()
	n.addr = fmt.Sprintf("127.0.0.1:%d", port)
	n.cmd = exec.Command(server,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
		"--cluster-config-file", filepath.Join(n.dir, "nodes.conf"),
		"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout.Milliseconds())),
		// A replica may always take over, however long it was cut off:
		// the tests kill primaries on purpose.
		"--cluster-replica-validity-factor", "0",
		// A replica's first sync starts at once, not after 5 s.
		"--repl-diskless-sync-delay", "0",
		"--save", "", "--appendonly", "no", "--dir", n.dir, "--logfile", filepath.Join(n.dir, "redis.log"))
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start redis-server for the cluster: %v", err)
	}
	n.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_, _ = cmd.Process.Wait()
		close(exited)
	}(n.cmd, n.exited)
}

// answers waits until n answers PING, and reports false if its process
// exits first (its port was taken) or timeout passes.
func (c *RedisCluster) answers(n *clusterNode, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-n.exited:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.node(n.addr).Ping(ctx).Err()
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// Primary is the address of the primary that serves key's hash slot, as
// the cluster sees it now.
func (c *RedisCluster) Primary(t testing.TB, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr, err := c.owner(ctx, c.live()[0], key)
	if err != nil {
		t.Fatalf("find the primary of %q: %v", key, err)
	}
	return addr
}

// Failover makes the replica of key's primary take over with CLUSTER
// FAILOVER, the planned hand-over (the replica catches up first, so no
// acknowledged write is lost), and waits until every node agrees and the
// former primary, now a replica, is in sync. It returns the new
// primary's address.
func (c *RedisCluster) Failover(t testing.TB, key string) string {
	t.Helper()
	old := c.Primary(t, key)
	replica := c.replicaOf(t, old)
	// The primary must know the replica as its own, or it ignores the
	// replica's request to pause for the hand-over.
	c.waitFor(t, old+" to know "+replica+" as its replica", 10*time.Second, func(ctx context.Context) error {
		id, err := c.node(old).Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return err
		}
		replicas, err := c.node(old).Do(ctx, "CLUSTER", "REPLICAS", id).StringSlice()
		if err != nil {
			return err
		}
		for _, line := range replicas {
			if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], replica+"@") && !strings.Contains(f[2], "fail") {
				return nil
			}
		}
		return fmt.Errorf("%s's replicas: %q", old, replicas)
	})
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.node(replica).ClusterFailover(ctx).Err()
		cancel()
		if err != nil {
			t.Fatalf("CLUSTER FAILOVER on %s: %v", replica, err)
		}
		// A manual failover gives up after 5 s, as when the primary does
		// not know the replica as its own yet (right after an earlier
		// failover); then it is asked again.
		err = poll(6*time.Second, c.promoted(key, replica))
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("CLUSTER FAILOVER on %s did not happen, three times: %v\n%s", replica, err, c.logs())
		}
	}
	c.waitFor(t, "every replica to be in sync after the failover", 30*time.Second, c.healthy)
	return replica
}

// KillPrimary kills key's primary (SIGKILL), as a machine dies, and waits
// until its replica has been elected in its place and the cluster is ok
// again. What the primary had not yet replicated is lost, as in
// production. It returns the new primary's address.
func (c *RedisCluster) KillPrimary(t testing.TB, key string) string {
	t.Helper()
	old := c.Primary(t, key)
	replica := c.replicaOf(t, old)
	c.mu.Lock()
	for _, n := range c.nodes {
		if n.addr == old {
			_ = n.cmd.Process.Kill()
			<-n.exited
			n.dead = true
		}
	}
	c.mu.Unlock()
	c.waitFor(t, replica+" to serve "+key+" on every node", 30*time.Second, c.promoted(key, replica))
	return replica
}

// promoted is nil once replica is a primary and every live node says it
// serves key's slot and reports the cluster ok.
func (c *RedisCluster) promoted(key, replica string) func(context.Context) error {
	return func(ctx context.Context) error {
		role, err := c.role(ctx, replica)
		if err != nil {
			return err
		}
		if role != "master" {
			return fmt.Errorf("%s is still a %s", replica, role)
		}
		for _, addr := range c.live() {
			owner, err := c.owner(ctx, addr, key)
			if err != nil {
				return err
			}
			if owner != replica {
				return fmt.Errorf("%s still says %s serves %q", addr, owner, key)
			}
			if err := clusterOK(ctx, c.node(addr)); err != nil {
				return fmt.Errorf("%s: %w", addr, err)
			}
		}
		return nil
	}
}

// healthy is nil when every live node reports the cluster ok, knows all
// its nodes, and every replica's link to its primary is up.
func (c *RedisCluster) healthy(ctx context.Context) error {
	for _, addr := range c.live() {
		rdb := c.node(addr)
		if err := clusterOK(ctx, rdb); err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica %s is not in sync yet", addr)
		}
	}
	return nil
}

func clusterOK(ctx context.Context, rdb *redis.Client) error {
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_ok:16384"} {
		if !strings.Contains(info, want) {
			return fmt.Errorf("cluster not ready: no %q in\n%s", want, info)
		}
	}
	return nil
}

// owner is the primary of key's slot according to the node at addr.
func (c *RedisCluster) owner(ctx context.Context, addr, key string) (string, error) {
	rdb := c.node(addr)
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("%s serves no slot %d", addr, slot)
}

// replicaOf is the address of a replica of the primary at addr.
func (c *RedisCluster) replicaOf(t testing.TB, primary string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range c.live() {
		if addr == primary {
			continue
		}
		info, err := c.node(addr).Info(ctx, "replication").Result()
		if err != nil {
			t.Fatalf("INFO replication on %s: %v", addr, err)
		}
		host, port, _ := strings.Cut(primary, ":")
		if strings.Contains(info, "role:slave") && strings.Contains(info, "master_host:"+host+"\r\n") &&
			strings.Contains(info, "master_port:"+port+"\r\n") && strings.Contains(info, "master_link_status:up") {
			return addr
		}
	}
	t.Fatalf("the primary %s has no replica in sync", primary)
	return ""
}

func (c *RedisCluster) role(ctx context.Context, addr string) (string, error) {
	v, err := c.node(addr).Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(v) == 0 {
		return "", fmt.Errorf("empty ROLE reply from %s", addr)
	}
	role, _ := v[0].(string)
	return role, nil
}

// node is a plain client of one node, for the cluster's own commands.
func (c *RedisCluster) node(addr string) *redis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	rdb, ok := c.clients[addr]
	if !ok {
		rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		c.clients[addr] = rdb
	}
	return rdb
}

func (c *RedisCluster) live() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.nodes {
		if !n.dead {
			out = append(out, n.addr)
		}
	}
	return out
}

// logs is every node's log, for a failure message.
func (c *RedisCluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		log, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
		fmt.Fprintf(&b, "--- %s\n%s", n.addr, log)
	}
	return b.String()
}

// waitFor polls cond until it returns nil; on timeout it fails with the
// last error and the nodes' logs.
func (c *RedisCluster) waitFor(t testing.TB, what string, timeout time.Duration, cond func(context.Context) error) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("timed out after %v waiting for %s: %v\n%s", timeout, what, err, c.logs())
	}
}

// poll calls cond every 50 ms until it returns nil, or returns its last
// error after timeout.
func poll(timeout time.Duration, cond func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cond(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
