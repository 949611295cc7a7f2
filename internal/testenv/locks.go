package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// LockWaiters counts the backends of pool's database that wait for a
// lock another backend holds and whose statement contains like (any
// statement when like is ""): how a test that holds a row lock on
// purpose knows the statement it means to stall has reached it.
func LockWaiters(t testing.TB, pool *pgxpool.Pool, like string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'
		  AND cardinality(pg_blocking_pids(pid)) > 0 AND strpos(query, $1) > 0`, like).Scan(&n); err != nil {
		t.Fatalf("count the backends waiting for a lock: %v", err)
	}
	return n
}
