package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Batcher is what GenericPlans runs on: a pool, a connection or a
// transaction.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// GenericPlans runs each statement on PostgreSQL's generic plan, for a
// statement whose rows come in arrays (unnest): PostgreSQL estimates ten
// rows for an array it cannot see, prices that generic plan above the
// custom plan of one row, and so plans such a statement anew at every
// execution. Planning costs about as much as the statement (measured in
// internal/notify's BenchmarkHandover, batch-1). The generic plan of a
// statement keyed by primary key is the same index scan for one row or
// sixty-four.
//
// The setting is transaction-local and sent in the same round trip,
// before the statement in the same implicit transaction: PostgreSQL reads
// it when it binds the statement. Through PgBouncer, where pgx keeps no
// prepared statements, there is no cached plan to choose and the setting
// changes nothing; it never outlives the transaction, so it cannot leak to
// another client of a pooled server connection.
type GenericPlans struct{ DB Batcher }

const forceGenericPlan = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"

// send runs the setting and then sql, and returns the results positioned
// at sql's.
func (g GenericPlans) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(forceGenericPlan)
	b.Queue(sql, args...)
	br := g.DB.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	return br, nil
}

// Exec runs sql on its generic plan.
func (g GenericPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := g.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs sql on its generic plan; closing the rows ends the batch.
func (g GenericPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := g.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow runs sql on its generic plan and scans its first row.
func (g GenericPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := g.Query(ctx, sql, args...)
	return firstRow{rows: rows, err: err}
}

// batchRows are the rows of a batch's last statement; closing them
// closes the batch, which reports the error of its end if the rows had
// none.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Close() {
	if r.br == nil {
		return
	}
	r.Rows.Close()
	r.err = r.br.Close()
	r.br = nil
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow is pgx.Row over rows: the first row, or pgx.ErrNoRows.
type firstRow struct {
	rows pgx.Rows
	err  error
}

func (r firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		r.rows.Close()
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
