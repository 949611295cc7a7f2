package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
)

// What the reconciler reads to find what crashes and lost Redis data left
// behind, and retention. Its decisions go through transitions.go.

// CountStaleSending counts sending deliveries whose lease has expired.
func CountStaleSending(ctx context.Context, db DB) (int, error) {
	n, err := dbsqlc.New(db).CountStaleSending(ctx)
	if err != nil {
		return 0, fmt.Errorf("count stale sending deliveries: %w", err)
	}
	return int(n), nil
}

// CountHeld counts deliveries held for an operator.
func CountHeld(ctx context.Context, db DB) (int, error) {
	n, err := dbsqlc.New(db).CountHeld(ctx)
	if err != nil {
		return 0, fmt.Errorf("count held deliveries: %w", err)
	}
	return int(n), nil
}

// PickStaleSending locks, in the caller's transaction, one sending
// delivery whose lease has expired and that no other reconciler holds,
// leaving out skip; found is false when there is none.
func PickStaleSending(ctx context.Context, tx pgx.Tx, skip []uuid.UUID) (d Delivery, found bool, err error) {
	// Never nil: pgx sends a nil slice as NULL, and "id = ANY(NULL)" would skip every row.
	row, err := dbsqlc.New(tx).PickStaleSending(ctx, append([]uuid.UUID{}, skip...))
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, false, nil
	}
	if err != nil {
		return Delivery{}, false, fmt.Errorf("pick stale sending delivery: %w", err)
	}
	return fromRow(row), true, nil
}

// PickOrphanedPending locks, in the caller's transaction, up to batch
// pending deliveries untouched for olderThan that no block holds back,
// and touches them, so that the next pass (or another reconciler) looks
// at others first.
func PickOrphanedPending(ctx context.Context, tx pgx.Tx, olderThan time.Duration, batch int) ([]Delivery, error) {
	q := dbsqlc.New(tx)
	rows, err := q.PickOrphanedPending(ctx, dbsqlc.PickOrphanedPendingParams{OlderThanSeconds: olderThan.Seconds(), Batch: int32(batch)})
	if err != nil {
		return nil, fmt.Errorf("pick pending deliveries: %w", err)
	}
	out := make([]Delivery, len(rows))
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		out[i], ids[i] = fromRow(r), r.ID
	}
	if err := q.TouchPending(ctx, ids); err != nil {
		return nil, fmt.Errorf("touch pending deliveries: %w", err)
	}
	return out, nil
}

// Retire deletes, a batch at a time, finished deliveries (sent or
// failed) untouched for retention and whose tries began more than maxAge
// ago, with their history. Each leaves a tombstone that keeps its
// idempotency key refused for ever, committed before the delete, so a
// concurrent Record sees either the row or its tombstone. db must not be
// a transaction: the two steps commit apart.
func Retire(ctx context.Context, db *pgxpool.Pool, retention, maxAge time.Duration, batch int) (int, error) {
	q := dbsqlc.New(db)
	ids, err := q.RetireOldDeliveries(ctx, dbsqlc.RetireOldDeliveriesParams{
		OlderThanSeconds: retention.Seconds(), MaxAgeSeconds: maxAge.Seconds(), Batch: int32(batch),
	})
	if err != nil {
		return 0, fmt.Errorf("retire old deliveries: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	var deleted []uuid.UUID
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		q := q.WithTx(tx)
		var err error
		deleted, err = q.DeleteRetiredDeliveries(ctx, dbsqlc.DeleteRetiredDeliveriesParams{
			Ids: ids, OlderThanSeconds: retention.Seconds(), MaxAgeSeconds: maxAge.Seconds(),
		})
		if err != nil {
			return err
		}
		return q.UnretireKept(ctx, dbsqlc.UnretireKeptParams{Ids: ids, Deleted: deleted})
	})
	if err != nil {
		return 0, fmt.Errorf("delete retired deliveries: %w", err)
	}
	return len(deleted), nil
}
