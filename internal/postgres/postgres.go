// Package postgres opens the connection pool every binary shares and
// applies the embedded schema migrations.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"

	"github.com/sekali-dev/sekali/db"
)

// DefaultURL is DATABASE_URL's default in every binary: the database of
// docker compose's postgres service.
const DefaultURL = "postgres://sekali:sekali@localhost:5432/sekali?sslmode=disable"

// Open connects to PostgreSQL and checks the connection. Pool settings
// such as pool_max_conns ride on the URL, as pgxpool reads them there.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	cfg.AfterConnect = registerTypes
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("reach postgres at %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// registerTypes teaches a connection to encode and scan google/uuid's
// UUID as PostgreSQL's uuid directly. Without it pgx goes through the
// type's driver.Valuer and sql.Scanner, as text, and plans the encoding
// anew for every parameter: about a tenth of the worker's CPU under load
// (every statement of a delivery carries its id and lease token).
func registerTypes(_ context.Context, conn *pgx.Conn) error {
	pgxuuid.Register(conn.TypeMap())
	return nil
}

// Migrate applies every pending migration. Several replicas may start at
// once: one migrates, the others wait for it and then find nothing left
// to do.
//
// They take turns through a PostgreSQL advisory lock that a transaction of
// its own holds, on a connection outside the pool, for the whole run. The
// lock is transaction-scoped on purpose: behind a pooler in transaction
// mode (PgBouncer) a session lock would be taken on one server connection
// and released, or not, on another, and a second replica handed the first
// one's server connection would find the lock already its own; a
// transaction stays on one server connection until it ends, wherever it
// runs. goose's own session locker is therefore not used.
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	fsys, err := fs.Sub(db.Migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	unlock, err := lockMigrations(ctx, pool.Config().ConnConfig, log)
	if err != nil {
		return err
	}
	err = withPoolerHint(pool.Config().ConnConfig, migrate(ctx, pool, fsys, log))
	if uerr := unlock(context.WithoutCancel(ctx)); uerr != nil && err == nil {
		// The lock's transaction ended before the migrations did (its
		// connection was cut): another replica may have migrated beside
		// this one. Each migration is a transaction of its own and goose
		// records it, so at worst that replica failed; say so rather than
		// start as if nothing happened.
		return fmt.Errorf("migration lock lost while migrating: %w", uerr)
	}
	return err
}

func migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, log *slog.Logger) error {
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migration provider: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	for _, r := range results {
		log.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration_ms", r.Duration.Milliseconds())
	}
	return nil
}

// withPoolerHint adds to err what to do when it is pgx's statement cache
// meeting a pooler in transaction mode: a statement pgx prepared on one
// server connection missing on the next (26000), or another client's
// copy of it already there (42P05). Every binary migrates at start, so
// that is where the missing setting shows first.
func withPoolerHint(cfg *pgx.ConnConfig, err error) error {
	var pgErr *pgconn.PgError
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || !errors.As(err, &pgErr) ||
		(pgErr.Code != "26000" && pgErr.Code != "42P05") || !strings.Contains(pgErr.Message, "stmtcache_") {
		return err
	}
	return fmt.Errorf("%w (behind a pooler in transaction mode, such as PgBouncer, add default_query_exec_mode=cache_describe to DATABASE_URL: see docs/deploy.md)", err)
}

// migrationLockID is goose's lock.DefaultLockID, the key its session
// locker used before: a session lock and a transaction lock on one key
// exclude each other, so during a rolling upgrade a binary of the previous
// release and one of this release do not migrate at once.
const migrationLockID = lock.DefaultLockID

// Replicas that find the lock taken try again every migrationLockRetry,
// for up to migrationLockWait (goose's session locker waited 5 minutes
// too), then give up with an error: a migration stuck that long needs an
// operator, and a binary that stops says so.
const (
	migrationLockRetry = 500 * time.Millisecond
	migrationLockWait  = 5 * time.Minute
)

// lockMigrations takes the migration lock in a transaction on a new
// connection, made with the pool's settings, and returns the function
// that ends the transaction and the connection. The connection is not the
// pool's, so a pool of one connection still has it for the migrations.
//
// A replica that finds the lock taken ends its transaction before it
// tries again: between tries it holds no server connection of a pooler,
// so replicas waiting in numbers cannot starve the one that migrates.
// Behind a pooler, migrating therefore needs two server connections: the
// lock's and the migrations'.
func lockMigrations(ctx context.Context, cfg *pgx.ConnConfig, log *slog.Logger) (func(context.Context) error, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect for the migration lock: %w", err)
	}
	fail := func(err error) (func(context.Context) error, error) {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	giveUp := time.Now().Add(migrationLockWait)
	for waited := false; ; waited = true {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return fail(fmt.Errorf("begin the migration lock's transaction: %w", err))
		}
		// With PostgreSQL's idle_in_transaction_session_timeout set, the
		// transaction, and the lock with it, would end while it waits for
		// the migrations; set_config(..., true) lasts as long as it does.
		// No prepared statement: the lock is taken before anything else,
		// whatever default_query_exec_mode the URL sets.
		var locked bool
		err = tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1) FROM set_config('idle_in_transaction_session_timeout', '0', true)",
			pgx.QueryExecModeExec, migrationLockID).Scan(&locked)
		if err == nil && locked {
			if waited {
				log.Info("migration lock taken")
			}
			return func(ctx context.Context) error {
				defer conn.Close(ctx)
				return tx.Rollback(ctx) // it wrote nothing
			}, nil
		}
		_ = tx.Rollback(ctx)
		if err != nil {
			return fail(fmt.Errorf("take the migration lock: %w", err))
		}
		if !waited {
			log.Info("waiting for the migration lock", "lock_id", migrationLockID)
		}
		if time.Now().After(giveUp) {
			return fail(fmt.Errorf("the migration lock (advisory lock %d) has been held by another process for %v", migrationLockID, migrationLockWait))
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("wait for the migration lock: %w", ctx.Err()))
		case <-time.After(migrationLockRetry):
		}
	}
}
