package sekali

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/apiclient"
)

// EventType is what a webhook event says happened to a notification.
type EventType = apiclient.WebhookEventType

// The event types (WebhookEventType in api/openapi.yaml; docs/webhooks.md
// says when each is sent).
const (
	EventSent       EventType = "notification.sent"       // the provider accepted the message
	EventFailed     EventType = "notification.failed"     // refused for good, or too old; Reason says why
	EventHeld       EventType = "notification.held"       // waiting for an operator; Reason says why
	EventSuppressed EventType = "notification.suppressed" // the recipient is on the suppression list
	EventCancelled  EventType = "notification.cancelled"  // called off while pending
	EventDelivered  EventType = "notification.delivered"  // the provider reports it delivered
	EventBounced    EventType = "notification.bounced"    // the provider reports a bounce; Reason has its detail
	EventComplained EventType = "notification.complained" // the recipient marked it as spam
)

// EventData is the notification an event is about, as it stands after
// the event.
type EventData = apiclient.WebhookEventData

// Event is one webhook sekali posted, verified.
type Event struct {
	// ID is the webhook-id: the same on every attempt at this event, so a
	// receiver that stores it when it has handled the event drops a
	// repeat (events come at least once).
	ID   string
	Type EventType
	// Timestamp is when it happened: events of one notification may come
	// out of order after retries, and this orders them.
	Timestamp time.Time
	Data      EventData
}

var (
	// ErrWebhookSignature: the request is not signed with the secret (or
	// any of the secrets) the verifier holds, or its webhook headers are
	// missing or malformed.
	ErrWebhookSignature = errors.New("sekali: webhook signature does not verify")
	// ErrWebhookTimestamp: the signature is good, but its webhook-timestamp
	// is further from now than the verifier's Tolerance (a replay, or a
	// clock far off).
	ErrWebhookTimestamp = errors.New("sekali: webhook timestamp outside the tolerance")
)

// DefaultTolerance is how far a webhook's timestamp may be from the
// receiver's clock, either way, unless WebhookVerifier.Tolerance says
// otherwise: Standard Webhooks' 5 minutes.
const DefaultTolerance = 5 * time.Minute

// WebhookVerifier checks the Standard Webhooks signature of the events
// sekali posts to an endpoint: webhook-signature holds "v1,<base64>"
// HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>", keyed with
// the endpoint's secret (whsec_…), two of them while a rotated secret's
// predecessor still signs (24 hours). The request verifies when any
// signature is one of any secret the verifier holds.
type WebhookVerifier struct {
	keys [][]byte
	// Tolerance is how far the timestamp may be from now (default
	// DefaultTolerance).
	Tolerance time.Duration
}

// NewWebhookVerifier returns a verifier of the endpoint's secrets, as
// sekali showed them ("whsec_" and base64; the prefix may be left out).
// Several: while the receiver moves from one secret to the next.
func NewWebhookVerifier(secrets ...string) (*WebhookVerifier, error) {
	if len(secrets) == 0 {
		return nil, errors.New("sekali: a webhook verifier needs the endpoint's secret")
	}
	v := &WebhookVerifier{Tolerance: DefaultTolerance}
	for i, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(key) == 0 {
			return nil, fmt.Errorf("sekali: webhook secret %d is not whsec_ and base64", i+1)
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

// Verify checks the request's webhook headers against body (the request's
// body, read whole and unchanged) and returns its event. A request that
// does not verify is ErrWebhookSignature or ErrWebhookTimestamp; answer it
// 401 and take nothing from it.
func (v *WebhookVerifier) Verify(h http.Header, body []byte) (*Event, error) {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return nil, fmt.Errorf("%w: webhook-id, webhook-timestamp and webhook-signature are all needed", ErrWebhookSignature)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrWebhookSignature, ts)
	}
	if !v.signed(id, ts, body, sigs) {
		return nil, ErrWebhookSignature
	}
	tolerance := v.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if d := time.Since(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return nil, fmt.Errorf("%w: signed %s from now", ErrWebhookTimestamp, d.Round(time.Second))
	}
	var e apiclient.WebhookEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("sekali: webhook %s: decode the event: %w", id, err)
	}
	return &Event{ID: id, Type: e.Type, Timestamp: e.Timestamp, Data: e.Data}, nil
}

// signed reports whether one of the space-separated "v1,<base64>"
// signatures is one of the verifier's keys. Other versions are skipped,
// as the specification says.
func (v *WebhookVerifier) signed(id, ts string, body []byte, header string) bool {
	want := make([][]byte, len(v.keys))
	for i, key := range v.keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want[i] = mac.Sum(nil)
	}
	for _, s := range strings.Fields(header) {
		version, b64, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		for _, w := range want {
			if hmac.Equal(got, w) {
				return true
			}
		}
	}
	return false
}
