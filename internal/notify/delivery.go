// Package notify turns business events into e-mails that leave exactly
// once: it records the intent to send (a notification_deliveries row with
// a unique idempotency key) in the caller's transaction, hands the
// delivery to the queue after commit, and drives it to the provider.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Status is where a delivery stands; transitions.go holds every move
// between them and who may make it.
type Status string

const (
	StatusPending Status = "pending" // recorded, not yet claimed by a worker
	StatusSending Status = "sending" // claimed under a lease; the provider may be talking
	StatusSent    Status = "sent"    // the provider accepted it; never sent again
	StatusFailed  Status = "failed"  // given up; only an operator may retry it
	// StatusHeld: an operator decides. Either the outcome of a send is
	// unknown and the template's policy is hold (the reconciler), or the
	// template cannot render the stored data (the worker).
	StatusHeld Status = "held"
	// StatusSuppressed: the recipient is on the suppression list (a hard
	// bounce, a complaint, an operator); nothing was sent.
	StatusSuppressed Status = "suppressed"
	// StatusCancelled: called off while it was pending (the shop, or an
	// operator); nothing was sent. Final.
	StatusCancelled Status = "cancelled"
)

// Statuses are every status a delivery can have, in the order of its way
// through them: what operators filter by.
var Statuses = []Status{StatusPending, StatusSending, StatusSent, StatusFailed, StatusHeld, StatusSuppressed, StatusCancelled}

// ProviderEvent is a provider's report about a message it took: Kind
// is one of ProviderEventKinds, At the provider's time of it.
type ProviderEvent struct {
	Kind mail.FeedbackKind
	At   time.Time
}

// ProviderEventKinds are the reports a delivery keeps the last of: where
// its message went after sent. An unsubscribe is the recipient's act,
// not the message's fate, and is not one.
var ProviderEventKinds = []mail.FeedbackKind{mail.FeedbackDelivered, mail.FeedbackDeferred, mail.FeedbackBounced, mail.FeedbackComplained}

// ErrNotFound is returned when no delivery matches.
var ErrNotFound = errors.New("notify: delivery not found")

// DB is what notify reads and writes through: a *pgxpool.Pool, or the
// caller's pgx.Tx when the write must commit with the caller's own.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Delivery is one e-mail the service has promised to send.
type Delivery struct {
	ID                uuid.UUID
	OrderID           uuid.UUID
	Template          string
	Recipient         string
	IdempotencyKey    string
	Status            Status
	Attempts          int
	LastError         string
	ProviderMessageID string
	LeaseExpiresAt    *time.Time // while sending: when the worker's lease ends
	HandedOverAt      *time.Time // while sending: when the data went to the provider
	// HandoverBatch is the key of the batch at the provider its last
	// hand-over went in (BatchMembers lists them), "" when it went
	// alone: while its outcome is unknown, it is never sent alone under a
	// key of its own, only again in that batch, identical.
	HandoverBatch string
	MessageID     string // set by the first claim; "" before it
	Data          json.RawMessage
	CreatedAt     time.Time
	UpdatedAt     time.Time
	SentAt        *time.Time
	TryingSince   time.Time  // start of the current series of tries (DELIVERY_MAX_AGE counts from here)
	Locale        string     // the customer's language (BCP 47); "" for the default
	NotBefore     *time.Time // to be sent later: no worker claims it before; nil: at once
	// Provider is the provider of the latest hand-over; "" if none was
	// recorded. ProviderPinned: the outcome there is unknown, so every
	// attempt goes to it alone.
	Provider       string
	ProviderPinned bool
	// UnsettledSince is when the earliest attempt whose outcome is still
	// unknown was handed over; nil if none is. PostgreSQL keeps it
	// (migration 00021): set by a hand-over, cleared by sent or by
	// evidence (SettledBy), never beside failed, suppressed or cancelled.
	UnsettledSince *time.Time
	// SettledBy is the evidence that last settled an unknown outcome as
	// not taken ("answer", "lookup", "operator"), at SettledAt; "" if
	// none did.
	SettledBy string
	SettledAt *time.Time
	// Owner is the owner of the API key that made it (apikey.Key.Owner;
	// a checkout's confirmation: the order's), PublicOwner for the public
	// checkout's, nil when it was recorded before owners were.
	Owner *uuid.UUID
	// Test: a test key's (its order's mode, docs/testmode.md). Only the
	// worker's test provider ever takes it; it never reaches a real one.
	Test bool
	// ProviderEvent is what the provider last reported about the message
	// after it took it, nil before any report (RecordFeedback): a sent
	// delivery that bounced is still sent, and says so here.
	ProviderEvent *ProviderEvent
	// BouncedOrComplainedAt is when the provider reported a bounce or a
	// complaint of the message, the earliest by its clock; nil if never.
	BouncedOrComplainedAt *time.Time
	// OrderReference is the shop's own number of its order (the
	// checkout's reference), "" for none; Operator.Get alone reads it,
	// for the console.
	OrderReference string
	// Retired: retention deleted the delivery and kept only its
	// tombstone; the fields left are ID, OrderID, Template,
	// IdempotencyKey, Status (sent or failed) and SentAt.
	Retired bool

	leaseToken *uuid.UUID // the attempt's, while sending: transitions fence on it
}

// Key is the idempotency key of the e-mail that template sends about one
// order to one recipient, e.g. "order-confirmation:<orderId>:<email>".
// The same event always yields the same key, on every retry and resend;
// recipient must already be normalized (see NormalizeAddress).
func Key(template string, orderID uuid.UUID, recipient string) string {
	return template + ":" + orderID.String() + ":" + recipient
}

// EventKey is the idempotency key of an event that can happen more than
// once per order (a payment reminder, a change of address): the caller's
// id of the event goes between the order and the recipient, e.g.
// "payment-reminder:<orderId>:<eventId>:<email>".
func EventKey(template string, orderID uuid.UUID, eventID, recipient string) string {
	return template + ":" + orderID.String() + ":" + eventID + ":" + recipient
}

// Intent is what a caller asks to be sent.
type Intent struct {
	OrderID   uuid.UUID
	Template  string
	Recipient string // normalized
	Data      any    // snapshot rendered by the template; marshalled to JSON
	Locale    string // BCP 47, canonical; "" for the default language
	EventID   string // for events that can happen more than once per order; "" for once per order
	// NotBefore sends it later: no worker claims it before, and
	// DELIVERY_MAX_AGE counts from it. Zero, or a time past: at once.
	NotBefore time.Time
	// Owner is the owner of the API key that asks (apikey.Key.Owner), or
	// PublicOwner for an anonymous caller: who may cancel it (Canceller).
	Owner uuid.UUID
	// Test: the order is a test key's; so is the notification, which
	// then never reaches a provider. Always the order's mode.
	Test bool
}

// PublicOwner owns what anonymous callers make (the public checkout's
// confirmations): no API key's owner is the all-zero UUID, so only an
// operator may cancel them.
var PublicOwner = uuid.Nil

// key is the intent's idempotency key.
func (in Intent) key() string {
	if in.EventID != "" {
		return EventKey(in.Template, in.OrderID, in.EventID, in.Recipient)
	}
	return Key(in.Template, in.OrderID, in.Recipient)
}

// Record writes the intent inside the caller's transaction, so that it
// commits or rolls back with the business change that caused it. When an
// intent with the same idempotency key exists already, Record returns that
// delivery and created=false: recording twice never means sending twice.
// That holds after retention too: a retired key returns its tombstone
// (Retired) and is never recorded again.
// After the transaction commits, hand the delivery to Enqueuer.EnqueueAfterCommit.
func Record(ctx context.Context, tx DB, in Intent, now time.Time) (d Delivery, created bool, err error) {
	p, err := in.prepare(now)
	if err != nil {
		return Delivery{}, false, fmt.Errorf("record %s intent: %w", in.Template, err)
	}
	q := dbsqlc.New(tx)
	key := p.Delivery.IdempotencyKey
	row, created, err := recordIntent(ctx, q, p.Delivery)
	if err != nil {
		return Delivery{}, false, fmt.Errorf("record %s intent: %w", in.Template, err)
	}
	if created {
		return fromRow(row), true, nil
	}
	existing, err := q.GetDeliveryByKey(ctx, key)
	if errors.Is(err, pgx.ErrNoRows) {
		// Not inserted and not there: retention retired it.
		retired, err := q.GetRetiredDelivery(ctx, key)
		if err != nil {
			return Delivery{}, false, fmt.Errorf("record %s intent: read retired: %w", in.Template, err)
		}
		return Delivery{ID: retired.DeliveryID, OrderID: retired.OrderID, Template: retired.Template,
			IdempotencyKey: key, Status: Status(retired.Status), SentAt: retired.SentAt, Retired: true}, false, nil
	}
	if err != nil {
		return Delivery{}, false, fmt.Errorf("record %s intent: read existing: %w", in.Template, err)
	}
	return fromRow(existing), false, nil
}

// PreparedIntent is an intent made ready for a caller that writes it in
// a statement of its own (the checkout's, which records the order and its
// confirmation in one round trip): the delivery as it is once committed,
// and its template data as stored. Only a new order's intent may be
// written this way: its key cannot exist yet, so nothing needs to be read.
type PreparedIntent struct {
	Delivery Delivery // pending, with the id and key to insert
	Data     json.RawMessage
}

// Prepare returns the intent's delivery as Record would create it.
func (in Intent) Prepare(now time.Time) (PreparedIntent, error) {
	p, err := in.prepare(now)
	if err != nil {
		return PreparedIntent{}, fmt.Errorf("prepare %s intent: %w", in.Template, err)
	}
	return p, nil
}

// prepare is Prepare, and the first step of Record: both write the same
// delivery.
func (in Intent) prepare(now time.Time) (PreparedIntent, error) {
	data, err := json.Marshal(in.Data)
	if err != nil {
		return PreparedIntent{}, fmt.Errorf("encode template data: %w", err)
	}
	d := Delivery{
		ID: uuid.Must(uuid.NewV7()), OrderID: in.OrderID, Template: in.Template, Recipient: in.Recipient,
		IdempotencyKey: in.key(), Status: StatusPending, Data: data,
		CreatedAt: now, UpdatedAt: now, TryingSince: now, Locale: in.Locale, Owner: &in.Owner, Test: in.Test,
	}
	if in.NotBefore.After(now) {
		at := in.NotBefore.UTC().Truncate(time.Microsecond)
		d.NotBefore, d.TryingSince = &at, at
	}
	return PreparedIntent{Data: data, Delivery: d}, nil
}

// ListByOrder returns the deliveries of one order, oldest first.
func ListByOrder(ctx context.Context, db DB, orderID uuid.UUID) ([]Delivery, error) {
	rows, err := dbsqlc.New(db).ListDeliveriesByOrder(ctx, orderID)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of order %s: %w", orderID, err)
	}
	return mapRows(rows, fromRow), nil
}

// mapRows converts generated rows, in their order, into the package's
// type by convert (fromRow, blockFromRow, ...).
func mapRows[R, T any](rows []R, convert func(R) T) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = convert(r)
	}
	return out
}

// fromRow converts a generated row into a Delivery.
func fromRow(r dbsqlc.NotificationDelivery) Delivery {
	return Delivery{
		ID:             r.ID,
		OrderID:        r.OrderID,
		Template:       r.Template,
		Recipient:      r.Recipient,
		IdempotencyKey: r.IdempotencyKey,
		Status:         Status(r.Status),
		Attempts:       int(r.Attempts),
		LeaseExpiresAt: r.LeaseExpiresAt,
		HandedOverAt:   r.HandedOverAt,
		Data:           r.TemplateData,
		CreatedAt:      r.CreatedAt,
		UpdatedAt:      r.UpdatedAt,
		SentAt:         r.SentAt,
		TryingSince:    r.TryingSince,
		NotBefore:      r.NotBefore,
		ProviderPinned: r.ProviderPinned,
		UnsettledSince: r.UnsettledSince,
		SettledAt:      r.SettledAt,
		Owner:          r.OwnerID,
		Test:           r.Test,
		leaseToken:     r.LeaseToken,
		// The nullable text columns: "" for NULL.
		Provider:          orEmpty(r.Provider),
		MessageID:         orEmpty(r.MessageID),
		HandoverBatch:     orEmpty(r.HandoverBatch),
		Locale:            orEmpty(r.Locale),
		LastError:         orEmpty(r.LastError),
		ProviderMessageID: orEmpty(r.ProviderMessageID),
		SettledBy:         orEmpty(r.SettledBy),
		// What the provider reported after it took the message.
		ProviderEvent:         providerEventOf(r.ProviderEvent, r.ProviderEventAt),
		BouncedOrComplainedAt: r.BouncedOrComplainedAt,
	}
}

// providerEventOf is the last report's columns as a ProviderEvent, nil
// when there is none.
func providerEventOf(kind *string, at *time.Time) *ProviderEvent {
	if kind == nil || at == nil {
		return nil
	}
	return &ProviderEvent{Kind: mail.FeedbackKind(*kind), At: *at}
}

// orEmpty is a nullable text column's value, "" for NULL.
func orEmpty(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// Get returns one delivery.
func Get(ctx context.Context, db DB, id uuid.UUID) (Delivery, error) {
	row, err := dbsqlc.New(db).GetDelivery(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, ErrNotFound
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("get delivery %s: %w", id, err)
	}
	return fromRow(row), nil
}

// GetByKey returns the delivery with this idempotency key.
func GetByKey(ctx context.Context, db DB, key string) (Delivery, error) {
	row, err := dbsqlc.New(db).GetDeliveryByKey(ctx, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, ErrNotFound
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("get delivery by key: %w", err)
	}
	return fromRow(row), nil
}

// UnknownSince is when d's earliest attempt whose outcome is still
// unknown was handed over (UnsettledSince; a sending row's hand-over
// makes it so, in a row built without it too); ok is false when it has
// none.
func (d Delivery) UnknownSince() (since time.Time, ok bool) {
	if d.Status == StatusSent { // it keeps its pin: it was sent there
		return time.Time{}, false
	}
	var known []time.Time
	switch {
	case d.UnsettledSince != nil:
		known = append(known, *d.UnsettledSince)
	case d.ProviderPinned: // pinned before unsettled_since was kept (00015): as early as it can be
		known = append(known, d.CreatedAt)
	}
	if d.Status == StatusSending && d.HandedOverAt != nil {
		known = append(known, *d.HandedOverAt)
	}
	if len(known) == 0 {
		return time.Time{}, false
	}
	return slices.MinFunc(known, time.Time.Compare), true
}

// MayHaveBeenSent reports whether a provider may hold d's e-mail though
// its status does not say sent: an attempt was handed over and its
// outcome is not known. PostgreSQL keeps this true of every row
// (UnsettledSince), so it is never beside a status that says "not
// sent"; such a delivery is never cancelled on our word, and the shop
// is told (order.Notification's may_have_been_sent).
func (d Delivery) MayHaveBeenSent() bool {
	_, unknown := d.UnknownSince()
	return unknown
}

// Ready is a pending delivery a request of many may carry: its id and
// idempotency key.
type Ready struct {
	ID             uuid.UUID
	IdempotencyKey string
}

// ReadyToCarry lists, oldest change first, up to n pending deliveries due
// now that a request of many to provider may carry beside a task's own
// (exclude): not pinned to another provider, not test mode's; with
// urgentOnly, none of laterTemplates and none scheduled. A plain read:
// the claim judges each again.
func ReadyToCarry(ctx context.Context, db DB, provider string, exclude []uuid.UUID, urgentOnly bool, laterTemplates []string, n int) ([]Ready, error) {
	rows, err := dbsqlc.New(db).ListReadyToCarry(ctx, dbsqlc.ListReadyToCarryParams{
		Provider: provider, Exclude: exclude, UrgentOnly: urgentOnly, LaterTemplates: laterTemplates, N: int32(n),
	})
	if err != nil {
		return nil, fmt.Errorf("list deliveries ready to carry: %w", err)
	}
	return mapRows(rows, func(r dbsqlc.ListReadyToCarryRow) Ready { return Ready(r) }), nil
}
