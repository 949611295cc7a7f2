package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
)

// ErrWrongState is returned when an operator action does not apply to a
// delivery in its current status (retrying a sent one, say).
var ErrWrongState = errors.New("notify: the delivery is not in a state this action applies to")

// ErrMayHaveBeenSent is the ErrWrongState of a cancel whose delivery a
// provider may hold: an attempt was handed over and its outcome is not
// known, so "cancelled", which says nothing was sent, would not be true.
var ErrMayHaveBeenSent = fmt.Errorf("%w: a provider may already have the e-mail", ErrWrongState)

// ErrPinnedUnreachable: a retry would keep a delivery pinned to a
// provider that no live worker sends through, where it could neither go
// out nor move (Operator.Retry).
var ErrPinnedUnreachable = errors.New("notify: the delivery is pinned to a provider no live worker sends through")

// ErrBlockNotFound is returned when no block has the given id.
var ErrBlockNotFound = errors.New("notify: block not found")

// ErrNotRecorded: an action on Redis (pausing the queue, the workers'
// concurrency) was done, but its record in operator_actions could not be
// written after it.
var ErrNotRecorded = errors.New("notify: done, but not recorded in the operators' actions")

// Operator is what the people on call can do (docs/runbook.md): read
// deliveries and their history, retry and mark sent, pause and resume
// sending, lower the workers' concurrency, and hold deliveries back with
// blocks. The admin API only decodes requests, calls it and encodes.
// Every action that changes something is recorded in operator_actions
// under its actor (Actions lists them).
type Operator struct {
	db        *pgxpool.Pool
	enqueuer  Requeuer
	inspector *asynq.Inspector
	rdb       redis.UniversalClient
}

// Requeuer is what the operator needs of the enqueuer (queue.Enqueuer):
// its queue's name, and a task for a delivery put back to pending unless
// one stands that has yet to read it (deadAttempt: a running one may have
// read it before).
type Requeuer interface {
	Queue() string
	EnsureQueued(ctx context.Context, ins *asynq.Inspector, d Delivery, deadAttempt bool) (created bool, err error)
}

// NewOperator returns the operator service over the primary, the queue
// (enqueuer and inspector of the same Redis) and Redis itself.
func NewOperator(db *pgxpool.Pool, enq Requeuer, ins *asynq.Inspector, rdb redis.UniversalClient) *Operator {
	return &Operator{db: db, enqueuer: enq, inspector: ins, rdb: rdb}
}

// Filter selects deliveries for operators; zero fields match everything.
type Filter struct {
	Status    Status
	Template  string
	OrderID   *uuid.UUID // nil: any order
	Key       string
	Recipient string        // the address as stored (NormalizeAddress)
	OlderThan time.Duration // not updated for at least this long
	// Created in [CreatedAfter, CreatedBefore); a zero time is no bound.
	CreatedAfter, CreatedBefore time.Time
	Newest                      bool // most recently updated first; else least
	Offset                      int  // skip this many, for the next page
	Limit                       int

	// BouncedOrComplained: only those a provider reported a bounce or
	// a complaint of.
	BouncedOrComplained bool
	// Test: nil, live and test alike; else a test key's alone (true) or
	// live ones alone (false).
	Test *bool
}

// describe is what f selects, its set fields only: the record of a bulk
// retry keeps it.
func (f Filter) describe() map[string]any {
	m := map[string]any{"status": f.Status}
	for k, v := range map[string]string{"template": f.Template, "key": f.Key, "recipient": f.Recipient} {
		if v != "" {
			m[k] = v
		}
	}
	if f.OrderID != nil {
		m["order_id"] = f.OrderID.String()
	}
	if f.OlderThan > 0 {
		m["older_than"] = f.OlderThan.String()
	}
	if !f.CreatedAfter.IsZero() {
		m["created_after"] = f.CreatedAfter
	}
	if !f.CreatedBefore.IsZero() {
		m["created_before"] = f.CreatedBefore
	}
	if f.Test != nil {
		m["test"] = *f.Test
	}
	if f.BouncedOrComplained {
		m["bounced_or_complained"] = true
	}
	return m
}

// List returns the deliveries that match f, least recently updated first
// (most recently with f.Newest).
func (o *Operator) List(ctx context.Context, f Filter) ([]Delivery, error) {
	p := dbsqlc.ListDeliveriesParams{MaxRows: int32(f.Limit), OrderID: f.OrderID, Newest: f.Newest, Skip: int32(f.Offset),
		BouncedOrComplained: f.BouncedOrComplained, Test: f.Test}
	if f.Status != "" {
		s := string(f.Status)
		p.Status = &s
	}
	if f.Template != "" {
		p.Template = &f.Template
	}
	if f.Key != "" {
		p.IdempotencyKey = &f.Key
	}
	if f.Recipient != "" {
		p.Recipient = &f.Recipient
	}
	if !f.CreatedAfter.IsZero() {
		p.CreatedAfter = &f.CreatedAfter
	}
	if !f.CreatedBefore.IsZero() {
		p.CreatedBefore = &f.CreatedBefore
	}
	if f.OlderThan > 0 {
		s := f.OlderThan.Seconds()
		p.OlderThanSeconds = &s
	}
	rows, err := dbsqlc.New(customPlans{o.db}).ListDeliveries(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return mapRows(rows, fromRow), nil
}

// customPlans plans each query for its own arguments. A search whose
// filters are optional (@x IS NULL OR column = @x) has a cheap plan for
// each set of them (the status index for held ones, the bounced index
// for bounces), but one generic plan for all, a scan of the table, and
// PostgreSQL keeps to that for a prepared statement once five plans of
// unfiltered searches, scans too, cost no less. Sent without a prepared
// statement (pgx.QueryExecModeExec), the query is planned with its
// values each time: a fraction of a millisecond, for an operator's search.
type customPlans struct{ DB }

func (c customPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return c.DB.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

// CountUpTo counts the deliveries in status, but no further than upTo:
// upTo means upTo or more. It costs at most upTo entries of the status
// index, however many deliveries there are.
func (o *Operator) CountUpTo(ctx context.Context, status Status, upTo int) (int, error) {
	n, err := dbsqlc.New(o.db).CountDeliveriesUpTo(ctx, dbsqlc.CountDeliveriesUpToParams{Status: string(status), UpTo: int32(upTo)})
	if err != nil {
		return 0, fmt.Errorf("count %s deliveries: %w", status, err)
	}
	return int(n), nil
}

// Get returns one delivery, with its order's number, and its whole
// history.
func (o *Operator) Get(ctx context.Context, id uuid.UUID) (Delivery, []Event, error) {
	d, err := Get(ctx, o.db, id)
	if err != nil {
		return Delivery{}, nil, err
	}
	ref, err := dbsqlc.New(o.db).GetOrderReference(ctx, d.OrderID)
	switch {
	case err == nil && ref != nil:
		d.OrderReference = *ref
	case err != nil && !errors.Is(err, pgx.ErrNoRows): // no row: a test order retention deleted
		return Delivery{}, nil, fmt.Errorf("read the number of order %s: %w", d.OrderID, err)
	}
	events, err := History(ctx, o.db, id)
	if err != nil {
		return Delivery{}, nil, err
	}
	return d, events, nil
}

// Retry gives a failed or held delivery a fresh series of tries under the
// same idempotency key (it can never become a second e-mail once the
// first was sent) and queues it. queued is false when the enqueue failed:
// the row is pending, and the reconciler queues it later; enqueueErr says why.
//
// A delivery pinned to a provider (its outcome there unknown) stays
// pinned, unless unpin: the operator found that provider does not hold
// the message, so failover may send it through another.
//
// A retry that keeps a pin to a provider that none of the live workers
// sends through is refused (ErrPinnedUnreachable): it would wait,
// unsendable, until DELIVERY_MAX_AGE.
func (o *Operator) Retry(ctx context.Context, id uuid.UUID, actor, note string, unpin bool) (d Delivery, queued bool, enqueueErr error, err error) {
	return o.retry(ctx, id, actor, note, unpin, true)
}

// retry is Retry; with record, it records the retry in the operators'
// actions in its own transaction (a bulk retry records itself once).
func (o *Operator) retry(ctx context.Context, id uuid.UUID, actor, note string, unpin, record bool) (d Delivery, queued bool, enqueueErr error, err error) {
	if !unpin {
		if err := o.checkPinReachable(ctx, id); err != nil {
			return Delivery{}, false, nil, err
		}
	}
	err = o.inTx(ctx, func(tx pgx.Tx, q *dbsqlc.Queries) error {
		var err error
		if d, err = operatorRetry(ctx, tx, id, actor, note, unpin); err != nil || !record {
			return err
		}
		return recordAction(ctx, q, actor, "delivery.retry", "delivery:"+id.String(), map[string]any{"note": note, "unpin": unpin})
	})
	if err != nil {
		return Delivery{}, false, nil, err
	}
	// A task running now may have read the row before this retry (held,
	// failed) and will end without sending it: the retry queues another
	// beside it, as for a dead attempt, and the claim fences whichever of
	// the two runs second.
	queued, enqueueErr = o.enqueuer.EnsureQueued(ctx, o.inspector, d, true)
	return d, queued, enqueueErr, nil
}

// checkPinReachable refuses a delivery pinned to a provider that live
// workers report on, none of them sending through it. With no live
// worker to ask (all restarting, say), it lets the retry through.
func (o *Operator) checkPinReachable(ctx context.Context, id uuid.UUID) error {
	row, err := dbsqlc.New(o.db).GetDelivery(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // the retry says there is no such delivery
	}
	if err != nil {
		return fmt.Errorf("retry delivery %s: %w", id, err)
	}
	if !row.ProviderPinned || row.Provider == nil {
		return nil
	}
	states, err := ProviderStates(ctx, o.rdb, o.enqueuer.Queue())
	if err != nil {
		return fmt.Errorf("retry delivery %s: %w", id, err)
	}
	if len(states) == 0 {
		return nil
	}
	if slices.ContainsFunc(states, func(s ProviderState) bool { return s.Provider == *row.Provider }) {
		return nil
	}
	return fmt.Errorf("%w (%q is not in their PROVIDERS): check that provider's log, then mark it sent or retry with unpin",
		ErrPinnedUnreachable, *row.Provider)
}

// Cancel calls off a pending delivery by an operator's decision, with a
// note for the record (Cancel); notAtProvider, the operator checked the
// log of the provider it is pinned to and it does not hold the message,
// cancels one that may have been sent (ErrMayHaveBeenSent otherwise).
// The cancel and its record in the operators' actions commit together.
func (o *Operator) Cancel(ctx context.Context, id uuid.UUID, actor, note string, notAtProvider bool) (d Delivery, err error) {
	err = o.inTx(ctx, func(tx pgx.Tx, q *dbsqlc.Queries) error {
		if d, err = Cancel(ctx, tx, id, Canceller{Actor: actor, Operator: true, NotAtProvider: notAtProvider}, note); err != nil {
			return err
		}
		detail := map[string]any{"note": note}
		if notAtProvider {
			detail["not_at_provider"] = true
		}
		return recordAction(ctx, q, actor, "delivery.cancel", "delivery:"+id.String(), detail)
	})
	if errors.Is(err, ErrWrongState) {
		return d, err // with the delivery, as Cancel says where it stands (ErrMayHaveBeenSent too)
	}
	if err != nil {
		return Delivery{}, err
	}
	return d, nil
}

// Unsubscribe records that recipient left category (a one-click
// unsubscribe): the subscription templates' live deliveries to the address
// are suppressed from now on; transactional ones still go out. added is
// false when it had left already.
func (o *Operator) Unsubscribe(ctx context.Context, recipient, category string) (added bool, err error) {
	recipient, err = mail.NormalizeAddress(recipient)
	if err != nil {
		return false, err
	}
	n, err := dbsqlc.New(o.db).AddUnsubscribe(ctx, dbsqlc.AddUnsubscribeParams{Recipient: recipient, Category: category})
	if err != nil {
		return false, fmt.Errorf("unsubscribe %s from %s: %w", mail.KeyHash(recipient), category, err)
	}
	return n == 1, nil
}

// MaxBulkRetry bounds the deliveries one bulk retry takes; a larger set
// is retried in several.
const MaxBulkRetry = 1000

// RetryMatching retries, as Retry does, every delivery that f selects, at
// most MaxBulkRetry, under actor with note; f.Status must be failed or
// held, the statuses a retry applies to (ErrWrongState otherwise). With
// dryRun it only counts them. A delivery that something else moved since
// it was listed is skipped. It returns how many it retried (or would),
// and how many of those it could not queue now: they are pending, and the
// reconciler queues them. Each delivery's history has its retry; the
// operators' actions have the bulk retry once, with the search and how
// many it retried, also when it stopped part-way.
func (o *Operator) RetryMatching(ctx context.Context, f Filter, actor, note string, dryRun bool) (n, unqueued int, err error) {
	if f.Status != StatusFailed && f.Status != StatusHeld {
		return 0, 0, fmt.Errorf("%w: a bulk retry selects failed or held deliveries", ErrWrongState)
	}
	f.Offset, f.Limit = 0, MaxBulkRetry
	ds, err := o.List(ctx, f)
	if err != nil || dryRun {
		return len(ds), 0, err
	}
	for _, d := range ds {
		var queued bool
		_, queued, _, err = o.retry(ctx, d.ID, actor, note, false, false) // pins kept: nobody checked each one
		if errors.Is(err, ErrWrongState) {
			err = nil
			continue
		}
		if err != nil {
			break
		}
		n++
		if !queued {
			unqueued++
		}
	}
	detail := map[string]any{"note": note, "search": f.describe(), "retried": n, "unqueued": unqueued}
	if err != nil {
		detail["stopped"] = err.Error()
	}
	if rerr := recordAction(ctx, dbsqlc.New(o.db), actor, "delivery.bulk_retry", "", detail); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return n, unqueued, err
}

// MarkSent records that a held delivery was in fact accepted, as the
// operator found at the provider.
func (o *Operator) MarkSent(ctx context.Context, id uuid.UUID, providerMessageID, actor, note string) (d Delivery, err error) {
	err = o.inTx(ctx, func(tx pgx.Tx, q *dbsqlc.Queries) error {
		if d, err = operatorMarkSent(ctx, tx, id, providerMessageID, actor, note); err != nil {
			return err
		}
		return recordAction(ctx, q, actor, "delivery.mark_sent", "delivery:"+id.String(),
			map[string]any{"note": note, "provider_message_id": providerMessageID})
	})
	if err != nil {
		return Delivery{}, err
	}
	return d, nil
}

// Pause stops all sending, by actor with note: workers take no tasks;
// recorded deliveries wait, nothing is lost. Pausing a paused queue is
// not an error (its record says unchanged).
func (o *Operator) Pause(ctx context.Context, actor, note string) error {
	return o.setPaused(ctx, actor, note, Queues(o.enqueuer.Queue()), true)
}

// PauseLater stops the later lane alone (LaterQueue: subscription mail,
// deliveries scheduled for later), by actor with note: the queue itself,
// the confirmations, goes on and has the providers' whole pace, with no
// task of the later lane taking a token before it. The later lane's
// deliveries wait, nothing is lost.
func (o *Operator) PauseLater(ctx context.Context, actor, note string) error {
	return o.setPaused(ctx, actor, note, []string{LaterQueue(o.enqueuer.Queue())}, true)
}

// setPaused pauses queues (paused) or resumes them, recording the action
// on the first of them.
func (o *Operator) setPaused(ctx context.Context, actor, note string, queues []string, paused bool) error {
	verb, change, already := "resume", o.inspector.UnpauseQueue, "not paused"
	if paused {
		verb, change, already = "pause", o.inspector.PauseQueue, "already paused"
	}
	unchanged := true
	for _, q := range queues {
		err := change(q)
		// asynq says "already paused" or "not paused" only in words; it
		// exports no sentinel.
		was := err != nil && strings.Contains(err.Error(), already)
		if err != nil && !was {
			return fmt.Errorf("%s queue %s: %w", verb, q, err)
		}
		unchanged = unchanged && was
	}
	return o.recordOn(ctx, actor, "queue."+verb, queues[0], map[string]any{"note": note, "unchanged": unchanged})
}

// Resume restarts sending, by actor with note: the queue and its later
// lane. Resuming a running queue is not an error.
func (o *Operator) Resume(ctx context.Context, actor, note string) error {
	return o.setPaused(ctx, actor, note, Queues(o.enqueuer.Queue()), false)
}

// ResumeLater restarts the later lane alone, by actor with note; a queue
// paused as a whole stays paused.
func (o *Operator) ResumeLater(ctx context.Context, actor, note string) error {
	return o.setPaused(ctx, actor, note, []string{LaterQueue(o.enqueuer.Queue())}, false)
}

// recordAfter records an action on the queue, which lives in Redis: after
// it, since no transaction spans both. A record that fails says so
// (ErrNotRecorded): the action stands.
func (o *Operator) recordAfter(ctx context.Context, actor, action string, detail map[string]any) error {
	return o.recordOn(ctx, actor, action, o.enqueuer.Queue(), detail)
}

// recordOn is recordAfter for an action on queue, the queue itself or
// its later lane ("queue:<name>").
func (o *Operator) recordOn(ctx context.Context, actor, action, queue string, detail map[string]any) error {
	if err := recordAction(ctx, dbsqlc.New(o.db), actor, action, "queue:"+queue, detail); err != nil {
		return fmt.Errorf("%w: %w", ErrNotRecorded, err)
	}
	return nil
}

// QueueState is the delivery queue as operators see it.
type QueueState struct {
	Queue                string
	ConcurrencyPerWorker int // 0: none set (each worker uses WORKER_CONCURRENCY)
	// Paused: the queue itself is paused (Pause pauses its later lane
	// too); LaterPaused: its later lane is (PauseLater pauses it alone).
	Paused, LaterPaused bool
	// Size counts the tasks that are still to run: pending, active,
	// scheduled, retrying and archived. Finished tasks are not kept
	// (Completed counts those an older version left behind).
	Size                                                   int
	Pending, Active, Scheduled, Retry, Archived, Completed int
	ProcessedToday                                         int           // tasks finished today (UTC), asynq's count, on both queues
	Latency                                                time.Duration // age of the oldest pending task
	Provider                                               ProviderHealth
	// Later counts the tasks still to run on LaterQueue (subscription
	// mail, deliveries scheduled for later), which workers take only
	// while the queue above has none; LaterLatency is its oldest
	// pending task's age.
	Later        int
	LaterLatency time.Duration
}

// ProviderHealth is whether the mail provider takes mail from us, as the
// live workers last saw it.
type ProviderHealth struct {
	Up     bool   `json:"up"`
	Reason string `json:"reason,omitempty"` // "<provider>: why", of the first worker that finds a provider refusing us
	// Providers is each provider's state over the live workers, in name
	// order: down while any worker finds it refusing us. With failover,
	// mail goes on while one of them is up.
	Providers []ProviderSummary `json:"providers"`
	Workers   []ProviderState   `json:"workers"`
}

// Queue returns the queue's sizes, whether it is paused, the concurrency
// limit in force and the provider's health.
func (o *Operator) Queue(ctx context.Context) (QueueState, error) {
	queue := o.enqueuer.Queue()
	info, err := QueueInfo(ctx, o.inspector, o.rdb, queue)
	if err != nil {
		return QueueState{}, err
	}
	later, err := QueueInfo(ctx, o.inspector, o.rdb, LaterQueue(queue))
	if err != nil {
		return QueueState{}, err
	}
	limit, err := Concurrency(ctx, o.rdb, queue)
	if err != nil {
		return QueueState{}, err
	}
	workers, err := ProviderStates(ctx, o.rdb, queue)
	if err != nil {
		return QueueState{}, err
	}
	health := ProviderHealth{Up: true, Workers: workers, Providers: summarize(workers)}
	readPaces(ctx, o.rdb, queue, health.Providers, workers)
	if i := slices.IndexFunc(workers, func(s ProviderState) bool { return !s.Up }); i >= 0 {
		health.Up, health.Reason = false, workers[i].Provider+": "+workers[i].Reason
	}
	return QueueState{
		Queue: queue, ConcurrencyPerWorker: limit, Paused: info.Paused, LaterPaused: later.Paused,
		Size:    info.Pending + info.Active + info.Scheduled + info.Retry + info.Archived,
		Pending: info.Pending, Active: info.Active, Scheduled: info.Scheduled, Retry: info.Retry,
		Archived: info.Archived, Completed: info.Completed, ProcessedToday: info.Processed + later.Processed, Latency: info.Latency, Provider: health,
		Later: later.Pending + later.Active + later.Scheduled + later.Retry + later.Archived, LaterLatency: later.Latency,
	}, nil
}

// ProviderSummary is one provider's state over the live workers.
type ProviderSummary struct {
	Name   string `json:"name"`
	Up     bool   `json:"up"`               // no live worker finds it refusing us
	Reason string `json:"reason,omitempty"` // of the first worker that does
	// Pace is its budget, when the live workers pace it; nil when unpaced.
	Pace *ProviderPace `json:"pace,omitempty"`
}

// summarize folds the workers' states into one per provider, by name.
func summarize(states []ProviderState) []ProviderSummary {
	byName := map[string]int{}
	out := []ProviderSummary{}
	for _, s := range states {
		i, seen := byName[s.Provider]
		if !seen {
			i = len(out)
			byName[s.Provider] = i
			out = append(out, ProviderSummary{Name: s.Provider, Up: true})
		}
		if !s.Up && out[i].Up {
			out[i].Up, out[i].Reason = false, s.Reason
		}
	}
	slices.SortFunc(out, func(a, b ProviderSummary) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// SetConcurrency makes every worker handle at most n deliveries at once
// from its next check (2 s), by actor; 0 restores each one's
// WORKER_CONCURRENCY.
func (o *Operator) SetConcurrency(ctx context.Context, actor string, n int) error {
	if err := SetConcurrency(ctx, o.rdb, o.enqueuer.Queue(), n); err != nil {
		return err
	}
	return o.recordAfter(ctx, actor, "queue.concurrency", map[string]any{"per_worker": n})
}

// QueueName is the delivery queue the operator acts on.
func (o *Operator) QueueName() string { return o.enqueuer.Queue() }

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
// ttl, by actor: they stay pending and go out after the block expires. A
// recipient that is not a valid address is ErrInvalidAddress.
func (o *Operator) AddBlock(ctx context.Context, actor, kind, value, reason string, ttl time.Duration) (b Block, err error) {
	if kind == "recipient" {
		v, err := mail.NormalizeAddress(value)
		if err != nil {
			return Block{}, err
		}
		value = v
	}
	err = o.inTx(ctx, func(_ pgx.Tx, q *dbsqlc.Queries) error {
		r, err := q.InsertBlock(ctx, dbsqlc.InsertBlockParams{Kind: kind, Value: value, Reason: reason, TtlSeconds: ttl.Seconds()})
		if err != nil {
			return fmt.Errorf("add block: %w", err)
		}
		b = blockFromRow(r)
		return recordAction(ctx, q, actor, "block.add", "block:"+strconv.FormatInt(b.ID, 10),
			map[string]any{"kind": b.Kind, "value": b.Value, "reason": b.Reason, "expires_at": b.ExpiresAt})
	})
	if err != nil {
		return Block{}, err
	}
	return b, nil
}

// Blocks lists the blocks in force.
func (o *Operator) Blocks(ctx context.Context) ([]Block, error) {
	rows, err := dbsqlc.New(o.db).ListActiveBlocks(ctx)
	if err != nil {
		return nil, fmt.Errorf("list blocks: %w", err)
	}
	return mapRows(rows, blockFromRow), nil
}

// RemoveBlock lifts a block early, by actor.
func (o *Operator) RemoveBlock(ctx context.Context, actor string, id int64) error {
	return o.inTx(ctx, func(_ pgx.Tx, q *dbsqlc.Queries) error {
		r, err := q.DeleteBlock(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrBlockNotFound
		}
		if err != nil {
			return fmt.Errorf("remove block %d: %w", id, err)
		}
		return recordAction(ctx, q, actor, "block.remove", "block:"+strconv.FormatInt(id, 10),
			map[string]any{"kind": r.Kind, "value": r.Value, "reason": r.Reason})
	})
}

func blockFromRow(r dbsqlc.DeliveryBlock) Block {
	return Block{ID: r.ID, Kind: r.Kind, Value: r.Value, Reason: r.Reason, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
}

// Suppressions lists the suppression list, newest first, at most limit:
// the live entries and test mode's.
func (o *Operator) Suppressions(ctx context.Context, limit int) ([]Suppression, error) {
	return o.SuppressionsOf(ctx, limit, nil)
}

// SuppressionsOf is Suppressions of test mode's list alone (test true)
// or of the live one alone (false); nil, both.
func (o *Operator) SuppressionsOf(ctx context.Context, limit int, test *bool) ([]Suppression, error) {
	rows, err := dbsqlc.New(o.db).ListSuppressions(ctx, dbsqlc.ListSuppressionsParams{MaxRows: int32(limit), Test: test})
	if err != nil {
		return nil, fmt.Errorf("list suppressions: %w", err)
	}
	return mapRows(rows, suppressionFromRow), nil
}

// Suppression returns one entry of the list with its history.
func (o *Operator) Suppression(ctx context.Context, recipient string) (Suppression, []SuppressionEvent, error) {
	recipient, err := mail.NormalizeAddress(recipient)
	if err != nil {
		return Suppression{}, nil, err
	}
	s, err := getSuppression(ctx, dbsqlc.New(o.db), recipient)
	if err != nil {
		return Suppression{}, nil, err
	}
	events, err := o.SuppressionHistory(ctx, recipient)
	return s, events, err
}

// SuppressionHistory returns every change of the list for recipient,
// oldest first: also for an address no longer on it.
func (o *Operator) SuppressionHistory(ctx context.Context, recipient string) ([]SuppressionEvent, error) {
	recipient, err := mail.NormalizeAddress(recipient)
	if err != nil {
		return nil, err
	}
	rows, err := dbsqlc.New(o.db).ListSuppressionEvents(ctx, recipient)
	if err != nil {
		return nil, fmt.Errorf("suppression history: %w", err)
	}
	events := make([]SuppressionEvent, len(rows))
	for i, e := range rows {
		events[i] = SuppressionEvent{At: e.At, Action: e.Action, Source: e.Source, Actor: e.Actor, Note: e.Note, Test: e.Test}
	}
	return events, nil
}

// getSuppression reads one entry of the list; recipient is normalized.
func getSuppression(ctx context.Context, q *dbsqlc.Queries, recipient string) (Suppression, error) {
	r, err := q.GetSuppression(ctx, recipient)
	if errors.Is(err, pgx.ErrNoRows) {
		return Suppression{}, ErrSuppressionNotFound
	}
	if err != nil {
		return Suppression{}, fmt.Errorf("get suppression: %w", err)
	}
	return suppressionFromRow(r), nil
}

func suppressionFromRow(r dbsqlc.Suppression) Suppression {
	return Suppression{Recipient: r.Recipient, Source: r.Source, Reason: r.Reason, CreatedAt: r.CreatedAt, Test: r.Test}
}

// Suppress puts a recipient on the live list by an operator's decision,
// with a note for the record; added is false when it was there already
// (its first reason stays). Its pending live deliveries are not sent from
// now on; test mode's list is the test provider's reports' alone.
func (o *Operator) Suppress(ctx context.Context, recipient, note, actor string) (s Suppression, added bool, err error) {
	recipient, err = mail.NormalizeAddress(recipient)
	if err != nil {
		return Suppression{}, false, err
	}
	err = o.inTx(ctx, func(_ pgx.Tx, q *dbsqlc.Queries) error {
		r, err := q.AddSuppression(ctx, dbsqlc.AddSuppressionParams{Recipient: recipient, Source: "operator", Reason: note, Actor: actor})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if s, err = getSuppression(ctx, q, recipient); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("suppress %s: %w", mail.KeyHash(recipient), err)
		default:
			s, added = suppressionFromRow(dbsqlc.Suppression(r)), true
		}
		return recordAction(ctx, q, actor, "suppression.add", "recipient:"+recipient, map[string]any{"note": note, "unchanged": !added})
	})
	if err != nil {
		return Suppression{}, false, err
	}
	return s, added, nil
}

// Unsuppress takes a recipient off the list (live or test mode's), with
// a note for the record. Deliveries already suppressed stay so until an
// operator retries them.
func (o *Operator) Unsuppress(ctx context.Context, recipient, note, actor string) error {
	recipient, err := mail.NormalizeAddress(recipient)
	if err != nil {
		return err
	}
	return o.inTx(ctx, func(_ pgx.Tx, q *dbsqlc.Queries) error {
		n, err := q.RemoveSuppression(ctx, dbsqlc.RemoveSuppressionParams{Recipient: recipient, Note: note, Actor: actor})
		if err != nil {
			return fmt.Errorf("unsuppress: %w", err)
		}
		if n == 0 {
			return ErrSuppressionNotFound
		}
		return recordAction(ctx, q, actor, "suppression.remove", "recipient:"+recipient, map[string]any{"note": note})
	})
}

// RecordFeedback is RecordFeedback on the operator's database: a
// provider's verified event into the history and, for a hard bounce or a
// complaint, the suppression list.
func (o *Operator) RecordFeedback(ctx context.Context, f mail.Feedback) (FeedbackOutcome, error) {
	return RecordFeedback(ctx, o.db, f)
}

// RememberWebhookToken is RememberWebhookToken on the operator's
// database: mail.ErrWebhookReplay for a signature's token that came before.
func (o *Operator) RememberWebhookToken(ctx context.Context, provider, token string, expires time.Time) error {
	return RememberWebhookToken(ctx, o.db, provider, token, expires)
}
