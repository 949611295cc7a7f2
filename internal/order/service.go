package order

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/metric"
	"github.com/sekali-dev/sekali/internal/notify"
)

// idempotencyScope names the operation an Idempotency-Key belongs to, so
// that one key sent to two different endpoints never collides.
const idempotencyScope = "POST /v1/orders"

// enqueuer hands committed deliveries to the queue (queue.Enqueuer).
type enqueuer interface {
	EnqueueAfterCommit(ctx context.Context, deliveries []notify.Delivery)
}

// templates is what the generic trigger needs of the registry
// (*mailtemplate.Templates).
type templates interface {
	Has(name string) bool
	Validate(name string, data json.RawMessage) error
}

// Service records and reads orders.
type Service struct {
	pool      *pgxpool.Pool
	enqueuer  enqueuer
	templates templates
	keyTTL    time.Duration
	now       func() time.Time
	// Public holds anonymous checkouts to the public checkout's rules;
	// nil, the default, takes none: only keyed callers reach Place.
	Public *PublicRules
	// SendAtHorizon is how far ahead Notify schedules (SEND_AT_HORIZON);
	// DefaultSendAtHorizon when zero.
	SendAtHorizon time.Duration

	created    prometheus.Counter
	replays    prometheus.Counter
	keyClashes *prometheus.CounterVec
}

// NewService returns a Service that keeps Idempotency-Key responses for
// keyTTL and registers its metrics with reg. tmpl validates the data of
// the generic trigger (Notify); with nil, Notify refuses every template.
func NewService(pool *pgxpool.Pool, enq enqueuer, tmpl *mailtemplate.Templates, keyTTL time.Duration, reg prometheus.Registerer) *Service {
	s := &Service{
		pool:     pool,
		enqueuer: enq,
		keyTTL:   keyTTL,
		now:      time.Now,
		created:  metric.Counter(reg, "sekali_orders_created_total", "Orders recorded by the checkout API."),
		// The worker's duplicates, counted in the API by the layer that
		// catches them here: the checkout's Idempotency-Key.
		replays: metric.CounterVec(reg, "sekali_duplicate_detected_total",
			"Duplicates caught before they caused a second e-mail, by the layer that caught them.",
			[]string{"layer"}, []string{"api_idempotency"}).WithLabelValues("api_idempotency"),
		keyClashes: metric.CounterVec(reg, "sekali_idempotency_conflict_total",
			"Checkout requests refused because of their Idempotency-Key: in_flight (409) or payload_mismatch (422).",
			[]string{"reason"}, []string{"in_flight", "payload_mismatch"}),
	}
	if tmpl != nil {
		s.templates = tmpl
	}
	return s
}

// Placed is a checkout as Place recorded it, or found it recorded.
type Placed struct {
	Order
	// JSON is the API's answer: the order as JSON, ending in a newline.
	// For a replay it is the first answer, byte for byte, as its
	// Idempotency-Key record keeps it.
	JSON []byte
	// Replayed: the Idempotency-Key had been used for this checkout
	// before, and nothing was created.
	Replayed bool
}

// Place records a checkout: the order, its lines and the intent to send
// its confirmation, all in one transaction; after the commit it enqueues
// the delivery. With a non-empty idempotencyKey, a repeat of the same
// request by the same caller returns the order recorded the first time
// (replayed=true) and creates nothing; the key reused for a different
// request is ErrKeyReused; a repeat while the first is still running is
// ErrRequestInFlight. An invalid checkout is a *ValidationError and
// writes nothing. With Public rules set, an anonymous caller's checkout
// is also held to them: one over its quota is a *QuotaError, one whose
// quota could not be counted ErrQuotaUnavailable; a replay spends none.
func (s *Service) Place(ctx context.Context, c Checkout, caller Caller, idempotencyKey string) (Placed, error) {
	v, err := c.validate()
	if err != nil {
		return Placed{}, err
	}
	if err := checkRecipientMode(caller.Test, "/customer_email", v.Email); err != nil {
		return Placed{}, err
	}
	// The request's fingerprint matters only to an Idempotency-Key.
	var hash []byte
	if idempotencyKey != "" {
		fingerprint, err := json.Marshal(v)
		if err != nil {
			return Placed{}, fmt.Errorf("fingerprint checkout: %w", err)
		}
		sum := sha256.Sum256(fingerprint)
		hash = sum[:]
	}
	now := s.now().UTC().Truncate(time.Microsecond) // PostgreSQL's precision
	if s.Public != nil && caller.Anonymous() {
		if err := s.Public.checkPublic(v); err != nil {
			return Placed{}, err
		}
		if s.Public.Quota != nil {
			// A replay mails nothing, so it spends no quota: a storefront
			// that lost its answer gets it back, not a 429.
			if idempotencyKey != "" {
				prior, found, err := s.answered(ctx, caller.scope(idempotencyScope), idempotencyKey, hash, now)
				if err != nil || found {
					return s.replay(prior, err)
				}
			}
			// Counted by mailbox: victim+1@ and v.ictim@gmail.com are
			// the person that victim@ and victim@gmail.com are.
			limit, wait, err := s.Public.Quota.Take(ctx, caller.Client, mail.Mailbox(v.Email))
			if err != nil {
				return Placed{}, fmt.Errorf("%w: %w", ErrQuotaUnavailable, err)
			}
			if limit != "" {
				return Placed{}, &QuotaError{Limit: limit, RetryAfter: wait}
			}
		}
	}
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("github.com/sekali-dev/sekali/internal/order").Start(ctx, "checkout transaction")
	defer span.End()

	o := Order{
		ID:            uuid.Must(uuid.NewV7()),
		Reference:     v.Reference,
		CustomerEmail: v.Email,
		CustomerName:  v.Name,
		Currency:      v.Currency,
		Items:         v.Items,
		Total:         v.Total,
		Locale:        v.Locale,
		CreatedAt:     now,
		AccessToken:   newAccessToken(),
		Test:          caller.Test,
	}
	intent, err := notify.Intent{
		OrderID:   o.ID,
		Template:  TemplateConfirmation,
		Recipient: o.CustomerEmail,
		Data: confirmationData{
			OrderID:      o.ID,
			Reference:    o.Reference,
			CustomerName: o.CustomerName,
			Currency:     o.Currency,
			Items:        o.Items,
			Total:        o.Total,
			PlacedAt:     o.CreatedAt,
		},
		Locale: o.Locale,
		Owner:  caller.Owner,
		Test:   caller.Test,
	}.Prepare(now)
	if err != nil {
		return Placed{}, err
	}
	deliveries := []notify.Delivery{intent.Delivery}
	o.Notifications = notificationsOf(deliveries)
	p := checkoutParams(o, intent)

	answer, err := json.Marshal(o)
	if err != nil {
		return Placed{}, fmt.Errorf("encode order: %w", err)
	}
	answer = append(answer, '\n')
	if idempotencyKey == "" {
		// One statement: one round trip, one commit.
		if err := dbsqlc.New(s.pool).InsertCheckout(ctx, p); err != nil {
			return Placed{}, s.insertError(ctx, p, err)
		}
	} else {
		p.Remember, p.Scope, p.Key, p.RequestHash, p.ResponseBody, p.ExpiresAt = true, caller.scope(idempotencyScope), idempotencyKey, hash, answer, now.Add(s.keyTTL)
		prior, found, err := s.placeKeyed(ctx, p, now)
		if err != nil || found {
			return s.replay(prior, s.insertError(ctx, p, err))
		}
	}
	s.created.Inc()
	failpoint.Inject("api-after-commit") // a crash here leaves intents without tasks
	s.enqueuer.EnqueueAfterCommit(ctx, deliveries)
	return Placed{Order: o, JSON: answer}, nil
}

// insertError is what a checkout's insert failing with err means: its
// order number already another order's of its owner (the unique index
// orders_owner_reference_key, which every write meets), or err.
func (s *Service) insertError(ctx context.Context, p dbsqlc.InsertCheckoutParams, err error) error {
	if !isUniqueViolation(err, "orders_owner_reference_key") {
		return err
	}
	taken := &ReferenceTakenError{Reference: *p.Reference}
	// The order that has it, for the caller to find; its owner's own.
	if id, lerr := dbsqlc.New(s.pool).GetOrderByReference(ctx, dbsqlc.GetOrderByReferenceParams{OwnerID: p.OwnerID, Reference: *p.Reference}); lerr == nil {
		taken.Order = id
	}
	return taken
}

// replay answers a checkout with the response its Idempotency-Key's
// record kept, or with err.
func (s *Service) replay(prior []byte, err error) (Placed, error) {
	if err != nil {
		return Placed{}, err
	}
	s.replays.Inc()
	var first Order
	if err := json.Unmarshal(prior, &first); err != nil {
		return Placed{}, fmt.Errorf("decode remembered response: %w", err)
	}
	return Placed{Order: first, JSON: prior, Replayed: true}, nil
}

// answered returns the response a live record of key in scope keeps for
// the request whose fingerprint is hash (found), ErrKeyReused when it
// keeps one for another request, or nothing: a look-up without the
// key's lock, for what must not be spent on a replay (the public
// checkout's quota). A twin in flight is not seen; the checkout's own
// statement still decides.
func (s *Service) answered(ctx context.Context, scope, key string, hash []byte, now time.Time) (prior []byte, found bool, err error) {
	prior, found, _, err = s.recorded(ctx, dbsqlc.New(s.pool), scope, key, hash, now)
	return prior, found, err
}

// recorded reads the record of key in scope through q and says what it
// means for the request whose fingerprint is hash, at now (priorUse): the
// response it keeps for this request (found), ErrKeyReused when it keeps
// one for another, or nothing: no record, or one that has expired
// (expired).
func (s *Service) recorded(ctx context.Context, q *dbsqlc.Queries, scope, key string, hash []byte, now time.Time) (prior []byte, found, expired bool, err error) {
	row, err := q.GetIdempotencyKey(ctx, dbsqlc.GetIdempotencyKeyParams{Scope: scope, Key: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, false, nil
	}
	if err != nil {
		return nil, false, false, fmt.Errorf("read idempotency key: %w", err)
	}
	replay, err := priorUse(row.ExpiresAt, row.RequestHash, hash, now)
	switch {
	case err != nil:
		s.keyClashes.WithLabelValues("payload_mismatch").Inc()
		return nil, false, false, err
	case !replay:
		return nil, false, true, nil
	}
	return row.ResponseBody, true, false, nil
}

// placeKeyed records a checkout with an Idempotency-Key, or finds the
// response its key already has. The common case — a key not seen before —
// is one statement (InsertKeyedCheckout): lock, look-up and inserts in one
// round trip and one commit. A key whose record expired takes the long
// way: a transaction that locks it, drops the old record and inserts.
func (s *Service) placeKeyed(ctx context.Context, p dbsqlc.InsertCheckoutParams, now time.Time) (prior []byte, found bool, err error) {
	r, err := dbsqlc.New(s.pool).InsertKeyedCheckout(ctx, keyedParams(p))
	switch {
	case isUniqueViolation(err, "idempotency_keys_pkey"):
		// A twin committed between this statement's snapshot and its
		// lock: it is the first; nothing of this one was written.
		s.keyClashes.WithLabelValues("in_flight").Inc()
		return nil, false, ErrRequestInFlight
	case err != nil:
		return nil, false, fmt.Errorf("insert order: %w", err)
	case !r.Locked:
		s.keyClashes.WithLabelValues("in_flight").Inc()
		return nil, false, ErrRequestInFlight
	case r.Inserted:
		return nil, false, nil
	case r.PriorExpiresAt != nil:
		replay, err := priorUse(*r.PriorExpiresAt, r.PriorRequestHash, p.RequestHash, now)
		if err != nil {
			s.keyClashes.WithLabelValues("payload_mismatch").Inc()
			return nil, false, err
		}
		if replay {
			return r.PriorResponseBody, true, nil
		}
	}
	// The key's record expired: start afresh under the key's lock.
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		body, live, err := s.lookupKey(ctx, q, p.Scope, p.Key, p.RequestHash, now)
		if err != nil || live {
			if live {
				prior, found = body, true
			}
			return err
		}
		if err := q.InsertCheckout(ctx, p); err != nil {
			if isUniqueViolation(err, "idempotency_keys_pkey") {
				s.keyClashes.WithLabelValues("in_flight").Inc()
				return ErrRequestInFlight
			}
			return fmt.Errorf("insert order: %w", err)
		}
		return nil
	})
	return prior, found, err
}

// checkoutParams are the columns of a new order and its confirmation.
func checkoutParams(o Order, intent notify.PreparedIntent) dbsqlc.InsertCheckoutParams {
	p := dbsqlc.InsertCheckoutParams{
		ID:             o.ID,
		CustomerEmail:  o.CustomerEmail,
		CustomerName:   o.CustomerName,
		Currency:       o.Currency,
		TotalMinor:     o.Total,
		CreatedAt:      o.CreatedAt,
		DeliveryID:     intent.Delivery.ID,
		Template:       intent.Delivery.Template,
		Recipient:      intent.Delivery.Recipient,
		IdempotencyKey: intent.Delivery.IdempotencyKey,
		TemplateData:   intent.Data,
		OwnerID:        *intent.Delivery.Owner,
		Test:           intent.Delivery.Test,
	}
	sum := sha256.Sum256([]byte(o.AccessToken))
	p.AccessTokenHash = sum[:]
	if o.Locale != "" {
		p.Locale = &o.Locale
	}
	if o.Reference != "" {
		p.Reference = &o.Reference
	}
	for i, it := range o.Items {
		p.LineNos = append(p.LineNos, int32(i+1))
		p.Skus = append(p.Skus, it.SKU)
		p.Names = append(p.Names, it.Name)
		p.Quantities = append(p.Quantities, it.Quantity)
		p.UnitPricesMinor = append(p.UnitPricesMinor, it.UnitPrice)
	}
	return p
}

// keyedParams are p's columns for InsertKeyedCheckout.
func keyedParams(p dbsqlc.InsertCheckoutParams) dbsqlc.InsertKeyedCheckoutParams {
	return dbsqlc.InsertKeyedCheckoutParams{
		Scope: p.Scope, Key: p.Key, RequestHash: p.RequestHash, ResponseBody: p.ResponseBody, ExpiresAt: p.ExpiresAt,
		ID: p.ID, CustomerEmail: p.CustomerEmail, CustomerName: p.CustomerName, Currency: p.Currency, TotalMinor: p.TotalMinor,
		CreatedAt: p.CreatedAt, AccessTokenHash: p.AccessTokenHash, Locale: p.Locale, Reference: p.Reference,
		LineNos: p.LineNos, Skus: p.Skus, Names: p.Names, Quantities: p.Quantities, UnitPricesMinor: p.UnitPricesMinor,
		DeliveryID: p.DeliveryID, Template: p.Template, Recipient: p.Recipient, IdempotencyKey: p.IdempotencyKey, TemplateData: p.TemplateData,
		OwnerID: p.OwnerID, Test: p.Test,
	}
}

// isUniqueViolation reports whether err is PostgreSQL refusing a
// duplicate in constraint.
func isUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == constraint
}

// lookupKey takes the key's transaction-scoped lock and returns the
// response a live earlier use of the key in scope recorded. An expired
// record is removed so the key starts afresh.
func (s *Service) lookupKey(ctx context.Context, q *dbsqlc.Queries, scope, key string, hash []byte, now time.Time) ([]byte, bool, error) {
	locked, err := q.TryLockIdempotencyKey(ctx, dbsqlc.TryLockIdempotencyKeyParams{Scope: scope, Key: key})
	if err != nil {
		return nil, false, fmt.Errorf("lock idempotency key: %w", err)
	}
	if !locked {
		s.keyClashes.WithLabelValues("in_flight").Inc()
		return nil, false, ErrRequestInFlight
	}
	prior, found, expired, err := s.recorded(ctx, q, scope, key, hash, now)
	if err != nil || found || !expired {
		return prior, found, err
	}
	if err := q.DeleteIdempotencyKey(ctx, dbsqlc.DeleteIdempotencyKeyParams{Scope: scope, Key: key}); err != nil {
		return nil, false, fmt.Errorf("drop expired idempotency key: %w", err)
	}
	return nil, false, nil
}

// priorUse decides what an earlier use of an Idempotency-Key means for a
// request whose fingerprint is hash, at now: the key's record, made for
// the request whose fingerprint is priorHash, lives until expiresAt.
// While it lives, the same request replays its response (replay) and
// another is ErrKeyReused; from expiresAt on it is neither, and the key
// starts afresh, whatever the request.
func priorUse(expiresAt time.Time, priorHash, hash []byte, now time.Time) (replay bool, err error) {
	switch {
	case !expiresAt.After(now):
		return false, nil
	case !bytes.Equal(priorHash, hash):
		return false, ErrKeyReused
	}
	return true, nil
}

// rememberKey stores the response of the first use of key in scope.
func (s *Service) rememberKey(ctx context.Context, q *dbsqlc.Queries, scope, key string, hash, body []byte, now time.Time) error {
	if err := q.InsertIdempotencyKey(ctx, dbsqlc.InsertIdempotencyKeyParams{
		Scope: scope, Key: key, RequestHash: hash, ResponseBody: body, ExpiresAt: now.Add(s.keyTTL),
	}); err != nil {
		return fmt.Errorf("remember idempotency key: %w", err)
	}
	return nil
}

// Get returns an order with the current state of its notifications, for
// caller: an order of the other mode than caller's key is ErrNotFound.
func (s *Service) Get(ctx context.Context, id uuid.UUID, caller Caller) (Order, error) {
	q := dbsqlc.New(s.pool)
	row, err := getOrderFor(ctx, q, id, caller)
	if err != nil {
		return Order{}, err
	}
	items, err := q.ListOrderItems(ctx, id)
	if err != nil {
		return Order{}, fmt.Errorf("list items of order %s: %w", id, err)
	}
	deliveries, err := notify.ListByOrder(ctx, s.pool, id)
	if err != nil {
		return Order{}, err
	}
	shipments, err := q.ListShipments(ctx, id)
	if err != nil {
		return Order{}, fmt.Errorf("list shipments of order %s: %w", id, err)
	}
	o := Order{
		ID:            row.ID,
		Reference:     derefString(row.Reference),
		CustomerEmail: row.CustomerEmail,
		CustomerName:  row.CustomerName,
		Currency:      row.Currency,
		Total:         row.TotalMinor,
		CreatedAt:     row.CreatedAt.UTC(),
		Items:         make([]Item, len(items)),
		Locale:        derefString(row.Locale),
		Notifications: notificationsOf(deliveries),
		Shipments:     shipmentsOf(shipments),
		Test:          row.Test,
	}
	for i, it := range items {
		o.Items[i] = Item{
			SKU:       it.Sku,
			Name:      it.Name,
			Quantity:  it.Quantity,
			UnitPrice: it.UnitPriceMinor,
			LineTotal: it.UnitPriceMinor * int64(it.Quantity),
		}
	}
	return o, nil
}

func notificationsOf(ds []notify.Delivery) []Notification {
	out := make([]Notification, len(ds))
	for i, d := range ds {
		out[i] = Notification{ID: d.ID, Template: d.Template, Recipient: d.Recipient, IdempotencyKey: d.IdempotencyKey, Status: string(d.Status), SendAt: d.NotBefore,
			MayHaveBeenSent: d.MayHaveBeenSent()}
		if r := d.ProviderEvent; r != nil {
			out[i].ProviderEvent, out[i].ProviderEventAt = string(r.Kind), &r.At
		}
	}
	return out
}

// DeleteExpiredIdempotencyKeys deletes up to batch Idempotency-Key records
// past their window (the reconciler's clean-up).
func DeleteExpiredIdempotencyKeys(ctx context.Context, db *pgxpool.Pool, batch int) (int, error) {
	n, err := dbsqlc.New(db).DeleteExpiredIdempotencyKeys(ctx, int32(batch))
	if err != nil {
		return 0, fmt.Errorf("delete expired idempotency keys: %w", err)
	}
	return int(n), nil
}

// newAccessToken returns a fresh capability for one order: 32 random
// bytes, URL-safe.
func newAccessToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return AccessTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Authorize checks, in constant time, that token is the access token of
// order id: ErrNotFound for no such order, ErrTokenInvalid otherwise.
func (s *Service) Authorize(ctx context.Context, id uuid.UUID, token string) error {
	row, err := getOrder(ctx, dbsqlc.New(s.pool), id)
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(token))
	if len(row.AccessTokenHash) != len(sum) || subtle.ConstantTimeCompare(sum[:], row.AccessTokenHash) != 1 {
		return ErrTokenInvalid
	}
	return nil
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// DeleteOldTestOrders deletes up to batch test orders (docs/testmode.md)
// older than retention whose notifications are all settled and untouched
// as long, with their notifications and history (the reconciler's test
// retention, TEST_RETENTION). Live orders are never touched.
func DeleteOldTestOrders(ctx context.Context, db *pgxpool.Pool, retention time.Duration, batch int) (int, error) {
	n, err := dbsqlc.New(db).DeleteOldTestOrders(ctx, dbsqlc.DeleteOldTestOrdersParams{OlderThanSeconds: retention.Seconds(), Batch: int32(batch)})
	if err != nil {
		return 0, fmt.Errorf("delete old test orders: %w", err)
	}
	return int(n), nil
}
