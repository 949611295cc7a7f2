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

// StaleSending lists, oldest expiry first, up to batch sending
// deliveries whose lease has expired: the ones a reconciliation pass
// looks at. It locks nothing; each is read again (GetStaleSending) when
// its turn comes.
func StaleSending(ctx context.Context, db DB, batch int) ([]uuid.UUID, error) {
	ids, err := dbsqlc.New(db).ListStaleSending(ctx, int32(batch))
	if err != nil {
		return nil, fmt.Errorf("list stale sending deliveries: %w", err)
	}
	return ids, nil
}

// HeldBack is a pending delivery that may have been sent and is held
// back from another attempt, and why (Verdict: too_old, suppressed or
// unsubscribed).
type HeldBack struct {
	Delivery Delivery
	Reason   Verdict
}

// HeldBackUnsettled lists, oldest change first, up to batch pending
// deliveries that may have been sent and that the claim would hold back
// (older than maxAge, the recipient suppressed, or unsubscribed from one
// of the subscription templates): the worker leaves them, and only the
// provider's answer settles them. A plain read; the reconciler's write
// is fenced on it.
func HeldBackUnsettled(ctx context.Context, db DB, maxAge time.Duration, subscriptions []string, batch int) ([]HeldBack, error) {
	rows, err := dbsqlc.New(db).ListHeldBackUnsettled(ctx, dbsqlc.ListHeldBackUnsettledParams{
		MaxAgeSeconds: maxAge.Seconds(), SubscriptionTemplates: subscriptions, Batch: int32(batch),
	})
	if err != nil {
		return nil, fmt.Errorf("list held-back deliveries that may have been sent: %w", err)
	}
	return mapRows(rows, func(r dbsqlc.ListHeldBackUnsettledRow) HeldBack {
		return HeldBack{Delivery: fromRow(r.NotificationDelivery), Reason: Verdict(r.HeldBack)}
	}), nil
}

// GetStaleSending reads delivery id as it stands, if it is still sending
// with an expired lease; found is false when it is not (settled since,
// or taken by a worker again). The reconciler decides on this read, and
// its write (ReconcileToPending, ReconcileToSent, ReconcileToHeld) is
// fenced on it.
func GetStaleSending(ctx context.Context, db DB, id uuid.UUID) (d Delivery, found bool, err error) {
	row, err := dbsqlc.New(db).GetStaleSending(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, false, nil
	}
	if err != nil {
		return Delivery{}, false, fmt.Errorf("read stale sending delivery %s: %w", id, err)
	}
	return fromRow(row), true, nil
}

// PickOrphanedPending takes up to batch pending deliveries untouched for
// olderThan that no block holds back, and touches them, in one statement,
// so that the next pass (or another reconciler) looks at others first.
// Nothing stays locked once it returns.
func PickOrphanedPending(ctx context.Context, db DB, olderThan time.Duration, batch int) ([]Delivery, error) {
	rows, err := dbsqlc.New(db).PickOrphanedPending(ctx, dbsqlc.PickOrphanedPendingParams{OlderThanSeconds: olderThan.Seconds(), Batch: int32(batch)})
	if err != nil {
		return nil, fmt.Errorf("pick pending deliveries: %w", err)
	}
	return mapRows(rows, fromRow), nil
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
	if _, err := q.DeleteOldBatches(ctx, dbsqlc.DeleteOldBatchesParams{OlderThanSeconds: (retention + maxAge).Seconds(), Batch: int32(batch)}); err != nil {
		return 0, fmt.Errorf("delete old batches: %w", err)
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
