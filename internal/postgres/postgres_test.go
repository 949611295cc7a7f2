package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/sekali-dev/sekali/db"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// emptyDB is a database with no schema at all, dropped when t ends
// (testenv.NewDB's come migrated).
func emptyDB(t *testing.T) testenv.DB {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.DatabaseURL())
	if err != nil {
		t.Fatalf("cannot reach PostgreSQL at %s: %v (see make preflight)", testenv.DatabaseURL(), err)
	}
	defer admin.Close(ctx)
	name := "sekali_t_" + strings.ToLower(rand.Text())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), testenv.DatabaseURL())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return testenv.DB{Pool: pool, URL: u.String(), Name: name}
}

func migrationCount(t *testing.T) int {
	t.Helper()
	files, err := fs.Glob(db.Migrations, "migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("embedded migrations: %v %v", files, err)
	}
	return len(files)
}

// Replicas starting together behind PgBouncer in transaction mode, with
// fewer server connections than replicas, take turns: while the first
// migrates, no other does, whichever server connection the bouncer hands
// it; each migration is applied once, every replica starts, and no
// advisory lock is left behind on a server connection.
//
// To catch the first one mid-run, the test creates the first
// migration's first table itself in a transaction it keeps open: the
// replica's CREATE TABLE waits for that transaction, on one server
// connection, while its lock is held. goose's session locker took its
// lock on one server connection and then ran on any; the next replica
// handed that connection held the same session lock "again" and migrated
// beside the first, and the two waited here together.
func TestMigrateThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := emptyDB(t)
	b := testenv.NewPgBouncer(t, d, testenv.PgBouncerOptions{PoolSize: 2})
	url := testenv.WithParams(t, b.URL, "default_query_exec_mode", "cache_describe", "pool_max_conns", "2")

	blocker, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx) //nolint:errcheck // rolled back below
	if _, err := blocker.Exec(ctx, "CREATE TABLE orders (id int)"); err != nil {
		t.Fatal(err)
	}

	const replicas = 6
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			pool, err := postgres.Open(ctx, url)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			errs[i] = postgres.Migrate(ctx, pool, quiet)
		})
	}
	migrating := func() int {
		var n int
		if err := d.Pool.QueryRow(ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' AND query ILIKE '%CREATE TABLE orders%'",
			d.Name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Either the others are all queued at the bouncer behind the one
	// that migrates (it holds both server connections: its lock's and its
	// migration's), or a second one got in.
	testenv.WaitFor(t, "one replica to migrate while the others wait for it (or a second to migrate beside it)", 30*time.Second, func() bool {
		n := migrating()
		waiting, _ := strconv.Atoi(b.Pool(t)["cl_waiting"])
		return n >= 2 || (n == 1 && waiting >= replicas-1)
	})
	if n := migrating(); n != 1 {
		t.Errorf("%d replicas migrating at once", n)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}

	var applied, versions int
	if err := d.Pool.QueryRow(ctx,
		"SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0 AND is_applied").Scan(&applied, &versions); err != nil {
		t.Fatal(err)
	}
	if want := migrationCount(t); applied != want || versions != want {
		t.Errorf("goose_db_version: %d rows for %d versions, want %d of each (one per migration)", applied, versions, want)
	}
	var held int
	if err := d.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Errorf("%d advisory locks still held after every replica finished", held)
	}
}

// While another process holds the migration lock, Migrate applies
// nothing; it goes ahead once the lock is free. The holder may be a
// transaction (this release) or a session (goose's locker, the previous
// release, during a rolling upgrade).
func TestMigrateWaitsForTheLock(t *testing.T) {
	t.Parallel()
	for _, holder := range []string{"transaction", "session"} {
		t.Run(holder, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := emptyDB(t)
			other, err := pgx.Connect(ctx, d.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close(ctx)
			var release func()
			if holder == "transaction" {
				tx, err := other.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lock.DefaultLockID); err != nil {
					t.Fatal(err)
				}
				release = func() { _ = tx.Rollback(ctx) }
			} else {
				if _, err := other.Exec(ctx, "SELECT pg_advisory_lock($1)", lock.DefaultLockID); err != nil {
					t.Fatal(err)
				}
				release = func() { _, _ = other.Exec(ctx, "SELECT pg_advisory_unlock($1)", lock.DefaultLockID) }
			}

			short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			err = postgres.Migrate(short, d.Pool, quiet)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Migrate while the lock is held: %v, want it to wait until its context ends", err)
			}
			var exists bool
			if err := d.Pool.QueryRow(ctx, "SELECT to_regclass('goose_db_version') IS NOT NULL").Scan(&exists); err != nil {
				t.Fatal(err)
			}
			if exists {
				t.Error("Migrate touched the schema without the lock")
			}

			release()
			if err := postgres.Migrate(ctx, d.Pool, quiet); err != nil {
				t.Fatalf("Migrate once the lock is free: %v", err)
			}
			var n int
			if err := d.Pool.QueryRow(ctx, "SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&n); err != nil || n != migrationCount(t) {
				t.Errorf("%d migrations recorded (%v), want %d", n, err, migrationCount(t))
			}
		})
	}
}

// Behind PgBouncer without default_query_exec_mode, pgx's statement cache
// meets the statements other clients prepared on the same server
// connections. The binaries migrate at start, so that is where it shows;
// the error then says what to set. (With three replicas one after the
// other and two server connections, the third at the latest finds its
// first statement already prepared there.)
func TestMigrateBehindPgBouncerWithoutTheSettingSaysWhatToDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testenv.NewDB(t)
	b := testenv.NewPgBouncer(t, d, testenv.PgBouncerOptions{PoolSize: 2})
	failed := 0
	for range 3 {
		pool, err := postgres.Open(ctx, b.URL)
		if err != nil {
			t.Fatal(err)
		}
		err = postgres.Migrate(ctx, pool, quiet)
		pool.Close()
		if err == nil {
			continue
		}
		failed++
		if !strings.Contains(err.Error(), "add default_query_exec_mode=cache_describe to DATABASE_URL") {
			t.Errorf("Migrate: %v; want the hint", err)
		}
	}
	if failed == 0 {
		t.Error("three replicas migrated through the bouncer with pgx's statement cache; want the collision this test is about")
	}
}

// TestGenericPlans runs an array-keyed statement as the worker's batches
// do and asks PostgreSQL which plan each execution got: the generic one
// every time, where the same statement sent plainly is planned anew (a
// custom plan) every time; the setting ends with its transaction.
func TestGenericPlans(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	pool, err := postgres.Open(ctx, testenv.WithParams(t, db.URL, "pool_max_conns", "1"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const byArray = "SELECT count(*) FROM notification_deliveries WHERE id = ANY($1::uuid[])"
	const byArrayPlain = byArray + " -- plain"
	generic := postgres.GenericPlans{DB: pool}
	for i := range 8 {
		ids := []uuid.UUID{uuid.New()}
		var n int
		if err := generic.QueryRow(ctx, byArray, ids).Scan(&n); err != nil {
			t.Fatalf("execution %d: %v", i, err)
		}
		if err := pool.QueryRow(ctx, byArrayPlain, ids).Scan(&n); err != nil {
			t.Fatalf("plain execution %d: %v", i, err)
		}
	}
	plans := func(sql string) (genericPlans, customPlans int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1", sql).Scan(&genericPlans, &customPlans); err != nil {
			t.Fatalf("plans of %q: %v", sql, err)
		}
		return genericPlans, customPlans
	}
	if g, c := plans(byArray); g != 8 || c != 0 {
		t.Errorf("through GenericPlans: %d generic and %d custom plans, want 8 and 0", g, c)
	}
	if g, c := plans(byArrayPlain); c == 0 {
		t.Errorf("sent plainly: %d generic and %d custom plans; without GenericPlans PostgreSQL would plan it anew, or this test no longer shows why GenericPlans exists", g, c)
	}
	var mode string
	if err := pool.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode); err != nil || mode != "auto" {
		t.Errorf("plan_cache_mode after a batch = %q, %v; want auto: the setting must end with its transaction", mode, err)
	}
	if err := generic.QueryRow(ctx, "SELECT 1 WHERE false").Scan(&mode); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("QueryRow of no row = %v, want pgx.ErrNoRows", err)
	}
	if _, err := generic.Exec(ctx, "SELECT no_such_column"); err == nil {
		t.Error("Exec of a broken statement returned no error")
	}
}

// Migration 15 gives the deliveries pinned before it and not finished
// for good (their earliest unknown attempt's time was not kept) the
// earliest time it can have been, so that the 24-hour window of a
// provider's deduplication errs on the side of holding them; the rest
// get none. Without a hand-over in their history, that is the row's own
// creation. The rows are written with the
// schema of migration 14, as a release before it left them: raw SQL on
// purpose.
func TestMigration15BackfillsPinnedDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := emptyDB(t)
	fsys, err := fs.Sub(db.Migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDBFromPool(d.Pool)
	defer sqlDB.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 14); err != nil {
		t.Fatal(err)
	}
	order := uuid.New()
	if _, err := d.Pool.Exec(ctx, `INSERT INTO orders (id, customer_email, customer_name, currency, total_minor) VALUES ($1, 'a@example.com', 'A', 'IDR', 1)`, order); err != nil {
		t.Fatal(err)
	}
	rows := map[string]struct {
		status string
		pinned bool
		want   bool
	}{
		"pinned, pending":    {"pending", true, true},
		"pinned, held":       {"held", true, true},
		"pinned, failed":     {"failed", true, true}, // an operator's bulk retry may take it
		"pinned, suppressed": {"suppressed", true, true},
		"pinned, sent":       {"sent", true, false},
		"not pinned":         {"pending", false, false},
	}
	ids := map[string]uuid.UUID{}
	for name, r := range rows {
		ids[name] = uuid.New()
		if _, err := d.Pool.Exec(ctx, `INSERT INTO notification_deliveries (id, order_id, template, recipient, idempotency_key, status, provider, provider_pinned, trying_since, template_data, sent_at)
			VALUES ($1, $2, 'order-confirmation', 'a@example.com', $3, $4, 'resend', $5, now() - interval '30 hours', '{}', CASE WHEN $4 = 'sent' THEN now() END)`,
			ids[name], order, "order-confirmation:"+ids[name].String(), r.status, r.pinned); err != nil {
			t.Fatal(err)
		}
	}
	// One with a hand-over in its history: that is its earliest time.
	handedOver := uuid.New()
	if _, err := d.Pool.Exec(ctx, `INSERT INTO notification_deliveries (id, order_id, template, recipient, idempotency_key, status, provider, provider_pinned, template_data)
		VALUES ($1, $2, 'order-confirmation', 'b@example.com', 'order-confirmation:b', 'pending', 'resend', true, '{}')`, handedOver, order); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool.Exec(ctx, `INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, at)
		VALUES ($1, 'handed_over', 'sending', 'sending', 1, 'old-worker', now() - interval '20 hours'),
		       ($1, 'handed_over', 'sending', 'sending', 2, 'old-worker', now() - interval '2 hours')`, handedOver); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 15); err != nil {
		t.Fatal(err)
	}
	var fromHistory bool
	if err := d.Pool.QueryRow(ctx, `SELECT unsettled_since BETWEEN now() - interval '21 hours' AND now() - interval '19 hours'
		FROM notification_deliveries WHERE id = $1`, handedOver).Scan(&fromHistory); err != nil || !fromHistory {
		t.Errorf("a pinned delivery with hand-overs in its history: backfilled from the first %v, %v; want true", fromHistory, err)
	}
	for name, r := range rows {
		var backfilled bool
		if err := d.Pool.QueryRow(ctx, `SELECT unsettled_since IS NOT DISTINCT FROM created_at AND unsettled_since IS NOT NULL
			FROM notification_deliveries WHERE id = $1`, ids[name]).Scan(&backfilled); err != nil {
			t.Fatal(err)
		}
		if backfilled != r.want {
			t.Errorf("%s: backfilled %v, want %v", name, backfilled, r.want)
		}
	}
}

// Migration 21 makes "may have been sent" a state the database keeps,
// and first makes the rows true of it: a sent row has nothing unknown; a
// hand-over not yet settled is unknown from its time; an operator's
// cancel of a pinned row was settled by the operator; and a row failed
// or suppressed while an attempt's outcome was unknown — told to the shop
// as not sent while the provider may have had it — is held for an
// operator, with a history event that says why. The rows are written
// with the schema of migration 20: raw SQL on purpose.
func TestMigration21HoldsWhatWasToldNotSentInDoubt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := emptyDB(t)
	fsys, err := fs.Sub(db.Migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDBFromPool(d.Pool)
	defer sqlDB.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 20); err != nil {
		t.Fatal(err)
	}
	order := uuid.New()
	if _, err := d.Pool.Exec(ctx, `INSERT INTO orders (id, customer_email, customer_name, currency, total_minor) VALUES ($1, 'a@example.com', 'A', 'IDR', 1)`, order); err != nil {
		t.Fatal(err)
	}
	type want struct {
		status    string
		inDoubt   bool
		settledBy string
	}
	rows := map[string]struct {
		status, extra string
		want          want
	}{
		"suppressed in doubt":    {"suppressed", "provider_pinned = true, unsettled_since = now() - interval '1 hour'", want{"held", true, ""}},
		"failed, pinned":         {"failed", "provider_pinned = true, unsettled_since = now() - interval '1 hour'", want{"held", true, ""}},
		"cancelled on the word":  {"cancelled", "provider_pinned = true, unsettled_since = now() - interval '1 hour'", want{"cancelled", false, "operator"}},
		"sent, pinned":           {"sent", "provider_pinned = true, unsettled_since = now() - interval '1 hour', sent_at = now()", want{"sent", false, ""}},
		"sending, handed over":   {"sending", "lease_token = gen_random_uuid(), lease_expires_at = now(), handed_over_at = now() - interval '5 minutes'", want{"sending", true, ""}},
		"pending, pinned":        {"pending", "provider_pinned = true", want{"pending", true, ""}},
		"failed, never in doubt": {"failed", "handed_over_at = now() - interval '1 hour'", want{"failed", false, ""}},
	}
	ids := map[string]uuid.UUID{}
	for name, r := range rows {
		ids[name] = uuid.New()
		if _, err := d.Pool.Exec(ctx, `INSERT INTO notification_deliveries (id, order_id, template, recipient, idempotency_key, status, provider, template_data)
			VALUES ($1, $2, 'order-confirmation', 'a@example.com', $3, 'pending', 'resend', '{}')`, ids[name], order, "order-confirmation:"+ids[name].String()); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Pool.Exec(ctx, `INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor) VALUES ($1, 'x', 'pending', $2, 1, 'old')`,
			ids[name], r.status); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Pool.Exec(ctx, `UPDATE notification_deliveries SET status = $2, `+r.extra+` WHERE id = $1`, ids[name], r.status); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.UpTo(ctx, 21); err != nil {
		t.Fatal(err)
	}
	for name, r := range rows {
		var got want
		var settledBy *string
		if err := d.Pool.QueryRow(ctx, `SELECT status, unsettled_since IS NOT NULL, settled_by FROM notification_deliveries WHERE id = $1`,
			ids[name]).Scan(&got.status, &got.inDoubt, &settledBy); err != nil {
			t.Fatal(err)
		}
		if settledBy != nil {
			got.settledBy = *settledBy
		}
		if got != r.want {
			t.Errorf("%s: %+v, want %+v", name, got, r.want)
		}
	}
	var reopened int
	if err := d.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_events WHERE event = 'reopened' AND to_status = 'held'`).Scan(&reopened); err != nil || reopened != 2 {
		t.Errorf("%d reopened events, %v; want one for each held", reopened, err)
	}
}
