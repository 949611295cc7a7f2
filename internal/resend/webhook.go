package resend

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

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// WebhookVerifier checks Resend's webhooks, which Svix signs
// (https://docs.svix.com/receiving/verifying-payloads/how-manual):
// svix-signature lists space-separated "v1,<base64>" signatures, each an
// HMAC-SHA256, keyed with the base64-decoded part of the secret after
// "whsec_", of "<svix-id>.<svix-timestamp>.<body>".
type WebhookVerifier struct {
	key []byte
}

// NewWebhookVerifier returns a verifier for a webhook's signing secret
// (RESEND_WEBHOOK_SECRET, "whsec_…").
func NewWebhookVerifier(secret string) (*WebhookVerifier, error) {
	raw, ok := strings.CutPrefix(strings.TrimSpace(secret), "whsec_")
	if !ok {
		return nil, errors.New("RESEND_WEBHOOK_SECRET: want the signing secret shown by Resend, whsec_…")
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(key) == 0 {
		return nil, errors.New("RESEND_WEBHOOK_SECRET: the part after whsec_ is not base64")
	}
	return &WebhookVerifier{key: key}, nil
}

// Verify checks a webhook request's signature and timestamp and returns
// its events about delivery. Events that say nothing about delivery
// (email.sent, email.opened, …) give no Feedback and no error.
// EventID is svix-id, the same when Resend sends the same event again.
func (v *WebhookVerifier) Verify(header http.Header, body []byte, now time.Time) ([]mail.Feedback, error) {
	if err := httpprovider.CheckWebhookBody(body); err != nil {
		return nil, fmt.Errorf("%w: %w", mail.ErrMalformed, err)
	}
	id, ts, sigs := svixHeader(header, "id"), svixHeader(header, "timestamp"), svixHeader(header, "signature")
	if id == "" || ts == "" || sigs == "" {
		return nil, fmt.Errorf("%w: svix-id, svix-timestamp and svix-signature are required", mail.ErrBadSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: svix-timestamp %q is not a number", mail.ErrBadSignature, ts)
	}
	if !v.signed(id, ts, body, sigs) {
		return nil, mail.ErrBadSignature
	}
	if err := httpprovider.CheckSignedAt(time.Unix(sec, 0), now, httpprovider.WebhookTolerance); err != nil {
		return nil, fmt.Errorf("%w: %w", mail.ErrStale, err)
	}
	return feedback(id, body)
}

// svixHeader reads svix-<name>, or webhook-<name> (Svix's white-labelled
// form of the same header).
func svixHeader(h http.Header, name string) string {
	if v := h.Get("svix-" + name); v != "" {
		return v
	}
	return h.Get("webhook-" + name)
}

// signed reports whether one of the v1 signatures in sigs matches.
func (v *WebhookVerifier) signed(id, ts string, body []byte, sigs string) bool {
	mac := hmac.New(sha256.New, v.key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	ok := false
	for _, s := range strings.Fields(sigs) {
		version, sig, found := strings.Cut(s, ",")
		if !found || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			ok = true // no early return: the time taken says nothing about which matched
		}
	}
	return ok
}

// event is a Resend webhook body (https://resend.com/docs/webhooks/event-types).
type event struct {
	Type      string `json:"type"`
	CreatedAt string `json:"created_at"`
	Data      struct {
		EmailID   string            `json:"email_id"`
		MessageID string            `json:"message_id"`
		To        []string          `json:"to"`
		Tags      map[string]string `json:"tags"`
		Bounce    *struct {
			Message string `json:"message"`
			Type    string `json:"type"`    // Permanent, Transient, Undetermined
			SubType string `json:"subType"` // General, NoEmail, Suppressed, MailboxFull, …
		} `json:"bounce"`
	} `json:"data"`
}

func feedback(id string, body []byte) ([]mail.Feedback, error) {
	var e event
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("%w: %w", mail.ErrMalformed, err)
	}
	if e.Type == "" {
		return nil, fmt.Errorf("%w: no type", mail.ErrMalformed)
	}
	f := mail.Feedback{Provider: "resend", ProviderMessageID: e.Data.EmailID, MessageID: stripID(e.Data.MessageID), KeyHash: e.Data.Tags[MetadataKey]}
	switch e.Type {
	case "email.delivered":
		f.Kind = mail.FeedbackDelivered
	case "email.delivery_delayed":
		f.Kind = mail.FeedbackDeferred
	case "email.complained":
		f.Kind = mail.FeedbackComplained
	case "email.bounced":
		if e.Data.Bounce == nil {
			return nil, fmt.Errorf("%w: email.bounced without bounce", mail.ErrMalformed)
		}
		// Only a permanent bounce says the address is dead; Resend
		// reports soft and undetermined bounces with the same event.
		f.Kind = mail.FeedbackDeferred
		if e.Data.Bounce.Type == "Permanent" {
			f.Kind = mail.FeedbackBounced
		}
		f.Detail = strings.TrimSpace(strings.Join([]string{e.Data.Bounce.Type, e.Data.Bounce.SubType, e.Data.Bounce.Message}, " "))
	default:
		return nil, nil
	}
	if f.ProviderMessageID == "" {
		return nil, fmt.Errorf("%w: %s without data.email_id", mail.ErrMalformed, e.Type)
	}
	at, err := time.Parse(time.RFC3339Nano, e.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("%w: created_at %q", mail.ErrMalformed, e.CreatedAt)
	}
	f.At = at
	if len(e.Data.To) == 0 {
		f.EventID = id
		return []mail.Feedback{f}, nil
	}
	out := make([]mail.Feedback, 0, len(e.Data.To))
	for i, to := range e.Data.To {
		g := f
		g.EventID = id
		if len(e.Data.To) > 1 {
			g.EventID = fmt.Sprintf("%s#%d", id, i)
		}
		g.Recipient, _ = mail.NormalizeAddress(bareAddress(to))
		out = append(out, g)
	}
	return out, nil
}

// bareAddress returns the address in "Name <a@b>", or s.
func bareAddress(s string) string {
	if i := strings.LastIndexByte(s, '<'); i >= 0 {
		if j := strings.IndexByte(s[i:], '>'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return s
}

// stripID returns a Message-ID without its angle brackets.
func stripID(s string) string { return strings.Trim(strings.TrimSpace(s), "<>") }
