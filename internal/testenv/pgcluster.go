package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresCluster is a PostgreSQL server of one test's own, made with
// initdb in a temporary directory, for tests that restart PostgreSQL.
type PostgresCluster struct {
	URL     string // of database "postgres", user postgres, trust auth
	dataDir string
	logFile string // the server's output; also keeps it off our pipes
	bindir  string
	port    int
}

// NewPostgresCluster creates and starts a cluster on a free loopback port;
// it is stopped and removed when the test ends. As root, the server runs
// as the postgres user (initdb refuses root).
func NewPostgresCluster(t testing.TB) *PostgresCluster {
	t.Helper()
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		t.Fatalf("pg_config --bindir: %v (apt-get install postgresql)", err)
	}
	c := &PostgresCluster{bindir: strings.TrimSpace(string(out))}
	dir, err := os.MkdirTemp("", "sekali-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c.dataDir = filepath.Join(dir, "data")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c.port = FreePort(t)

	c.run(t, "initdb", "-D", c.dataDir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nfsync = off\nmax_connections = 200\n", c.port, dir)
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c.logFile = filepath.Join(dir, "log")
	c.run(t, "pg_ctl", "-D", c.dataDir, "-l", c.logFile, "-w", "start")
	t.Cleanup(func() { _ = c.command("pg_ctl", "-D", c.dataDir, "-m", "immediate", "-w", "stop").Run() })
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
	c.waitReady(t)
	return c
}

func (c *PostgresCluster) command(name string, args ...string) *exec.Cmd {
	bin := filepath.Join(c.bindir, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	}
	return exec.Command(bin, args...)
}

func (c *PostgresCluster) run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := c.command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

func (c *PostgresCluster) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(context.Background(), c.URL)
		if err == nil {
			conn.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL on port %d did not come up: %v", c.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart stops the server the way a crash does (-m immediate: no
// checkpoint, every connection cut) and starts it again.
func (c *PostgresCluster) Restart(t testing.TB) {
	t.Helper()
	c.run(t, "pg_ctl", "-D", c.dataDir, "-l", c.logFile, "-m", "immediate", "-w", "restart")
	c.waitReady(t)
}
