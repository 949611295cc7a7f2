// Package postmark is the Postmark mail provider: it implements
// mail.Provider over Postmark's HTTP API (POST /email) and mail.Batcher
// (POST /email/batch, up to 500 messages in one request), classifies
// every documented error code (its rate limit is a pace: throttled),
// probes with GET /server, finds a message of an ambiguous send by the
// metadata it carries (mail.Lookup), and checks Postmark's webhooks
// (HTTP Basic credentials of ours).
//
// Postmark has no idempotency key: a second request for the same
// delivery is a second e-mail. What stands between an ambiguous send and
// a duplicate is the look-up: every message carries
// Metadata{"sekali-key": mail.KeyHash(key)}, which the Messages API
// searches (metadata_sekali-key=…) for as long as Postmark keeps
// messages (45 days by default).
package postmark

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// DefaultBaseURL is Postmark's API.
const DefaultBaseURL = "https://api.postmarkapp.com"

// DefaultMessageStream is the transactional stream every server has.
const DefaultMessageStream = "outbound"

// MetadataKey names the metadata field that carries
// mail.KeyHash(IdempotencyKey); look-ups and webhooks read it back.
const MetadataKey = "sekali-key"

// api is Postmark's API as the HTTP providers' skeleton reaches it: the
// server token in X-Postmark-Server-Token, 200 for a request it took, and
// the Messages API's window by default (POSTMARK_RETENTION, at most 365
// days, and POSTMARK_LOOKUP_SETTLE change it).
var api = httpprovider.API{
	Name:           "postmark",
	KeyVar:         "POSTMARK_SERVER_TOKEN", // the server's API token
	BaseURLVar:     "POSTMARK_BASE_URL",
	DefaultBaseURL: DefaultBaseURL,
	Header:         func(token string) http.Header { return http.Header{"X-Postmark-Server-Token": {token}} },
	Accepted:       func(status int) bool { return status == http.StatusOK },
	Search: httpprovider.Window{
		// How long Postmark keeps messages unless the server's retention
		// was changed (7 to 365 days).
		Retention: 45 * 24 * time.Hour,
		// Postmark documents no delay before a message can be searched:
		// a margin, not a documented figure.
		Settle: 5 * time.Minute,
	},
	MaxRetention: 365 * 24 * time.Hour,
}

// Config configures the Postmark provider: what every HTTP provider has
// (From, MAIL_FROM, must have a confirmed sender signature or domain),
// and the message stream.
type Config struct {
	httpprovider.Config
	MessageStream string // POSTMARK_MESSAGE_STREAM: DefaultMessageStream when empty
}

// Validate checks the configuration for sending and reports every
// problem at once.
func (c Config) Validate() error { return api.CheckSender(c.Config, c.streamProblems()...) }

// readEnv is c with what only Postmark reads: POSTMARK_MESSAGE_STREAM.
func readEnv(env *envconfig.Reader, c httpprovider.Config) Config {
	return Config{Config: c, MessageStream: env.String("POSTMARK_MESSAGE_STREAM", "")}
}

func (c Config) streamProblems() []error {
	if c.MessageStream != "" && !validStream(c.MessageStream) {
		return []error{fmt.Errorf("POSTMARK_MESSAGE_STREAM %q: want a stream ID such as %s", c.MessageStream, DefaultMessageStream)}
	}
	return nil
}

// stream is the message stream sent and searched.
func (c Config) stream() string { return cmp.Or(c.MessageStream, DefaultMessageStream) }

func validStream(s string) bool {
	if len(s) > 100 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Provider sends through Postmark's API. It implements mail.Provider.
type Provider struct {
	stream string
	sender mail.Sender // MAIL_FROM, under a template's name
	client *httpprovider.Client
}

// New returns a Postmark provider; cfg must be valid.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sender, client := api.Open(cfg.Config)
	return &Provider{stream: cfg.stream(), sender: sender, client: client}, nil
}

// Close closes idle connections.
func (p *Provider) Close() { p.client.Close() }

// email is the body of POST /email
// (https://postmarkapp.com/developer/api/email-api).
type email struct {
	From          string                `json:"From"`
	ReplyTo       string                `json:"ReplyTo,omitempty"`
	To            string                `json:"To"`
	Subject       string                `json:"Subject"`
	HTMLBody      string                `json:"HtmlBody,omitempty"`
	TextBody      string                `json:"TextBody,omitempty"`
	Headers       []httpprovider.Header `json:"Headers"` // Name and Value, as Postmark spells them
	Metadata      map[string]string     `json:"Metadata"`
	MessageStream string                `json:"MessageStream"`
}

// email is m as both sending endpoints take it: POST /email alone,
// POST /email/batch as an item of its array.
func (p *Provider) email(m mail.Message) (email, error) {
	to, err := httpprovider.CheckMessage(m)
	if err != nil {
		return email{}, err
	}
	if m.Text == "" && m.HTML == "" {
		return email{}, errors.New("no text and no HTML: Postmark needs one")
	}
	return email{
		From: p.sender.WithName(m.FromName).Display(), ReplyTo: m.ReplyTo, To: to, Subject: m.Subject, HTMLBody: m.HTML, TextBody: m.Text,
		Headers:       httpprovider.Headers(m),
		Metadata:      map[string]string{MetadataKey: mail.KeyHash(m.IdempotencyKey)},
		MessageStream: p.stream,
	}, nil
}

// sendAnswer is Postmark's answer to POST /email, and its result for
// each message of POST /email/batch.
type sendAnswer struct {
	ErrorCode int    `json:"ErrorCode"`
	Message   string `json:"Message"`
	MessageID string `json:"MessageID"`
}

// noID is the error of a message Postmark took, most likely (200 and
// ErrorCode 0), but named no id for: the look-up decides.
func noID(ans httpprovider.Answer, what string) *mail.SendError {
	return &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: mail.HTTPStatus(ans.Status), HandedOver: true, Header: ans.Header,
		Err: fmt.Errorf("answer %d without a MessageID%s: %q", ans.Status, what, httpprovider.Truncate(ans.Body))}
}

// Send implements mail.Provider. handOver runs right before the
// request goes out; the request's deadline (Timeout) counts from before
// it and is never extended.
func (p *Provider) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	e, err := p.email(m)
	if err != nil {
		return "", httpprovider.ComposeError(err)
	}
	ans, se := p.client.PostJSON(ctx, handOver, "/email", nil, e)
	if se != nil {
		return "", se
	}
	var a sendAnswer
	decodeErr := json.Unmarshal(ans.Body, &a)
	if ans.Status == http.StatusOK && decodeErr == nil && a.ErrorCode == 0 && a.MessageID != "" {
		return a.MessageID, nil
	}
	if ans.Status == http.StatusOK && (decodeErr != nil || a.MessageID == "") && a.ErrorCode == 0 {
		return "", noID(ans, "") // accepted, most likely: the look-up decides
	}
	se = classify(ans.Status, a.ErrorCode, a.Message, decodeErr == nil)
	return "", httpprovider.Refused(se, ans)
}

// Probe implements mail.Provider: GET /server, which needs the server
// token and sends nothing.
func (p *Provider) Probe(ctx context.Context) error {
	return p.client.Probe(ctx, "/server", func(ans httpprovider.Answer) *mail.SendError {
		var a sendAnswer
		decodeErr := json.Unmarshal(ans.Body, &a)
		return classify(ans.Status, a.ErrorCode, a.Message, decodeErr == nil)
	})
}
