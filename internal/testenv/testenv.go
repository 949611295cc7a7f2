// Package testenv gives tests their own slice of the real services: a
// fresh PostgreSQL database cloned from a migrated template, and a Redis
// connection with a private queue name. Tests that cannot reach a service
// fail with instructions; they never skip.
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/db"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/redisconn"
)

// Defaults match the development machines and CI.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

const postgresHint = `start PostgreSQL and let user postgres in without a password, e.g.
  pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start
or point TEST_DATABASE_URL at a server you may create databases on
(or run: docker compose up -d postgres and set TEST_DATABASE_URL=postgres://sekali:sekali@localhost:5432/sekali?sslmode=disable)`

const redisHint = `start Redis, e.g.
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
or point TEST_REDIS_URL at one (docker compose up -d redis)`

// DatabaseURL is the server tests create their databases on.
func DatabaseURL() string { return envOr("TEST_DATABASE_URL", DefaultDatabaseURL) }

// RedisURL is the Redis tests use.
func RedisURL() string { return envOr("TEST_REDIS_URL", DefaultRedisURL) }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// CheckPostgres connects to the test server once and explains how to start
// it when it cannot.
func CheckPostgres(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		return fmt.Errorf("cannot reach PostgreSQL at %s: %w\n%s", DatabaseURL(), err, postgresHint)
	}
	return conn.Close(ctx)
}

// CheckRedis pings the test Redis and explains how to start it when it cannot.
func CheckRedis(ctx context.Context) error {
	opt, err := redisconn.Parse(RedisURL())
	if err != nil {
		return fmt.Errorf("TEST_REDIS_URL: %w", err)
	}
	rdb := redisconn.NewClient(opt)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot reach Redis at %s: %w\n%s", RedisURL(), err, redisHint)
	}
	return nil
}

// DB is one test's private database.
type DB struct {
	Pool *pgxpool.Pool
	URL  string
	Name string
}

var templateOnce struct {
	sync.Mutex
	name string
}

// NewDB creates a database for t, cloned from a template that has every
// migration applied, and drops it when t ends.
func NewDB(t testing.TB) DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	admin, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		t.Fatalf("cannot reach PostgreSQL at %s: %v\n%s", DatabaseURL(), err, postgresHint)
	}
	defer admin.Close(ctx)

	tmpl, err := migratedTemplate(ctx, admin)
	if err != nil {
		t.Fatalf("prepare template database: %v", err)
	}
	name := "sekali_t_" + randomHex(8)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		t.Fatalf("create test database from %s: %v", tmpl, err)
	}
	dbURL := withDatabase(t, DatabaseURL(), name)
	pool, err := postgres.Open(ctx, dbURL) // configured as the binaries' pools are
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, DatabaseURL())
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return DB{Pool: pool, URL: dbURL, Name: name}
}

// migratedTemplate returns the name of a database holding the current
// schema, creating it when needed. Its name carries a hash of the
// migrations, so a changed migration gets a new template. An advisory
// lock keeps test binaries running in parallel from building it twice.
func migratedTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	templateOnce.Lock()
	defer templateOnce.Unlock()
	if templateOnce.name != "" {
		return templateOnce.name, nil
	}
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "sekali_tmpl_" + sum[:16]

	const lockID = 7_385_697_001
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return "", err
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockID) //nolint:errcheck // the session ends right after

	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		building := name + "_building"
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)"); err != nil {
			return "", err
		}
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
			return "", err
		}
		buildURL, err := replaceDatabase(DatabaseURL(), building)
		if err != nil {
			return "", err
		}
		pool, err := postgres.Open(ctx, buildURL)
		if err != nil {
			return "", err
		}
		err = postgres.Migrate(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
		pool.Close()
		if err != nil {
			return "", err
		}
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", err
		}
	}
	templateOnce.name = name
	return name, nil
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(db.Migrations, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := db.Migrations.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// WithParams is the URL raw with the query parameters kv (name, value,
// name, value, ...) set, replacing any of the same name: a connection
// string with pool or pgx settings added, such as
// WithParams(t, db.URL, "default_query_exec_mode", "cache_describe").
func WithParams(t testing.TB, raw string, kv ...string) string {
	t.Helper()
	if len(kv)%2 != 0 {
		t.Fatalf("WithParams: %d strings, want name, value pairs", len(kv))
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func withDatabase(t testing.TB, raw, name string) string {
	t.Helper()
	u, err := replaceDatabase(raw, name)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	return u
}

// replaceDatabase points a postgres:// URL at another database, keeping
// its credentials and parameters.
func replaceDatabase(raw, name string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("want a postgres:// URL, got %q", raw)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// Redis is a test's view of the shared Redis: the connection options and
// a queue name no other test uses.
type Redis struct {
	Opt   asynq.RedisConnOpt
	URL   string
	Queue string
}

// NewRedis checks that Redis answers and hands out a private queue name.
// Lock and cache keys need no separation: they derive from idempotency
// keys that contain random order ids.
func NewRedis(t testing.TB) Redis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := CheckRedis(ctx); err != nil {
		t.Fatal(err)
	}
	opt, _ := redisconn.Parse(RedisURL()) // CheckRedis parsed it
	return Redis{Opt: opt, URL: RedisURL(), Queue: "test-" + randomHex(6)}
}

// FreePort is a loopback TCP port nothing listened on a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1. Each is held
// until all are chosen, so that the kernel cannot hand the same port out
// twice, as n calls of FreePort may.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RedisServer is a redis-server of one test's own.
type RedisServer struct {
	Redis
	bin  string
	port int
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// NewRedisServer starts a redis-server of the test's own on a free
// loopback port, without persistence, for tests that flush or restart
// Redis. It is stopped when the test ends.
func NewRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (apt-get install redis-server): %v", err)
	}
	port := FreePort(t)
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	opt, _ := redisconn.Parse(url)
	s := &RedisServer{Redis: Redis{Opt: opt, URL: url, Queue: "test-" + randomHex(6)}, bin: bin, port: port, dir: t.TempDir()}
	s.start(t)
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	return s
}

func (s *RedisServer) start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	s.cmd = exec.Command(s.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", "")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := s.cmd.Start()
	s.mu.Unlock()
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	rdb := redisconn.NewClient(s.Opt)
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on port %d did not answer", s.port)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart kills the server (SIGKILL) and starts an empty one on the same
// port, as a Redis without persistence comes back after a crash.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.mu.Unlock()
	s.start(t)
}
