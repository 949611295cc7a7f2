package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
)

// ErrWrongState is returned when an operator action does not apply to a
// delivery in its current status (retrying a sent one, say).
var ErrWrongState = errors.New("notify: the delivery is not in a state this action applies to")

// ErrBlockNotFound is returned when no block has the given id.
var ErrBlockNotFound = errors.New("notify: block not found")

// Filter selects deliveries for operators; zero fields match everything.
type Filter struct {
	Status    Status
	Template  string
	OrderID   uuid.UUID
	Key       string
	OlderThan time.Duration // not updated for at least this long
	Limit     int
}

// List returns the deliveries that match f, least recently updated first.
func List(ctx context.Context, db dbsqlc.DBTX, f Filter) ([]Delivery, error) {
	p := dbsqlc.ListDeliveriesParams{MaxRows: int32(f.Limit)}
	if f.Status != "" {
		s := string(f.Status)
		p.Status = &s
	}
	if f.Template != "" {
		p.Template = &f.Template
	}
	if f.OrderID != uuid.Nil {
		p.OrderID = &f.OrderID
	}
	if f.Key != "" {
		p.IdempotencyKey = &f.Key
	}
	if f.OlderThan > 0 {
		s := f.OlderThan.Seconds()
		p.OlderThanSeconds = &s
	}
	rows, err := dbsqlc.New(db).ListDeliveries(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out := make([]Delivery, len(rows))
	for i, r := range rows {
		out[i] = FromRow(r)
	}
	return out, nil
}

// OperatorRetry gives a failed or held delivery a fresh set of attempts,
// under the same idempotency key: it can never become a second e-mail
// once the first was sent. The caller enqueues it (EnsureQueued).
func OperatorRetry(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID, actor, note string) (Delivery, error) {
	row, err := dbsqlc.New(db).OperatorRetry(ctx, dbsqlc.OperatorRetryParams{ID: id, Actor: actor, Note: note})
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, stateError(ctx, db, id)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("retry delivery %s: %w", id, err)
	}
	return FromRow(dbsqlc.NotificationDelivery(row)), nil
}

// OperatorMarkSent records that a held delivery was in fact accepted, as
// the operator found at the provider.
func OperatorMarkSent(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID, providerMessageID, actor, note string) (Delivery, error) {
	row, err := dbsqlc.New(db).OperatorMarkSent(ctx, dbsqlc.OperatorMarkSentParams{
		ID: id, ProviderMessageID: providerMessageID, Actor: actor, Note: note,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, stateError(ctx, db, id)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("mark delivery %s sent: %w", id, err)
	}
	return FromRow(dbsqlc.NotificationDelivery(row)), nil
}

// stateError tells a missing delivery from one in the wrong state.
func stateError(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID) error {
	d, err := Get(ctx, db, id)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: it is %s", ErrWrongState, d.Status)
}

// Block is an operator's temporary filter on a key or a recipient.
type Block struct {
	ID        int64     `json:"id"`
	Kind      string    `json:"kind"` // "key" or "recipient"
	Value     string    `json:"value"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// AddBlock holds back deliveries to an idempotency key or a recipient for
// ttl: they stay pending and go out after the block expires.
func AddBlock(ctx context.Context, db dbsqlc.DBTX, kind, value, reason string, ttl time.Duration) (Block, error) {
	if kind == "recipient" {
		v, err := NormalizeAddress(value)
		if err != nil {
			return Block{}, err
		}
		value = v
	}
	r, err := dbsqlc.New(db).InsertBlock(ctx, dbsqlc.InsertBlockParams{Kind: kind, Value: value, Reason: reason, TtlSeconds: ttl.Seconds()})
	if err != nil {
		return Block{}, fmt.Errorf("add block: %w", err)
	}
	return blockFromRow(r), nil
}

// ActiveBlocks lists the blocks in force.
func ActiveBlocks(ctx context.Context, db dbsqlc.DBTX) ([]Block, error) {
	rows, err := dbsqlc.New(db).ListActiveBlocks(ctx)
	if err != nil {
		return nil, fmt.Errorf("list blocks: %w", err)
	}
	out := make([]Block, len(rows))
	for i, r := range rows {
		out[i] = blockFromRow(r)
	}
	return out, nil
}

// RemoveBlock lifts a block early.
func RemoveBlock(ctx context.Context, db dbsqlc.DBTX, id int64) error {
	n, err := dbsqlc.New(db).DeleteBlock(ctx, id)
	if err != nil {
		return fmt.Errorf("remove block %d: %w", id, err)
	}
	if n == 0 {
		return ErrBlockNotFound
	}
	return nil
}

func blockFromRow(r dbsqlc.DeliveryBlock) Block {
	return Block{ID: r.ID, Kind: r.Kind, Value: r.Value, Reason: r.Reason, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
}
