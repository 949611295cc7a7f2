package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// Action is one thing an operator did, as operator_actions records it:
// written in the transaction of the change (right after it, for what
// lives in Redis), by the operator service here and by apikey and
// webhookout for theirs.
type Action struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`            // as the history names people: operator:<key name> (<prefix>), admin:<request id>, cli:<user>@<host>
	Action string    `json:"action"`           // queue.pause, delivery.retry, block.add, ...
	Target string    `json:"target,omitempty"` // delivery:<id>, recipient:<address>, block:<id>, queue:<name>, ...
	// Detail is the rest: the note, the values set.
	Detail json.RawMessage `json:"detail"`
}

// Actions returns the operators' latest actions, newest first, at most
// limit; with before > 0, those older than the action of that id (the
// next page).
func (o *Operator) Actions(ctx context.Context, before int64, limit int) ([]Action, error) {
	p := dbsqlc.ListOperatorActionsParams{MaxRows: int32(limit)}
	if before > 0 {
		p.Before = &before
	}
	rows, err := dbsqlc.New(o.db).ListOperatorActions(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list operator actions: %w", err)
	}
	out := make([]Action, len(rows))
	for i, r := range rows {
		out[i] = Action{ID: r.ID, At: r.At, Actor: r.Actor, Action: r.Action, Target: r.Target, Detail: r.Detail}
	}
	return out, nil
}

// recordAction writes what actor did into operator_actions, on q (the
// transaction of the change). Text in detail (a note) is stored as
// textrule.Clip keeps it: what a person typed must not fail the record.
func recordAction(ctx context.Context, q *dbsqlc.Queries, actor, action, target string, detail map[string]any) error {
	for k, v := range detail {
		if s, ok := v.(string); ok {
			detail[k] = textrule.Clip(s, 2000)
		}
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("record %s: %w", action, err)
	}
	if err := q.RecordOperatorAction(ctx, dbsqlc.RecordOperatorActionParams{
		Actor: textrule.Clip(actor, 500), Action: action, Target: textrule.Clip(target, 500), Detail: b,
	}); err != nil {
		return fmt.Errorf("record %s by %s: %w", action, actor, err)
	}
	return nil
}

// inTx runs fn in one transaction of the operator's database: a change
// and the record of who made it commit together, or neither does.
func (o *Operator) inTx(ctx context.Context, fn func(tx pgx.Tx, q *dbsqlc.Queries) error) error {
	return pgx.BeginFunc(ctx, o.db, func(tx pgx.Tx) error { return fn(tx, dbsqlc.New(tx)) })
}
