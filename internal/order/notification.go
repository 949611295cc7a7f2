package order

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// notifyScope names the generic trigger's Idempotency-Keys.
const notifyScope = "POST /v1/orders/{id}/notifications"

// maxEventIDLen bounds the caller's event id, which goes into the key
// (textrule.Token keeps it out of the key's separators).
const maxEventIDLen = 100

// Trigger asks for one e-mail of any template about an order: the
// no-code path for a template an adopter added to TEMPLATES_DIR.
type Trigger struct {
	Template string
	// Data is what the template renders, checked against its schema.json.
	Data json.RawMessage
	// EventID names an event that can happen more than once per order (a
	// second payment reminder); empty for an e-mail an order gets once.
	EventID string
	// Recipient overrides the order's customer; empty for the customer.
	Recipient string
	// SendAt is RFC 3339 with its offset: no worker sends it before, up
	// to SendAtHorizon ahead; empty, or a time past, sends it now.
	SendAt string `json:",omitzero"`
}

// DefaultSendAtHorizon is how far ahead a notification may be scheduled.
const DefaultSendAtHorizon = 30 * 24 * time.Hour

// Notify records the intent to send t's template about order orderID in
// one transaction, with the same guarantees as the built-in triggers,
// and queues it. Its idempotency key is <template>:<orderId>:<email>, or
// <template>:<orderId>:<eventId>:<email> with an EventID: the business
// event, whichever key triggers it. The same trigger again returns the
// same notification (created=false) and sends nothing; a trigger of an
// event that has a notification with other data (template data, send_at)
// is a *ConflictError, and changes nothing. The templates an endpoint of
// their own sends (dedicated) are refused. With an idempotencyKey, a
// repeat of the same request by the same caller replays the first answer
// (replayed=true), like the checkout.
func (s *Service) Notify(ctx context.Context, orderID uuid.UUID, t Trigger, caller Caller, idempotencyKey string) (n Notification, created, replayed bool, err error) {
	now := s.now().UTC().Truncate(time.Microsecond)
	sendAt, err := s.validateTrigger(&t, now)
	if err != nil {
		return Notification{}, false, false, err
	}
	var hash []byte
	if idempotencyKey != "" {
		fingerprint, _ := json.Marshal(struct {
			Order uuid.UUID
			Trigger
		}{orderID, t}) // cannot fail: every field is plain
		sum := sha256.Sum256(fingerprint)
		hash = sum[:]
	}
	var d notify.Delivery
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		if idempotencyKey != "" {
			prior, found, err := s.lookupKey(ctx, q, caller.scope(notifyScope), idempotencyKey, hash, now)
			if err != nil {
				return err
			}
			if found {
				var r rememberedNotification
				if err := json.Unmarshal(prior, &r); err != nil {
					return fmt.Errorf("decode remembered response: %w", err)
				}
				n, created, replayed = r.Notification, r.Created, true
				return nil
			}
		}
		o, err := getOrderFor(ctx, q, orderID, caller)
		if err != nil {
			return err
		}
		recipient := o.CustomerEmail
		if t.Recipient != "" {
			recipient = t.Recipient
			if err := checkRecipientMode(o.Test, "/recipient", recipient); err != nil {
				return err
			}
		}
		d, created, err = recordAbout(ctx, tx, o, caller, t.Template, t.EventID, recipient, t.Data, sendAt, now)
		if err != nil {
			return err
		}
		n = notificationsOf([]notify.Delivery{d})[0]
		// A retired one kept no data to compare: answered as it stands.
		if !created && !d.Retired {
			if differ := differences(d, t.Data, sendAt); len(differ) > 0 {
				return &ConflictError{Notification: n, Fields: differ}
			}
		}
		if idempotencyKey != "" {
			body, _ := json.Marshal(rememberedNotification{Notification: n, Created: created}) // plain fields
			return s.rememberKey(ctx, q, caller.scope(notifyScope), idempotencyKey, hash, body, now)
		}
		return nil
	})
	if err != nil {
		return Notification{}, false, false, err
	}
	if created && !replayed {
		s.enqueuer.EnqueueAfterCommit(ctx, []notify.Delivery{d})
	}
	return n, created, replayed, nil
}

// rememberedNotification is what an Idempotency-Key of the trigger keeps.
type rememberedNotification struct {
	Notification Notification `json:"notification"`
	Created      bool         `json:"created"`
}

// dedicated are the built-in templates an endpoint of their own sends,
// with the data it builds from the order, and what that endpoint is. The
// generic trigger refuses them, to every key: otherwise a key could send
// one with data of its own (another carrier, another tracking number),
// or take its idempotency key first, and the shop's own shipment or
// checkout would answer with that e-mail.
var dedicated = map[string]string{
	TemplateConfirmation: "POST /v1/orders (the checkout)",
	TemplateShipped:      "POST /v1/orders/{id}/shipments",
}

// validateTrigger checks t and puts it in canonical form: every problem,
// the schema's included, as one *ValidationError. It returns the send_at
// asked for, to the microsecond PostgreSQL keeps (zero: none; a time past
// sends at once).
func (s *Service) validateTrigger(t *Trigger, now time.Time) (time.Time, error) {
	var verr ValidationError
	var sendAt time.Time
	if t.SendAt != "" {
		at, err := time.Parse(time.RFC3339Nano, t.SendAt)
		switch horizon := cmp.Or(s.SendAtHorizon, DefaultSendAtHorizon); {
		case err != nil:
			verr.add("/send_at", "must be a time in RFC 3339 with its offset, e.g. 2026-12-02T09:00:00+07:00")
		case at.After(now.Add(horizon)):
			verr.add("/send_at", "is more than %s ahead; the furthest is %s", horizon, now.Add(horizon).Format(time.RFC3339))
		default:
			sendAt = at.UTC().Truncate(time.Microsecond)
		}
		if err == nil {
			t.SendAt = at.UTC().Format(time.RFC3339Nano) // one spelling of the instant, whatever its offset
		}
	}
	switch {
	case t.Template == "":
		verr.add("/template", "must name a template (GET /v1/templates lists them)")
	case dedicated[t.Template] != "":
		verr.add("/template", "is sent by %s, from the order's own data; the generic trigger cannot send it", dedicated[t.Template])
	case s.templates == nil || !s.templates.Has(t.Template):
		verr.add("/template", "is not a template this service knows (GET /v1/templates lists them)")
	case len(bytes.TrimSpace(t.Data)) == 0:
		verr.add("/data", "is required: the data the template renders, as its schema.json describes")
	default:
		var derr *mailtemplate.DataError
		switch err := s.templates.Validate(t.Template, t.Data); {
		case errors.As(err, &derr):
			for _, f := range derr.Fields {
				verr.add("/data"+f.Pointer, "%s", f.Detail)
			}
		case err != nil:
			return time.Time{}, err
		}
	}
	if t.EventID != "" && !textrule.Token(t.EventID, maxEventIDLen) {
		verr.add("/event_id", "must be 1 to %d characters of letters, digits, '.', '_' and '-'", maxEventIDLen)
	}
	if t.Recipient != "" {
		r, err := mail.NormalizeAddress(t.Recipient)
		if err != nil {
			verr.add("/recipient", "%v", err)
		}
		t.Recipient = r
	}
	if len(verr.Fields) > 0 {
		return time.Time{}, &verr
	}
	if data, err := canonicalJSON(t.Data); err == nil {
		t.Data = data
	}
	return sendAt, nil
}

// differences names what of a trigger differs from existing, the
// notification recorded under its idempotency key: its data (the same
// JSON value, however spelt: numbers by value) and when it is sent
// (sendAt: the trigger's, zero for none). Nothing: the same trigger
// again. A send_at at or before existing's creation asks for "at once",
// as existing was recorded without one.
func differences(existing notify.Delivery, data json.RawMessage, sendAt time.Time) []string {
	var out []string
	if !sameJSON(existing.Data, data) {
		out = append(out, "data")
	}
	same := sendAt.IsZero() || !sendAt.After(existing.CreatedAt)
	if existing.NotBefore != nil {
		same = sendAt.Equal(*existing.NotBefore)
	}
	if !same {
		out = append(out, "send_at")
	}
	return out
}

// sameJSON reports whether a and b are the same JSON value: objects with
// the same members in any order, numbers equal by value (1.0 is 1, 1e3 is
// 1000, as PostgreSQL's jsonb compares and keeps them). Either invalid is
// not the same.
func sameJSON(a, b []byte) bool {
	va, errA := decodeNumbers(a)
	vb, errB := decodeNumbers(b)
	return errA == nil && errB == nil && equalJSON(va, vb)
}

// decodeNumbers decodes data with its numbers as json.Number.
func decodeNumbers(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// equalJSON compares two values decodeNumbers made.
func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !equalJSON(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		return ok && slices.EqualFunc(a, b, equalJSON)
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		da, okA := decimalOf(string(a))
		db, okB := decimalOf(string(b))
		if !okA || !okB {
			return a == b
		}
		return da == db
	default: // string, bool, nil
		return a == b
	}
}

// decimal is a number by value: its sign, its significant digits
// without leading or trailing zeros, and where the decimal point goes
// (the value is 0.<digits> × 10^point). Zero is the zero decimal.
type decimal struct {
	neg    bool
	digits string
	point  int64
}

// decimalOf reads a JSON number (valid, as the decoder left it) by value,
// without ever expanding its exponent: 1e999999999 costs what its
// characters do. ok is false for an exponent past int64.
func decimalOf(n string) (d decimal, ok bool) {
	mantissa, exp, _ := strings.Cut(strings.ToLower(n), "e")
	var e int64
	if exp != "" {
		var err error
		if e, err = strconv.ParseInt(exp, 10, 64); err != nil {
			return decimal{}, false
		}
	}
	d.neg = strings.HasPrefix(mantissa, "-")
	whole, frac, _ := strings.Cut(strings.TrimPrefix(mantissa, "-"), ".")
	digits := whole + frac
	point := int64(len(whole))
	for len(digits) > 0 && digits[0] == '0' {
		digits, point = digits[1:], point-1
	}
	d.digits = strings.TrimRight(digits, "0")
	if d.digits == "" {
		return decimal{}, true
	}
	if (e > 0 && point > math.MaxInt64-e) || (e < 0 && point < math.MinInt64-e) {
		return decimal{}, false
	}
	d.point = point + e
	return d, true
}

// canonicalJSON is data, valid JSON, in one spelling: compact, object
// keys sorted, strings escaped one way, numbers as written. A client that
// re-serializes its request on a retry (another key order, other spacing
// or escapes) sends the same trigger, as a checkout's fingerprint is of
// the validated checkout; stored as JSONB, the data reads back the same
// either way.
func canonicalJSON(data []byte) (json.RawMessage, error) {
	v, err := decodeNumbers(data)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// getOrderFor reads an order row for caller: ErrNotFound when there is
// none, and when it is of the other mode than caller's key (a test key
// sees only test orders, a live key only live ones). An anonymous
// caller (an order's access token, which proves the order) is not held
// to a mode.
func getOrderFor(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, caller Caller) (dbsqlc.Order, error) {
	o, err := getOrder(ctx, q, id)
	if err != nil {
		return dbsqlc.Order{}, err
	}
	if !caller.Anonymous() && o.Test != caller.Test {
		return dbsqlc.Order{}, ErrNotFound
	}
	return o, nil
}

// checkRecipientMode refuses a live order's notification to a test
// mode's magic address (mail.TestDomain): no real provider can deliver
// it, and only test keys' notifications, which never reach one, may go
// there.
func checkRecipientMode(test bool, pointer, recipient string) error {
	if test || !mail.IsTestAddress(recipient) {
		return nil
	}
	var verr ValidationError
	verr.add(pointer, "%s is test mode's domain: only a test key's orders may send to it (docs/testmode.md)", mail.TestDomain)
	return &verr
}

// getOrder reads an order row, ErrNotFound when there is none.
func getOrder(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID) (dbsqlc.Order, error) {
	o, err := q.GetOrder(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return dbsqlc.Order{}, ErrNotFound
	}
	if err != nil {
		return dbsqlc.Order{}, fmt.Errorf("get order %s: %w", id, err)
	}
	return o, nil
}

// recordAbout records, in tx, the intent to send template about order o
// to recipient, in the order's language: the one path every trigger of
// an order's e-mail takes after its own checks (shipments, the generic
// trigger), owned by caller's owner. The caller enqueues it after the
// commit when created.
func recordAbout(ctx context.Context, tx pgx.Tx, o dbsqlc.Order, caller Caller, template, eventID, recipient string, data any, sendAt, now time.Time) (notify.Delivery, bool, error) {
	return notify.Record(ctx, tx, notify.Intent{
		Owner:     caller.Owner,
		OrderID:   o.ID,
		Template:  template,
		Recipient: recipient,
		Data:      data,
		Locale:    derefString(o.Locale),
		EventID:   eventID,
		NotBefore: sendAt,
		Test:      o.Test,
	}, now)
}

// actor is how the history names what caller does.
func (c Caller) actor() string {
	if c.Anonymous() {
		return "api"
	}
	return "api:key:" + c.Key.String()
}

// canceller is caller as notify.Cancel knows it: the owner of its key.
func (c Caller) canceller() notify.Canceller {
	return notify.Canceller{Actor: c.actor(), Owner: c.Owner, Test: c.Test}
}

// CancelNotification calls off a pending notification for caller. One
// already cancelled is answered as it is; one a worker has claimed (or
// that is settled) is notify.ErrWrongState, and one a provider may hold
// notify.ErrMayHaveBeenSent, each with the notification as it stands; a
// missing one, or one caller may not cancel (another owner's, on an order
// another owner placed), ErrNotificationNotFound.
func (s *Service) CancelNotification(ctx context.Context, id uuid.UUID, caller Caller) (Notification, error) {
	d, err := notify.Cancel(ctx, s.pool, id, caller.canceller(), "")
	if errors.Is(err, notify.ErrNotFound) {
		return Notification{}, ErrNotificationNotFound
	}
	if d.ID == uuid.Nil {
		return Notification{}, err
	}
	return notificationsOf([]notify.Delivery{d})[0], err
}

// GetNotification reads one notification for caller: the same ones it
// may cancel (its owner made it, or placed its order), whatever their
// status; any other, or a missing one, is ErrNotificationNotFound.
func (s *Service) GetNotification(ctx context.Context, id uuid.UUID, caller Caller) (Notification, error) {
	d, err := notify.GetFor(ctx, s.pool, id, caller.canceller())
	if errors.Is(err, notify.ErrNotFound) {
		return Notification{}, ErrNotificationNotFound
	}
	if err != nil {
		return Notification{}, err
	}
	return notificationsOf([]notify.Delivery{d})[0], nil
}

// CancelTemplate calls off every pending notification of template for
// an order that caller may cancel (its owner made it, or placed the
// order), in one statement, and says where each of those stands:
// cancelled (now or before), or not (claimed, sent, may have been sent,
// ...). Notifications caller may not cancel are in neither list: for
// this caller they are not there.
func (s *Service) CancelTemplate(ctx context.Context, orderID uuid.UUID, template string, caller Caller) (cancelled, notCancelled []Notification, err error) {
	if template == "" {
		var verr ValidationError
		verr.add("/template", "must name the template whose pending notifications to cancel")
		return nil, nil, &verr
	}
	if _, err := getOrderFor(ctx, dbsqlc.New(s.pool), orderID, caller); err != nil {
		return nil, nil, err
	}
	c := caller.canceller()
	if _, err := notify.CancelTemplate(ctx, s.pool, orderID, template, c); err != nil {
		return nil, nil, err
	}
	ds, err := notify.ListOfTemplateFor(ctx, s.pool, orderID, template, c)
	if err != nil {
		return nil, nil, err
	}
	cancelled, notCancelled = []Notification{}, []Notification{}
	for _, n := range notificationsOf(ds) {
		switch {
		case n.Status == string(notify.StatusCancelled):
			cancelled = append(cancelled, n)
		default:
			notCancelled = append(notCancelled, n)
		}
	}
	return cancelled, notCancelled, nil
}
