// Package webhookout tells the shop what happened to its notifications:
// signed events posted to the endpoints it registers, following the
// Standard Webhooks specification (webhook-id, webhook-timestamp and
// webhook-signature, "v1," HMAC-SHA256 over id.timestamp.body, secrets
// "whsec_…"), the scheme the service verifies for Resend's own events.
//
// The events are written by PostgreSQL (an outbox): a trigger on the
// delivery history writes one message per subscribed endpoint in the
// same statement as the history row, which is the statement of the
// transition itself, so an event is never lost and never invented by a
// crash. The Dispatcher (in the reconciler) posts them at least once,
// each under a stable webhook-id, retrying with back-off for up to
// WEBHOOK_MAX_AGE; a receiver's 2xx ends a message, 410 Gone disables
// its endpoint. Service manages the endpoints (the admin API).
package webhookout

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// Types are the events an endpoint can subscribe to.
var Types = []string{
	"notification.sent", "notification.failed", "notification.held", "notification.suppressed", "notification.cancelled",
	"notification.delivered", "notification.bounced", "notification.complained",
}

// RotationOverlap is how long the previous secret keeps signing after a
// rotation.
const RotationOverlap = 24 * time.Hour

var (
	// ErrNotFound: no endpoint has the id.
	ErrNotFound = errors.New("webhookout: no such endpoint")
	// ErrInvalid: the endpoint's settings are refused; the error says why.
	ErrInvalid = errors.New("webhookout: invalid endpoint")
)

// Endpoint is a receiver of events, without its secrets.
type Endpoint struct {
	ID             uuid.UUID  `json:"id"`
	URL            string     `json:"url"`
	EventTypes     []string   `json:"event_types"` // empty: every type
	Description    string     `json:"description,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	Rotating       bool       `json:"rotating"` // the previous secret still signs
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
}

// Message is one event on its way to one endpoint, as operators see it:
// its attempts, and what the receiver answered to the latest.
type Message struct {
	MsgID       string     `json:"webhook_id"`
	EventType   string     `json:"type"`
	CreatedAt   time.Time  `json:"created_at"`
	Test        bool       `json:"test,omitempty"` // about a test key's notification
	Attempts    int        `json:"attempts"`
	NextAttempt *time.Time `json:"next_attempt_at,omitempty"`
	// LastAttemptAt is when the latest attempt ended, LastStatus the HTTP
	// status the receiver answered it with (0: none, LastError says why).
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	LastStatus    int        `json:"last_status,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
	GaveUpAt      *time.Time `json:"gave_up_at,omitempty"`
}

// Service manages the endpoints. Each change is made by an actor (as the
// operators' actions name people) and recorded in operator_actions in
// its transaction.
type Service struct {
	db    *pgxpool.Pool
	guard *Guard
	now   func() time.Time
}

// NewService returns a Service over db whose URLs guard checks.
func NewService(db *pgxpool.Pool, guard *Guard) *Service {
	return &Service{db: db, guard: guard, now: time.Now}
}

// Create registers an endpoint for types (none: every type), by actor,
// and returns it with its secret, shown this once.
func (s *Service) Create(ctx context.Context, actor, rawURL string, types []string, description string) (Endpoint, string, error) {
	if err := s.guard.CheckURL(ctx, rawURL); err != nil {
		return Endpoint{}, "", fmt.Errorf("%w: url: %w", ErrInvalid, err)
	}
	for _, t := range types {
		if !slices.Contains(Types, t) {
			return Endpoint{}, "", fmt.Errorf("%w: event type %q is not one of %s", ErrInvalid, t, strings.Join(Types, ", "))
		}
	}
	if types == nil {
		types = []string{}
	}
	secret := newSecret()
	var ep Endpoint
	err := s.inTx(ctx, func(q *dbsqlc.Queries) error {
		row, err := q.InsertWebhookEndpoint(ctx, dbsqlc.InsertWebhookEndpointParams{
			ID: uuid.Must(uuid.NewV7()), Url: rawURL, EventTypes: types, Secret: secret, Description: description,
		})
		if err != nil {
			return err
		}
		ep = s.fromRow(row)
		return recordAction(ctx, q, actor, "webhook_endpoint.create", ep.ID,
			map[string]any{"url": ep.URL, "event_types": ep.EventTypes, "description": ep.Description})
	})
	if err != nil {
		return Endpoint{}, "", fmt.Errorf("create webhook endpoint: %w", err)
	}
	return ep, secret, nil
}

// List returns every endpoint, oldest first.
func (s *Service) List(ctx context.Context) ([]Endpoint, error) {
	rows, err := dbsqlc.New(s.db).ListWebhookEndpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	out := make([]Endpoint, len(rows))
	for i, r := range rows {
		out[i] = s.fromRow(r)
	}
	return out, nil
}

// Get returns one endpoint and its newest messages (at most limit): of
// every notification, or with test set, of a test key's (true) or a live
// one's (false) alone.
func (s *Service) Get(ctx context.Context, id uuid.UUID, limit int, test *bool) (Endpoint, []Message, error) {
	q := dbsqlc.New(s.db)
	row, err := q.GetWebhookEndpoint(ctx, id)
	if err != nil {
		return Endpoint{}, nil, notFound(err)
	}
	rows, err := q.ListWebhookMessages(ctx, dbsqlc.ListWebhookMessagesParams{EndpointID: id, Test: test, MaxRows: int32(limit)})
	if err != nil {
		return Endpoint{}, nil, fmt.Errorf("list webhook messages: %w", err)
	}
	msgs := make([]Message, len(rows))
	for i, m := range rows {
		msgs[i] = Message{MsgID: m.MsgID, EventType: m.EventType, CreatedAt: m.CreatedAt, Test: m.Test, Attempts: int(m.Attempts),
			LastAttemptAt: m.LastAttemptAt, LastError: deref(m.LastError), DeliveredAt: m.DeliveredAt, GaveUpAt: m.GaveUpAt}
		if m.LastStatus != nil {
			msgs[i].LastStatus = int(*m.LastStatus)
		}
		if m.DeliveredAt == nil && m.GaveUpAt == nil {
			msgs[i].NextAttempt = &m.NextAttemptAt
		}
	}
	return s.fromRow(row), msgs, nil
}

// Rotate gives the endpoint a new secret, by actor, shown this once; the
// previous one signs too for RotationOverlap.
func (s *Service) Rotate(ctx context.Context, actor string, id uuid.UUID) (ep Endpoint, secret string, err error) {
	secret = newSecret()
	err = s.inTx(ctx, func(q *dbsqlc.Queries) error {
		row, err := q.RotateWebhookSecret(ctx, dbsqlc.RotateWebhookSecretParams{
			ID: id, Secret: secret, PreviousExpiresAt: new(s.now().Add(RotationOverlap)),
		})
		if err != nil {
			return notFound(err)
		}
		ep = s.fromRow(row)
		return recordAction(ctx, q, actor, "webhook_endpoint.rotate_secret", id, map[string]any{"url": ep.URL})
	})
	if err != nil {
		return Endpoint{}, "", err
	}
	return ep, secret, nil
}

// SetEnabled disables (with the reason) or enables an endpoint, by
// actor. A disabled endpoint is sent nothing and gets no new messages;
// enabled again, its undelivered messages go out.
func (s *Service) SetEnabled(ctx context.Context, actor string, id uuid.UUID, enabled bool, reason string) (ep Endpoint, err error) {
	p := dbsqlc.SetWebhookEndpointDisabledParams{ID: id}
	action, detail := "webhook_endpoint.enable", map[string]any{}
	if !enabled {
		p.DisabledAt, p.DisabledReason = new(s.now()), &reason
		action, detail = "webhook_endpoint.disable", map[string]any{"reason": reason}
	}
	err = s.inTx(ctx, func(q *dbsqlc.Queries) error {
		row, err := q.SetWebhookEndpointDisabled(ctx, p)
		if err != nil {
			return notFound(err)
		}
		ep = s.fromRow(row)
		detail["url"] = ep.URL
		return recordAction(ctx, q, actor, action, id, detail)
	})
	if err != nil {
		return Endpoint{}, err
	}
	return ep, nil
}

// Delete removes an endpoint and its messages, by actor.
func (s *Service) Delete(ctx context.Context, actor string, id uuid.UUID) error {
	return s.inTx(ctx, func(q *dbsqlc.Queries) error {
		url, err := q.DeleteWebhookEndpoint(ctx, id)
		if err != nil {
			return notFound(err)
		}
		return recordAction(ctx, q, actor, "webhook_endpoint.delete", id, map[string]any{"url": url})
	})
}

// Replay sends again, under their own webhook-ids, one message (msgID)
// or those created in [since, until) (zero: no bound), delivered or not,
// by actor; it returns how many. Each gets a new series of tries: its
// WEBHOOK_MAX_AGE counts from now.
func (s *Service) Replay(ctx context.Context, actor string, id uuid.UUID, msgID string, since, until time.Time) (n int, err error) {
	err = s.inTx(ctx, func(q *dbsqlc.Queries) error {
		if n, err = s.replay(ctx, q, id, msgID, since, until); err != nil {
			return err
		}
		detail := map[string]any{"replayed": n}
		if msgID != "" {
			detail["webhook_id"] = msgID
		}
		if !since.IsZero() {
			detail["since"] = since
		}
		if !until.IsZero() {
			detail["until"] = until
		}
		return recordAction(ctx, q, actor, "webhook_endpoint.replay", id, detail)
	})
	return n, err
}

func (s *Service) replay(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, msgID string, since, until time.Time) (int, error) {
	if _, err := q.GetWebhookEndpoint(ctx, id); err != nil {
		return 0, notFound(err)
	}
	p := dbsqlc.ReplayWebhookMessagesParams{EndpointID: id}
	if msgID != "" {
		p.MsgID = &msgID
	}
	if !since.IsZero() {
		p.Since = &since
	}
	if !until.IsZero() {
		p.Until = &until
	}
	n, err := q.ReplayWebhookMessages(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("replay webhook messages: %w", err)
	}
	return int(n), nil
}

// inTx runs fn in one transaction: a change and the record of who made
// it commit together, or neither does.
func (s *Service) inTx(ctx context.Context, fn func(q *dbsqlc.Queries) error) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return fn(dbsqlc.New(tx)) })
}

// recordAction writes what actor did to endpoint id into
// operator_actions, on q (the transaction of the change). What a person
// typed (a reason) is kept as textrule.Clip keeps it.
func recordAction(ctx context.Context, q *dbsqlc.Queries, actor, action string, id uuid.UUID, detail map[string]any) error {
	for k, v := range detail {
		if s, ok := v.(string); ok {
			detail[k] = textrule.Clip(s, 2000)
		}
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	return q.RecordOperatorAction(ctx, dbsqlc.RecordOperatorActionParams{
		Actor: textrule.Clip(actor, 500), Action: action, Target: "webhook_endpoint:" + id.String(), Detail: b,
	})
}

func (s *Service) fromRow(r dbsqlc.WebhookEndpoint) Endpoint {
	return Endpoint{ID: r.ID, URL: r.Url, EventTypes: r.EventTypes, Description: r.Description, CreatedAt: r.CreatedAt,
		Rotating:   r.PreviousSecret != nil && r.PreviousExpiresAt != nil && r.PreviousExpiresAt.After(s.now()),
		DisabledAt: r.DisabledAt, DisabledReason: deref(r.DisabledReason)}
}

func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return fmt.Errorf("webhook endpoint: %w", err)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// newSecret is 32 random bytes as a Standard Webhooks secret.
func newSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:])
}
