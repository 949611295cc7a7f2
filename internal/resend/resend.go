// Package resend is the Resend mail provider: it implements
// mail.Provider over Resend's HTTP API (POST /emails) and mail.Batcher
// (POST /emails/batch, up to 100 e-mails in one request), with the
// idempotency key that makes Resend send one e-mail however often the
// same delivery (or the same batch) is sent, the classification of
// every error Resend documents (its 429s are a pace: throttled, with
// the answer's headers), a probe that sends nothing, and the
// verification of Resend's (Svix-signed) webhooks.
//
// Resend deduplicates by the Idempotency-Key header for 24 hours
// (https://resend.com/docs/dashboard/emails/idempotency-keys): the same
// key with the same body gets the first answer and nothing is sent
// again. So a send whose answer was lost (mail.OutcomeAmbiguous) may
// be sent again, under the same key, within DedupWindow; that is why
// this package has no look-up (mail.Lookup).
package resend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// DefaultBaseURL is Resend's API.
const DefaultBaseURL = "https://api.resend.com"

// DedupWindow is how long Resend keeps an idempotency key: a send of the
// same delivery within this time of the first one is answered with the
// first one's result and sends nothing.
const DedupWindow = 24 * time.Hour

// MetadataKey is the name of the tag that carries
// mail.KeyHash(IdempotencyKey); Resend echoes tags in its webhooks.
const MetadataKey = "sekali-key"

// api is Resend's API as the HTTP providers' skeleton reaches it:
// RESEND_API_KEY as a bearer token, and any 2xx for a request it took.
var api = httpprovider.API{
	Name:           "resend",
	KeyVar:         "RESEND_API_KEY", // a sending-only key is enough
	BaseURLVar:     "RESEND_BASE_URL",
	DefaultBaseURL: DefaultBaseURL,
	Header:         func(key string) http.Header { return http.Header{"Authorization": {"Bearer " + key}} },
	Accepted:       func(status int) bool { return status/100 == 2 },
}

// Config configures the Resend provider: what every HTTP provider has,
// and nothing of its own. From (MAIL_FROM) must be an address in a
// domain verified at Resend.
type Config struct {
	httpprovider.Config
}

// Validate checks the configuration and reports every problem at once.
func (c Config) Validate() error { return api.CheckSender(c.Config) }

// IdempotencyKey is the Idempotency-Key sent for a delivery's key:
// "sekali-" and the hex SHA-256 of key, 71 characters of [a-z0-9-]. Our
// keys (order-confirmation:<uuid>:<email>) can be longer than the 256
// characters Resend takes, and carry an address; the digest is the same
// on every attempt, and only the same key gives it.
func IdempotencyKey(key string) string { return mail.ProviderKey(key) }

// Provider sends through Resend's API. It implements mail.Provider.
type Provider struct {
	sender mail.Sender // MAIL_FROM, under a template's name
	client *httpprovider.Client
}

// New returns a Resend provider; cfg must be valid.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sender, client := api.Open(cfg.Config)
	return &Provider{sender: sender, client: client}, nil
}

// Close closes idle connections.
func (p *Provider) Close() { p.client.Close() }

// email is the body of POST /emails.
type email struct {
	From    string            `json:"from"`
	ReplyTo string            `json:"reply_to,omitempty"`
	To      []string          `json:"to"`
	Subject string            `json:"subject"`
	HTML    string            `json:"html,omitempty"`
	Text    string            `json:"text"`
	Headers map[string]string `json:"headers"`
	Tags    []tag             `json:"tags"`
}

type tag struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// email is m as both sending endpoints take it: POST /emails alone,
// POST /emails/batch as an item of its array. The same m gives the same
// e-mail, so a send again under the same key (alone or in the same
// batch) is the "same request" Resend deduplicates.
func (p *Provider) email(m mail.Message) (email, error) {
	to, err := httpprovider.CheckMessage(m)
	if err != nil {
		return email{}, err
	}
	headers := map[string]string{}
	for _, h := range httpprovider.Headers(m) {
		headers[h.Name] = h.Value
	}
	return email{
		From:    p.sender.WithName(m.FromName).Display(),
		ReplyTo: m.ReplyTo,
		To:      []string{to},
		Subject: m.Subject,
		HTML:    m.HTML,
		// Sent even when empty: Resend would otherwise derive a text
		// part from the HTML, and the body would depend on how it does.
		Text:    m.Text,
		Headers: headers,
		Tags:    []tag{{Name: MetadataKey, Value: mail.KeyHash(m.IdempotencyKey)}},
	}, nil
}

// Send implements mail.Provider. handOver runs right before the
// request goes out; the request's deadline (Timeout) counts from before
// it and is never extended.
func (p *Provider) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	e, err := p.email(m)
	if err != nil {
		return "", httpprovider.ComposeError(err)
	}
	header := http.Header{"Idempotency-Key": {IdempotencyKey(m.IdempotencyKey)}}
	ans, se := p.client.PostJSON(ctx, handOver, "/emails", header, e)
	if se != nil {
		return "", se
	}
	var ok struct {
		ID string `json:"id"`
	}
	if ans.Status/100 == 2 {
		if err := json.Unmarshal(ans.Body, &ok); err != nil || ok.ID == "" {
			// Accepted, most likely, but without an id we cannot record
			// it: leave it to the reconciler, whose resend under the same
			// key gets the first answer again.
			return "", &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: mail.HTTPStatus(ans.Status), HandedOver: true,
				Err: fmt.Errorf("answer %d without an email id: %q", ans.Status, httpprovider.Truncate(ans.Body))}
		}
		return ok.ID, nil
	}
	se = classify(ans.Status, decodeError(ans.Body))
	return "", httpprovider.Refused(se, ans)
}

// Probe implements mail.Provider: GET /domains, which sends nothing.
// A sending-only key (the one to use) is refused there with
// restricted_api_key, which proves the key is valid: that passes too.
func (p *Provider) Probe(ctx context.Context) error {
	return p.client.Probe(ctx, "/domains", func(ans httpprovider.Answer) *mail.SendError {
		e := decodeError(ans.Body)
		if ans.Status == http.StatusUnauthorized && e.Name == "restricted_api_key" {
			return nil
		}
		return classify(ans.Status, e)
	})
}
