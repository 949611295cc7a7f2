// Package sekali is the Go client of sekali for a shop's backend: the
// calls of its HTTP API (api/openapi.yaml) and the check of the webhooks
// it posts to the shop (Standard Webhooks).
//
// The types and the requests are generated from the API's OpenAPI
// document (internal/apiclient, by oapi-codegen); this package adds what
// a generator does not know:
//
//   - an Idempotency-Key per call that the call's own retries reuse:
//     PlaceOrder makes a random one (UUID v4) unless given one
//     (WithIdempotencyKey, e.g. the shop's own order id), and retries
//     what may pass on (no answer, 5xx, 408, 429 and 503 with a
//     Retry-After it may wait for, 409 idempotency-key-in-flight) under
//     that same key, so a retried checkout never makes a second order;
//   - every application/problem+json answer as a *Problem, which errors.As
//     finds and errors.Is compares with a ProblemType
//     (errors.Is(err, sekali.ProblemValidation));
//   - the API key (WithAPIKey) and an order's access token (WithOrderToken)
//     as Authorization;
//   - WebhookVerifier, which checks a webhook's signature and timestamp and
//     decodes its event.
//
// docs/client.md shows it in use, with the code of Example
// (shopBackend), which go test runs against the real API.
package sekali

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apiclient"
)

// The API's types, as the document defines them.
type (
	// Checkout is what PlaceOrder records: the customer, the currency and
	// the lines, amounts in the currency's minor unit.
	Checkout = apiclient.Checkout
	// CheckoutItem is one line of a Checkout.
	CheckoutItem = apiclient.CheckoutItem
	// Order is a recorded checkout with its notifications; AccessToken is
	// set only in PlaceOrder's answer (and its replays).
	Order = apiclient.Order
	// Item is one line of an Order, with its total.
	Item = apiclient.Item
	// Notification is one e-mail about an order and where it stands.
	Notification = apiclient.Notification
	// DeliveryStatus is where a notification stands: StatusPending, ...
	DeliveryStatus = apiclient.DeliveryStatus
	// ProviderEvent is what the mail provider last reported about a
	// notification's e-mail after it took it (Notification's
	// ProviderEvent, at ProviderEventAt): ProviderBounced, ... A bounced
	// notification's status stays StatusSent.
	ProviderEvent = apiclient.ProviderEvent
	// Shipment is what RecordShipment records.
	Shipment = apiclient.Shipment
	// ShipmentRecord is a shipment as recorded (Order.Shipments).
	ShipmentRecord = apiclient.ShipmentRecord
	// Trigger is what Notify sends: a template, its data, and optionally an
	// event id, another recipient and when to send it (SendAt).
	Trigger = apiclient.NotificationTrigger
	// Cancellation is where each of a template's notifications for an
	// order stands after CancelNotifications.
	Cancellation = apiclient.Cancellation
	// FieldError names one invalid part of a request by its JSON pointer.
	FieldError = apiclient.FieldError
)

// The statuses of a notification (DeliveryStatus in the document).
const (
	StatusPending    DeliveryStatus = "pending"
	StatusSending    DeliveryStatus = "sending"
	StatusSent       DeliveryStatus = "sent"
	StatusFailed     DeliveryStatus = "failed"
	StatusHeld       DeliveryStatus = "held"
	StatusSuppressed DeliveryStatus = "suppressed"
	StatusCancelled  DeliveryStatus = "cancelled"
)

// What a provider reports about an e-mail it took (ProviderEvent in the
// document); "" before any report.
const (
	ProviderDelivered  ProviderEvent = "delivered"  // the receiving server took it
	ProviderDeferred   ProviderEvent = "deferred"   // a temporary failure: the provider keeps trying
	ProviderBounced    ProviderEvent = "bounced"    // a permanent failure: the address is dead
	ProviderComplained ProviderEvent = "complained" // the recipient marked it as spam
)

// Client calls the API. It is safe for concurrent use.
type Client struct {
	api         *apiclient.Client
	httpClient  *http.Client
	apiKey      string
	attempts    int
	maxWait     time.Duration
	backoffBase time.Duration
}

// An Option configures a Client.
type Option func(*Client)

// WithAPIKey authenticates every call with the shop backend's API key
// (sekali_key_…), whose scopes say what it may do.
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithHTTPClient sends the requests through hc (default: a client with a
// 30 s timeout per attempt).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.httpClient = hc } }

// WithRetry sets how many times a call is tried in all (default 4; 1
// retries nothing) and the longest Retry-After it waits for (default
// 10 s): an answer asking for longer is returned as its *Problem, with
// RetryAfter, for the caller to decide. Between other attempts it waits
// 200 ms, then 400 ms, ... up to 5 s, with jitter. A call's context ends
// its retries too.
func WithRetry(attempts int, maxWait time.Duration) Option {
	return func(c *Client) { c.attempts, c.maxWait = max(attempts, 1), max(maxWait, 0) }
}

// NewClient returns a Client of the API at baseURL (e.g.
// https://sekali.shop.example).
func NewClient(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("sekali: base URL %q is not an absolute http or https URL", baseURL)
	}
	c := &Client{attempts: 4, maxWait: 10 * time.Second, backoffBase: 200 * time.Millisecond}
	for _, o := range opts {
		o(c)
	}
	if c.httpClient == nil {
		c.httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	c.api, err = apiclient.NewClient(baseURL, apiclient.WithHTTPClient(c.httpClient))
	if err != nil {
		return nil, fmt.Errorf("sekali: %w", err)
	}
	return c, nil
}

// A CallOption configures one call.
type CallOption func(*call)

type call struct {
	idempotencyKey string
	orderToken     string
	requestID      string
}

// WithIdempotencyKey is the call's Idempotency-Key, for PlaceOrder and
// Notify (the other calls ignore it): the shop's own id of what it asks,
// such as its order id, so that asking again, even from another process
// or after a restart, answers with what the first time made. 1 to 255
// visible ASCII characters without " or \. Without it each call makes a
// random one, which its own retries reuse.
func WithIdempotencyKey(key string) CallOption { return func(c *call) { c.idempotencyKey = key } }

// WithOrderToken authenticates the call with an order's access token
// (sekali_order_…, Order.AccessToken of its checkout) instead of the API
// key: it reads that one order (GetOrder), as a storefront does.
func WithOrderToken(token string) CallOption { return func(c *call) { c.orderToken = token } }

// WithRequestID sends the call's X-Request-Id (1 to 64 of [A-Za-z0-9._-]),
// which the API's log line and a Problem's RequestID carry.
func WithRequestID(id string) CallOption { return func(c *call) { c.requestID = id } }

// callOf is the call opts make. A keyed one (PlaceOrder, Notify) carries
// an Idempotency-Key, the caller's or a random one its retries reuse;
// the others carry none.
func callOf(opts []CallOption, keyed bool) call {
	var c call
	for _, o := range opts {
		o(&c)
	}
	switch {
	case !keyed:
		c.idempotencyKey = ""
	case c.idempotencyKey == "":
		c.idempotencyKey = uuid.NewString()
	}
	return c
}

// PlaceOrder records a checkout and returns the order, with its access
// token and its confirmation. Its retries reuse one Idempotency-Key (the
// caller's, or a random one), so the order is made once: a repeat answers
// with the first order, the same in every field.
func (c *Client) PlaceOrder(ctx context.Context, checkout Checkout, opts ...CallOption) (*Order, error) {
	return request[Order](ctx, c, "place order", callOf(opts, true), func(ctx context.Context, ed apiclient.RequestEditorFn) (*http.Response, error) {
		return c.api.CreateOrder(ctx, nil, checkout, ed)
	}, http.StatusCreated)
}

// GetOrder returns the order with the current status of its
// notifications, read with the API key (scope orders:read) or, with
// WithOrderToken, with the order's own access token.
func (c *Client) GetOrder(ctx context.Context, id uuid.UUID, opts ...CallOption) (*Order, error) {
	return request[Order](ctx, c, "get order", callOf(opts, false), func(ctx context.Context, ed apiclient.RequestEditorFn) (*http.Response, error) {
		return c.api.GetOrder(ctx, id, nil, ed)
	}, http.StatusOK)
}

// RecordShipment records a shipment of the order and returns its
// order-shipped e-mail. Each shipment (carrier and tracking number) is
// its own e-mail, a second parcel another; the same shipment again
// returns the notification recorded the first time.
func (c *Client) RecordShipment(ctx context.Context, orderID uuid.UUID, s Shipment, opts ...CallOption) (*Notification, error) {
	return request[Notification](ctx, c, "record shipment", callOf(opts, false), func(ctx context.Context, ed apiclient.RequestEditorFn) (*http.Response, error) {
		return c.api.CreateShipment(ctx, orderID, nil, s, ed)
	}, http.StatusCreated, http.StatusOK)
}

// Notify sends a template about the order, once per event (the API keeps
// one notification per template, order, event id and recipient), now or
// at t.SendAt; until then CancelNotification or CancelNotifications stops
// it. An event that has a notification with other data (or another
// SendAt), whichever key made it, is a *Problem ProblemNotificationConflict
// whose Notification is that one. Its retries reuse one Idempotency-Key,
// as PlaceOrder's do.
func (c *Client) Notify(ctx context.Context, orderID uuid.UUID, t Trigger, opts ...CallOption) (*Notification, error) {
	return request[Notification](ctx, c, "notify", callOf(opts, true), func(ctx context.Context, ed apiclient.RequestEditorFn) (*http.Response, error) {
		return c.api.CreateNotification(ctx, orderID, nil, t, ed)
	}, http.StatusCreated, http.StatusOK)
}

// GetNotification returns one notification as it stands now (its
// status, what the provider last reported, its recipient), read with an
// API key of scope orders:read whose owner made it or placed its order:
// a webhook event's Data.NotificationID, say, read again later.
func (c *Client) GetNotification(ctx context.Context, id uuid.UUID, opts ...CallOption) (*Notification, error) {
	return request[Notification](ctx, c, "get notification", callOf(opts, false), func(ctx context.Context, ed apiclient.RequestEditorFn) (*http.Response, error) {
		return c.api.GetNotification(ctx, id, nil, ed)
	}, http.StatusOK)
}

// CancelNotification cancels one pending notification and returns it,
// cancelled (again: the same). Too late is a *Problem: ProblemWrongState
// once a worker has claimed it, ProblemMayHaveBeenSent when a provider may
// already have it; its Notification says where it stands.
func (c *Client) CancelNotification(ctx context.Context, id uuid.UUID, opts ...CallOption) (*Notification, error) {
	return request[Notification](ctx, c, "cancel notification", callOf(opts, false), func(ctx context.Context, ed apiclient.RequestEditorFn) (*http.Response, error) {
		return c.api.CancelNotification(ctx, id, nil, ed)
	}, http.StatusOK)
}

// CancelNotifications cancels every pending notification of the template
// for the order (a reminder, once the order is paid) and says where each
// of them stands.
func (c *Client) CancelNotifications(ctx context.Context, orderID uuid.UUID, template string, opts ...CallOption) (*Cancellation, error) {
	return request[Cancellation](ctx, c, "cancel notifications", callOf(opts, false), func(ctx context.Context, ed apiclient.RequestEditorFn) (*http.Response, error) {
		return c.api.CancelOrderNotifications(ctx, orderID, nil, apiclient.CancelOrderNotificationsJSONRequestBody{Template: template}, ed)
	}, http.StatusOK)
}

// request is one API call's answer, decoded (c.do: send until an answer
// with one of the ok statuses), or why there is none.
func request[T any](ctx context.Context, c *Client, what string, cl call, send func(context.Context, apiclient.RequestEditorFn) (*http.Response, error), ok ...int) (*T, error) {
	var v T
	if err := c.do(ctx, what, cl, &v, send, ok...); err != nil {
		return nil, err
	}
	return &v, nil
}

// maxAnswer bounds what is read of an answer: the largest order the API
// makes (100 lines of 200-character names) is well under it.
const maxAnswer = 4 << 20

// do sends a request (send makes a new one each attempt, with the
// call's headers from ed) until an answer with one of the ok statuses,
// decoded into out, or an answer or failure not worth another attempt.
func (c *Client) do(ctx context.Context, what string, cl call, out any, send func(context.Context, apiclient.RequestEditorFn) (*http.Response, error), ok ...int) error {
	ed := c.editor(cl)
	for attempt := 1; ; attempt++ {
		err := c.attempt(ctx, send, ed, out, ok)
		if err == nil {
			return nil
		}
		wait, again := c.retry(err, attempt)
		if !again {
			var p *Problem
			if errors.As(err, &p) {
				return p
			}
			return fmt.Errorf("sekali: %s: %w", what, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("sekali: %s: %w (after %d attempts, the last: %w)", what, ctx.Err(), attempt, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sekali: %s: %w (after %d attempts, the last: %w)", what, ctx.Err(), attempt, err)
		case <-t.C:
		}
	}
}

// attempt sends one request and reads its answer: nil and out filled for
// an ok status, a *Problem for another, or the failure to get an answer.
func (c *Client) attempt(ctx context.Context, send func(context.Context, apiclient.RequestEditorFn) (*http.Response, error), ed apiclient.RequestEditorFn, out any, ok []int) error {
	res, err := send(ctx, ed)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("read the answer (%d): %w", res.StatusCode, err)
	}
	for _, s := range ok {
		if res.StatusCode == s {
			if err := json.Unmarshal(body, out); err != nil {
				return &decodeError{status: res.StatusCode, err: err}
			}
			return nil
		}
	}
	return problemOf(res, body)
}

// decodeError is an ok answer whose body is not what the document says:
// another attempt would read the same.
type decodeError struct {
	status int
	err    error
}

func (e *decodeError) Error() string {
	return fmt.Sprintf("decode the %d answer: %v", e.status, e.err)
}

func (e *decodeError) Unwrap() error { return e.err }

// retry decides whether the outcome of attempt number n is worth
// another, and after how long. A request the API may have taken is tried
// again only because every call is idempotent: PlaceOrder and Notify
// under their Idempotency-Key, the others by what they do (a shipment is
// recorded once, a cancel of a cancelled notification answers the same).
func (c *Client) retry(err error, n int) (time.Duration, bool) {
	if n >= c.attempts {
		return 0, false
	}
	var p *Problem
	var d *decodeError
	switch {
	case errors.As(err, &d), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return 0, false
	case !errors.As(err, &p):
		return c.backoff(n), true // no answer: the request may or may not have been taken
	case p.Status == http.StatusTooManyRequests,
		p.Status == http.StatusServiceUnavailable && p.RetryAfter > 0:
		// Over a budget, or overloaded: only as long as it asks, when that is not too long.
		return p.RetryAfter, p.RetryAfter > 0 && p.RetryAfter <= c.maxWait
	case p.Type == ProblemIdempotencyKeyInFlight, p.Status == http.StatusRequestTimeout, p.Status >= 500:
		return c.backoff(n), true
	}
	return 0, false
}

// backoff is the wait after failed attempt n: 200 ms doubling to 5 s, a
// random half of it added.
func (c *Client) backoff(n int) time.Duration {
	d := min(c.backoffBase<<min(n-1, 10), 5*time.Second)
	return d + rand.N(d/2+1)
}

// editor sets the call's headers on every attempt's request: the same
// Idempotency-Key on each.
func (c *Client) editor(cl call) apiclient.RequestEditorFn {
	token := c.apiKey
	if cl.orderToken != "" {
		token = cl.orderToken
	}
	return func(_ context.Context, req *http.Request) error {
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if cl.idempotencyKey != "" {
			req.Header.Set("Idempotency-Key", cl.idempotencyKey)
		}
		if cl.requestID != "" {
			req.Header.Set("X-Request-Id", cl.requestID)
		}
		req.Header.Set("User-Agent", "sekali-go")
		return nil
	}
}
