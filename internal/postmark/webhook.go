package postmark

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// WebhookVerifier checks Postmark's webhooks. Postmark signs nothing: a
// webhook is authenticated by the HTTP Basic credentials configured with
// it (HttpAuth), and a replay is an event seen before (the caller
// dedupes by Feedback.EventID, which is the same for the same event).
type WebhookVerifier struct {
	user, password [32]byte // SHA-256 of each, compared in constant time
}

// NewWebhookVerifier returns a verifier for the credentials configured in
// the webhook (POSTMARK_WEBHOOK_USER, POSTMARK_WEBHOOK_PASSWORD).
func NewWebhookVerifier(user, password string) (*WebhookVerifier, error) {
	var errs []error
	if user == "" || strings.Contains(user, ":") {
		errs = append(errs, errors.New("POSTMARK_WEBHOOK_USER must be set and hold no colon"))
	}
	if len(password) < 16 {
		errs = append(errs, errors.New("POSTMARK_WEBHOOK_PASSWORD must have at least 16 characters"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &WebhookVerifier{user: sha256.Sum256([]byte(user)), password: sha256.Sum256([]byte(password))}, nil
}

// Verify checks a webhook request's credentials and returns its events
// about delivery: Delivery, Bounce and SpamComplaint. Other record types
// (Open, Click, SubscriptionChange) give no Feedback and no error. now
// is unused: Postmark's events carry no signed time.
func (v *WebhookVerifier) Verify(header http.Header, body []byte, _ time.Time) ([]mail.Feedback, error) {
	user, password, ok := (&http.Request{Header: header}).BasicAuth()
	if !ok {
		return nil, mail.ErrBadSignature
	}
	u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	if subtle.ConstantTimeCompare(u[:], v.user[:])&subtle.ConstantTimeCompare(p[:], v.password[:]) != 1 {
		return nil, mail.ErrBadSignature
	}
	if err := httpprovider.CheckWebhookBody(body); err != nil {
		return nil, fmt.Errorf("%w: %w", mail.ErrMalformed, err)
	}
	return feedback(body)
}

// event is a Postmark webhook body
// (https://postmarkapp.com/developer/webhooks/webhooks-overview).
type event struct {
	RecordType  string            `json:"RecordType"`
	ID          json.Number       `json:"ID"` // bounces and complaints; may exceed 2^53
	Type        string            `json:"Type"`
	MessageID   string            `json:"MessageID"`
	Recipient   string            `json:"Recipient"` // Delivery
	Email       string            `json:"Email"`     // Bounce, SpamComplaint
	DeliveredAt string            `json:"DeliveredAt"`
	BouncedAt   string            `json:"BouncedAt"`
	Description string            `json:"Description"`
	Details     string            `json:"Details"`
	Inactive    bool              `json:"Inactive"`
	Metadata    map[string]string `json:"Metadata"`
}

func feedback(body []byte) ([]mail.Feedback, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var e event
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("%w: %w", mail.ErrMalformed, err)
	}
	f := mail.Feedback{Provider: "postmark", ProviderMessageID: e.MessageID, KeyHash: e.Metadata[MetadataKey]}
	var at string
	switch e.RecordType {
	case "Delivery":
		f.Kind, at, f.Detail = mail.FeedbackDelivered, e.DeliveredAt, e.Details
		f.Recipient, _ = mail.NormalizeAddress(e.Recipient)
		// A delivery has no id of its own; it is one per message and
		// recipient.
		f.EventID = "Delivery:" + e.MessageID + ":" + f.Recipient
		if e.Recipient == "" {
			return nil, fmt.Errorf("%w: Delivery without Recipient", mail.ErrMalformed)
		}
	case "Bounce", "SpamComplaint":
		if e.ID == "" {
			return nil, fmt.Errorf("%w: %s without ID", mail.ErrMalformed, e.RecordType)
		}
		f.EventID = e.RecordType + ":" + e.ID.String()
		at = e.BouncedAt
		f.Recipient, _ = mail.NormalizeAddress(e.Email)
		f.Detail = strings.TrimSpace(e.Type + " " + e.Description + " " + e.Details)
		if e.RecordType == "SpamComplaint" {
			f.Kind = mail.FeedbackComplained
		} else if f.Kind = bounceKind(e.Type, e.Inactive); f.Kind == "" {
			return nil, nil // not about delivery: an auto-reply, a subscription request, …
		}
	case "":
		return nil, fmt.Errorf("%w: no RecordType", mail.ErrMalformed)
	default:
		return nil, nil
	}
	if e.MessageID == "" {
		return nil, fmt.Errorf("%w: %s without MessageID", mail.ErrMalformed, e.RecordType)
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, fmt.Errorf("%w: %s time %q", mail.ErrMalformed, e.RecordType, at)
	}
	f.At = t
	return []mail.Feedback{f}, nil
}

// bounceKind maps Postmark's bounce types
// (https://postmarkapp.com/developer/api/bounce-api#bounce-types): the
// address is dead when Postmark deactivated it or the type says so; a
// failure that may pass is deferred; a "bounce" that is no delivery
// failure (an auto-reply, a subscription request, a challenge) is "".
func bounceKind(typ string, inactive bool) mail.FeedbackKind {
	switch typ {
	case "HardBounce", "BadEmailAddress", "ManuallyDeactivated":
		return mail.FeedbackBounced
	case "SpamComplaint":
		return mail.FeedbackComplained
	case "AutoResponder", "Subscribe", "Unsubscribe", "AddressChange", "OpenRelayTest",
		"ChallengeVerification", "VirusNotification", "SpamNotification", "InboundError", "Unconfirmed":
		if inactive {
			return mail.FeedbackBounced
		}
		return ""
	}
	// Transient, SoftBounce, DnsError, Blocked, Unknown, SMTPApiError,
	// DMARCPolicy, TemplateRenderingFailed, and types added later.
	if inactive {
		return mail.FeedbackBounced
	}
	return mail.FeedbackDeferred
}
