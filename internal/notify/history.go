package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/sqlc-dev/pqtype"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
)

// Event is one entry of a delivery's history: a transition or a decision,
// recorded in the same transaction as the change it describes.
type Event struct {
	At         time.Time       `json:"at"`
	Event      string          `json:"event"`
	FromStatus string          `json:"from_status,omitempty"`
	ToStatus   string          `json:"to_status,omitempty"`
	Attempt    int             `json:"attempt"`
	Actor      string          `json:"actor"`
	Detail     json.RawMessage `json:"detail,omitempty"`
}

// History returns the events of one delivery, oldest first.
func History(ctx context.Context, db DB, deliveryID uuid.UUID) ([]Event, error) {
	rows, err := dbsqlc.New(db).ListEvents(ctx, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("history of delivery %s: %w", deliveryID, err)
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = Event{At: r.At, Event: r.Event, Attempt: int(r.Attempt), Actor: r.Actor, FromStatus: orEmpty(r.FromStatus), ToStatus: orEmpty(r.ToStatus)}
		if r.Detail.Valid {
			out[i].Detail = r.Detail.RawMessage
		}
	}
	return out, nil
}

// RecordEvent writes an event that changes nothing, such as a suppressed
// duplicate or an operator's block holding d back, into d's history, at
// d's status and attempt.
func RecordEvent(ctx context.Context, db DB, d Delivery, event, actor string, detail any) error {
	return recordEvent(ctx, dbsqlc.New(db), dbsqlc.NotificationDelivery{ID: d.ID, Status: string(d.Status), Attempts: int32(d.Attempts)}, event, actor, detail)
}

// recordEvent is RecordEvent for a generated row.
func recordEvent(ctx context.Context, q *dbsqlc.Queries, row dbsqlc.NotificationDelivery, event, actor string, detail any) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("record %s event: %w", event, err)
	}
	return q.RecordEvent(ctx, dbsqlc.RecordEventParams{
		DeliveryID: row.ID, Event: event, Status: row.Status, Attempt: row.Attempts, Actor: actor,
		Detail: pqtype.NullRawMessage{RawMessage: b, Valid: true},
	})
}
