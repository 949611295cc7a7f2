package mailgun

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// WebhookVerifier checks Mailgun's webhooks
// (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks):
// the JSON body's signature holds a timestamp, a random token and the hex
// HMAC-SHA256 of timestamp and token concatenated, keyed with the
// webhook signing key. For a subaccount's domain, parent-signature is
// the same keyed with the primary account's key; either may match.
type WebhookVerifier struct {
	key       []byte
	Tolerance time.Duration // httpprovider.WebhookTolerance when zero
}

// NewWebhookVerifier returns a verifier for the webhook signing key
// (MAILGUN_WEBHOOK_SIGNING_KEY).
func NewWebhookVerifier(signingKey string) (*WebhookVerifier, error) {
	signingKey = strings.TrimSpace(signingKey)
	if signingKey == "" {
		return nil, errors.New("MAILGUN_WEBHOOK_SIGNING_KEY must be set")
	}
	return &WebhookVerifier{key: []byte(signingKey)}, nil
}

// webhook is a Mailgun webhook body.
type webhook struct {
	Signature *struct {
		Timestamp       json.RawMessage `json:"timestamp"` // a string in the docs; a number in older payloads
		Token           string          `json:"token"`
		Signature       string          `json:"signature"`
		ParentSignature string          `json:"parent-signature"`
	} `json:"signature"`
	EventData *struct {
		ID        string  `json:"id"`
		Event     string  `json:"event"`
		Timestamp float64 `json:"timestamp"`
		Severity  string  `json:"severity"`
		Reason    string  `json:"reason"`
		Recipient string  `json:"recipient"`
		Message   struct {
			Headers struct {
				MessageID string `json:"message-id"`
			} `json:"headers"`
		} `json:"message"`
		UserVariables  map[string]any `json:"user-variables"`
		DeliveryStatus struct {
			Code        int    `json:"code"`
			Message     string `json:"message"`
			Description string `json:"description"`
		} `json:"delivery-status"`
	} `json:"event-data"`
}

// Verified is a webhook whose signature is Mailgun's and recent.
type Verified struct {
	// Token is the signature's random token, and Expires when Verify
	// starts refusing the signature as too old. Mailgun signs the
	// timestamp and the token, not the event-data: until Expires, whoever
	// captured the request can send the signature with an event of their
	// own. The caller must accept a token once (Mailgun's advice:
	// mail.WebhookTokens). Both are set as soon as the signature
	// checks out, even when the event then is malformed.
	Token   string
	Expires time.Time
	// Feedback is the event, if it is about delivery.
	Feedback []mail.Feedback
}

// Verify checks a webhook body's signature and timestamp and returns its
// event if it is about delivery: delivered, failed (permanent: bounced;
// temporary: deferred) or complained; other events give no Feedback and
// no error. EventID is Mailgun's event id. header is unused: Mailgun
// signs inside the body.
func (v *WebhookVerifier) Verify(_ http.Header, body []byte, now time.Time) (Verified, error) {
	if err := httpprovider.CheckWebhookBody(body); err != nil {
		return Verified{}, fmt.Errorf("%w: %w", mail.ErrMalformed, err)
	}
	var w webhook
	if err := json.Unmarshal(body, &w); err != nil {
		return Verified{}, fmt.Errorf("%w: %w", mail.ErrMalformed, err)
	}
	if w.Signature == nil || w.Signature.Token == "" || w.Signature.Signature == "" {
		return Verified{}, fmt.Errorf("%w: no signature", mail.ErrBadSignature)
	}
	ts := strings.Trim(string(w.Signature.Timestamp), `"`)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Verified{}, fmt.Errorf("%w: timestamp %q is not a number", mail.ErrBadSignature, ts)
	}
	mac := hmac.New(sha256.New, v.key)
	mac.Write([]byte(ts + w.Signature.Token))
	want := mac.Sum(nil)
	ok := false
	for _, s := range []string{w.Signature.Signature, w.Signature.ParentSignature} {
		if got, err := hex.DecodeString(s); err == nil && hmac.Equal(got, want) {
			ok = true
		}
	}
	if !ok {
		return Verified{}, mail.ErrBadSignature
	}
	tolerance := v.Tolerance
	if tolerance == 0 {
		tolerance = httpprovider.WebhookTolerance
	}
	signedAt := time.Unix(sec, 0)
	if err := httpprovider.CheckSignedAt(signedAt, now, tolerance); err != nil {
		return Verified{}, fmt.Errorf("%w: %w", mail.ErrStale, err)
	}
	res := Verified{Token: w.Signature.Token, Expires: signedAt.Add(tolerance)}
	fs, err := event(w)
	res.Feedback = fs
	return res, err
}

// event is the Feedback of a verified webhook's event-data.
func event(w webhook) ([]mail.Feedback, error) {
	e := w.EventData
	if e == nil || e.Event == "" {
		return nil, fmt.Errorf("%w: no event-data", mail.ErrMalformed)
	}
	f := mail.Feedback{Provider: "mailgun", EventID: e.ID, MessageID: stripID(e.Message.Headers.MessageID)}
	f.ProviderMessageID = f.MessageID
	switch e.Event {
	case "delivered":
		f.Kind = mail.FeedbackDelivered
	case "complained":
		f.Kind = mail.FeedbackComplained
	case "failed":
		switch e.Severity {
		case "permanent":
			f.Kind = mail.FeedbackBounced
		case "temporary":
			f.Kind = mail.FeedbackDeferred
		default:
			return nil, fmt.Errorf("%w: failed event with severity %q", mail.ErrMalformed, e.Severity)
		}
		f.Detail = strings.TrimSpace(fmt.Sprintf("%s %s %s", e.Reason, e.DeliveryStatus.Message, e.DeliveryStatus.Description))
		if e.DeliveryStatus.Code != 0 {
			f.Detail = strconv.Itoa(e.DeliveryStatus.Code) + " " + f.Detail
		}
	default:
		return nil, nil
	}
	if e.ID == "" || f.MessageID == "" || e.Timestamp <= 0 || math.IsInf(e.Timestamp, 0) {
		return nil, fmt.Errorf("%w: %s event without id, message-id or timestamp", mail.ErrMalformed, e.Event)
	}
	whole, frac := math.Modf(e.Timestamp)
	f.At = time.Unix(int64(whole), int64(frac*1e9))
	f.Recipient, _ = mail.NormalizeAddress(e.Recipient)
	if k, ok := e.UserVariables[VariableKey].(string); ok {
		f.KeyHash = k
	}
	return []mail.Feedback{f}, nil
}
