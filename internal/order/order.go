// Package order records checkouts: the order, its lines and, in the same
// transaction, the intent to e-mail its confirmation.
package order

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// TemplateConfirmation is the e-mail every order gets once.
const TemplateConfirmation = "order-confirmation"

var (
	// ErrNotFound is returned when no order has the requested id.
	ErrNotFound = errors.New("order: not found")
	// ErrNotificationNotFound is returned when no notification has the
	// requested id.
	ErrNotificationNotFound = errors.New("order: notification not found")
	// ErrRequestInFlight is returned when another request with the same
	// Idempotency-Key is still being processed.
	ErrRequestInFlight = errors.New("order: a request with this idempotency key is still in flight")
	// ErrKeyReused is returned when an Idempotency-Key comes back with a
	// different request than the one it was first used for.
	ErrKeyReused = errors.New("order: idempotency key already used for a different request")
	// ErrTokenInvalid is returned when an access token is not the order's.
	ErrTokenInvalid = errors.New("order: the access token does not open this order")
)

// ReferenceTakenError refuses a checkout whose order number (Reference)
// is already another order's of the same owner. Nothing is written. A
// checkout retried with its Idempotency-Key is replayed instead, before
// its number is looked at.
type ReferenceTakenError struct {
	Reference string
	Order     uuid.UUID // the order that has it
}

func (e *ReferenceTakenError) Error() string {
	return fmt.Sprintf("order: the order number %q is already order %s's", e.Reference, e.Order)
}

// Caller is who places a checkout or triggers a notification, as the API
// authenticated them. Each caller's Idempotency-Keys are its own: the
// same key from another API key is another key, and never replays this
// one's response (with the order's access token in it).
type Caller struct {
	// Key is the id of the API key the request came with; uuid.Nil for an
	// anonymous caller, a storefront's browser in public mode, which the
	// public checkout's rules hold (PublicRules).
	Key uuid.UUID
	// Owner is the key's owner (apikey.Key.Owner): what the caller makes
	// is its owner's, which alone (an operator aside) may cancel it.
	// uuid.Nil for an anonymous caller: notify.PublicOwner.
	Owner uuid.UUID
	// Test: the key is a test key (apikey.ModeTest). Its orders are test
	// orders, and it sees no other: a live order is not there for it, as
	// a test order is not for a live key (docs/testmode.md). An anonymous
	// caller is live.
	Test bool
	// Client is the address the request came from as the API's rate
	// limiter names it (an IPv6 client by its /64, behind a trusted proxy
	// the address it forwarded for): the public checkout's cap per client
	// counts the recipients each one has mailed.
	Client string
}

// Anonymous reports whether c came without an API key.
func (c Caller) Anonymous() bool { return c.Key == uuid.Nil }

// scope is the namespace of c's Idempotency-Keys for operation op. The
// anonymous callers share op itself, the scope every key had before keys
// had owners, so that a storefront's retry across an upgrade still
// replays.
func (c Caller) scope(op string) string {
	if c.Anonymous() {
		return op
	}
	return op + " key:" + c.Key.String()
}

// AccessTokenPrefix starts every order access token.
const AccessTokenPrefix = "sekali_order_"

// Order is a recorded checkout as the API shows it.
type Order struct {
	ID uuid.UUID `json:"id"`
	// Reference is the shop's own order number, as the checkout gave it;
	// absent without one.
	Reference     string         `json:"reference,omitempty"`
	CustomerEmail string         `json:"customer_email"`
	CustomerName  string         `json:"customer_name"`
	Currency      string         `json:"currency"`
	Items         []Item         `json:"items"`
	Total         int64          `json:"total"`
	Locale        string         `json:"locale,omitempty"` // the customer's language, as given at checkout
	CreatedAt     time.Time      `json:"created_at"`
	Notifications []Notification `json:"notifications"`
	// Shipments are the order's shipments as the shop recorded them,
	// oldest first; absent before the first.
	Shipments []ShipmentRecord `json:"shipments,omitempty"`
	// AccessToken is the capability to read this order (GET
	// /v1/orders/{id} with Authorization: Bearer <token>), for a
	// storefront that shows the order to its customer. Only the checkout
	// that created the order answers with it; it is stored as a hash.
	AccessToken string `json:"access_token,omitempty"`
	// Test: placed with a test key; its notifications never reach a
	// provider (docs/testmode.md). Absent for a live order.
	Test bool `json:"test,omitempty"`
}

// Item is one line of an order. Amounts are integer minor units.
type Item struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Quantity  int32  `json:"quantity"`
	UnitPrice int64  `json:"unit_price"`
	LineTotal int64  `json:"line_total"`
}

// Notification is the state of one e-mail about the order.
type Notification struct {
	ID             uuid.UUID  `json:"id"`
	Template       string     `json:"template"`
	Recipient      string     `json:"recipient"` // to whom, as recorded (trimmed, lower case)
	IdempotencyKey string     `json:"idempotency_key"`
	Status         string     `json:"status"`
	SendAt         *time.Time `json:"send_at,omitempty"` // not sent before; absent: at once
	// MayHaveBeenSent: a provider may hold this e-mail although the status
	// does not say sent (an attempt was handed over and its outcome is
	// not known yet): it cannot be cancelled, and may yet turn out sent.
	MayHaveBeenSent bool `json:"may_have_been_sent,omitempty"`
	// ProviderEvent is what the provider last reported about the e-mail
	// after it took it — delivered, deferred, bounced or complained —
	// and ProviderEventAt when, by the provider's clock; absent before
	// any report. A bounced e-mail's status stays sent: it was sent.
	ProviderEvent   string     `json:"provider_event,omitempty"`
	ProviderEventAt *time.Time `json:"provider_event_at,omitempty"`
}

// ShipmentRecord is a shipment as recorded: what the shop said, when,
// and the e-mail it sent.
type ShipmentRecord struct {
	ID             uuid.UUID `json:"id"`
	Carrier        string    `json:"carrier"`
	TrackingNumber string    `json:"tracking_number"`
	ShippedAt      time.Time `json:"shipped_at"`
	// NotificationID is its order-shipped e-mail.
	NotificationID *uuid.UUID `json:"notification_id,omitempty"`
}

// ConflictError refuses a trigger whose business event (its idempotency
// key: template, order, event id, recipient) already has a notification
// with other data: nothing is recorded or changed, and the caller is
// told which notification holds the event, whichever key made it.
type ConflictError struct {
	Notification Notification
	// Fields are what differs: "data", "send_at".
	Fields []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("order: %s already has a notification with another %s", e.Notification.IdempotencyKey, strings.Join(e.Fields, " and "))
}

// confirmationData is the snapshot the order-confirmation template renders,
// frozen at checkout so that the e-mail shows the order as it was placed.
type confirmationData struct {
	OrderID      uuid.UUID `json:"order_id"`
	Reference    string    `json:"reference,omitempty"` // the shop's order number: the e-mail's, the short id without one
	CustomerName string    `json:"customer_name"`
	Currency     string    `json:"currency"`
	Items        []Item    `json:"items"`
	Total        int64     `json:"total"`
	PlacedAt     time.Time `json:"placed_at"`
}
