package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSentinel is a highly available Redis of one test's own: a
// primary, a replica and a Sentinel that watches them, on free loopback
// ports, without persistence.
type RedisSentinel struct {
	URL        string // redis-sentinel://127.0.0.1:<port>?master=<name>
	Master     string
	primary    *exec.Cmd
	primaryAt  string
	sentinelAt string
}

// NewRedisSentinel starts the three servers and waits until the Sentinel
// knows the primary and its replica.
func NewRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (apt-get install redis-server): %v", err)
	}
	dir := t.TempDir()
	ports := FreePorts(t, 3)
	pPort, rPort, sPort := ports[0], ports[1], ports[2]
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server %v: %v", args, err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	common := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--logfile", ""}
	s := &RedisSentinel{Master: "sekali", primaryAt: fmt.Sprintf("127.0.0.1:%d", pPort), sentinelAt: fmt.Sprintf("127.0.0.1:%d", sPort)}
	s.primary = start(append([]string{"--port", strconv.Itoa(pPort), "--dir", mkdir(t, dir, "primary")}, common...)...)
	start(append([]string{"--port", strconv.Itoa(rPort), "--dir", mkdir(t, dir, "replica"), "--replicaof", "127.0.0.1", strconv.Itoa(pPort)}, common...)...)
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, sPort, dir, s.Master, pPort, s.Master, s.Master, s.Master)), 0o644); err != nil {
		t.Fatal(err)
	}
	start(conf, "--sentinel")
	s.URL = fmt.Sprintf("redis-sentinel://%s?master=%s", s.sentinelAt, s.Master)

	sentinel := redis.NewSentinelClient(&redis.Options{Addr: s.sentinelAt})
	defer sentinel.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		replicas, err := sentinel.Replicas(context.Background(), s.Master).Result()
		if err == nil && len(replicas) > 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sentinel did not see the replica: %v %v", replicas, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mkdir(t testing.TB, parent, name string) string {
	t.Helper()
	d := filepath.Join(parent, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// KillPrimary kills the primary (SIGKILL) and waits until the Sentinel has
// promoted the replica.
func (s *RedisSentinel) KillPrimary(t testing.TB) {
	t.Helper()
	_ = s.primary.Process.Kill()
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: s.sentinelAt})
	defer sentinel.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		addr, err := sentinel.GetMasterAddrByName(context.Background(), s.Master).Result()
		if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) != s.primaryAt {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover within 30 s (master still %v, %v)", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
