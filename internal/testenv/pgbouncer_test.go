package testenv

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// These tests check what pgbouncer.go says of the real PgBouncer: that it
// pools transactions, and what that does to a client's session.

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestPgBouncerPoolsTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := NewDB(t)
	b := NewPgBouncer(t, db, PgBouncerOptions{PoolSize: 1})

	// Two clients, one server connection: each statement of either runs
	// in the same backend. (Until the last step, the statements do not
	// use pgx's statement cache: see there.)
	exec := pgx.QueryExecModeExec
	a, c := connect(t, b.URL), connect(t, b.URL)
	if mode := b.Pool(t)["pool_mode"]; mode != "transaction" {
		t.Fatalf("pool_mode %q, want transaction", mode)
	}
	var pidA, pidC int
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()", exec).Scan(&pidA); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()", exec).Scan(&pidC); err != nil {
		t.Fatal(err)
	}
	if pidA != pidC {
		t.Errorf("backends %d and %d: the clients do not share the one server connection", pidA, pidC)
	}

	// So a session's state is every client's: a session advisory lock
	// taken by one is held "again" by the other, ...
	var got bool
	if err := a.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)", exec).Scan(&got); err != nil || !got {
		t.Fatalf("lock: %v %v", got, err)
	}
	if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)", exec).Scan(&got); err != nil || !got {
		t.Errorf("the second client did not get the session lock the first holds (%v %v): not one session?", got, err)
	}
	// ... and pgx's default statement cache, which names a statement by
	// its text, meets the other client's copy.
	if _, err := a.Exec(ctx, "SELECT 1 + $1::int", 1); err != nil {
		t.Fatal(err)
	}
	_, err := c.Exec(ctx, "SELECT 1 + $1::int", 1)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P05" {
		t.Errorf("the second client's prepare: %v, want 42P05 duplicate_prepared_statement", err)
	}
}

func TestPgBouncerRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := NewDB(t)
	b := NewPgBouncer(t, db, PgBouncerOptions{})
	before := connect(t, b.URL)
	if err := before.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	b.Restart(t)
	if err := before.Ping(ctx); err == nil {
		t.Error("a connection from before the restart still answers")
	}
	if err := connect(t, b.URL).Ping(ctx); err != nil {
		t.Errorf("after the restart: %v", err)
	}
}
