package testenv

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/postgres"
)

// OneBackend is a pool of a single connection to db, and the CPU time its
// PostgreSQL backend has used so far, for benchmarks that report what a
// statement costs the database (b.ReportMetric(…, "pg-µs/op")). The
// backend's CPU is read from /proc, so PostgreSQL must run on this
// machine, as it does in the tests.
func OneBackend(t testing.TB, db DB) (*pgxpool.Pool, func() time.Duration) {
	t.Helper()
	pool, err := postgres.Open(context.Background(), WithParams(t, db.URL, "pool_max_conns", "1", "pool_min_conns", "1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var pid int
	if err := pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pool, func() time.Duration {
		d, err := processCPU(pid)
		if err != nil {
			t.Fatalf("CPU of PostgreSQL backend %d (is PostgreSQL on this machine?): %v", pid, err)
		}
		return d
	}
}

// processCPU is the user and system CPU time of process pid.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * time.Second / 100, nil // clock ticks: USER_HZ is 100 on Linux
}
