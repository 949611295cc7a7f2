// Package postmark is the Postmark mail provider: it implements
// mail.Provider over Postmark's HTTP API (POST /email), classifies
// every documented error code, probes with GET /server, finds a message
// of an ambiguous send by the metadata it carries (mail.Lookup),
// and checks Postmark's webhooks (HTTP Basic credentials of ours).
//
// Postmark has no idempotency key: a second request for the same
// delivery is a second e-mail. What stands between an ambiguous send and
// a duplicate is the look-up: every message carries
// Metadata{"sekali-key": mail.KeyHash(key)}, which the Messages API
// searches (metadata_sekali-key=…) for as long as Postmark keeps
// messages (45 days by default).
package postmark

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
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

// Config configures the Postmark provider.
type Config struct {
	ServerToken   string        // POSTMARK_SERVER_TOKEN: the server's API token
	From          string        // MAIL_FROM: an address with a confirmed sender signature or domain, with a display name or without
	MessageStream string        // POSTMARK_MESSAGE_STREAM: DefaultMessageStream when empty
	BaseURL       string        // POSTMARK_BASE_URL: DefaultBaseURL when empty; plain http only for loopback
	Timeout       time.Duration // one request, counted from before the hand-over; httpprovider.DefaultTimeout (30s) when zero
}

// Validate checks the configuration and reports every problem at once.
func (c Config) Validate() error {
	errs := validateCommon(c.ServerToken, c.MessageStream, c.BaseURL, c.Timeout)
	if _, err := mail.ParseSender(c.From); err != nil {
		errs = append(errs, fmt.Errorf("MAIL_FROM: %w", err))
	}
	return errors.Join(errs...)
}

// ReadEnv reads the provider's POSTMARK_* variables. From (MAIL_FROM) and
// Timeout (PROVIDER_TIMEOUT) are the worker's to set before Validate.
func ReadEnv(env *envconfig.Reader) Config {
	return Config{
		ServerToken:   env.Secret("POSTMARK_SERVER_TOKEN", ""),
		MessageStream: env.String("POSTMARK_MESSAGE_STREAM", ""),
		BaseURL:       env.String("POSTMARK_BASE_URL", ""),
	}
}

func validateCommon(token, stream, base string, timeout time.Duration) []error {
	var errs []error
	if strings.TrimSpace(token) == "" {
		errs = append(errs, errors.New("POSTMARK_SERVER_TOKEN must be set"))
	} else if strings.ContainsAny(token, " \r\n\t") {
		errs = append(errs, errors.New("POSTMARK_SERVER_TOKEN must not contain spaces or line breaks"))
	}
	if stream != "" && !validStream(stream) {
		errs = append(errs, fmt.Errorf("POSTMARK_MESSAGE_STREAM %q: want a stream ID such as %s", stream, DefaultMessageStream))
	}
	if _, err := baseURL(base); err != nil {
		errs = append(errs, fmt.Errorf("POSTMARK_BASE_URL: %w", err))
	}
	if timeout < 0 {
		errs = append(errs, fmt.Errorf("PROVIDER_TIMEOUT %s must not be negative", timeout))
	}
	return errs
}

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

// baseURL checks raw (DefaultBaseURL when empty): https, or plain http
// to a loopback address (a test server).
func baseURL(raw string) (string, error) { return httpprovider.BaseURL(raw, DefaultBaseURL) }

// Provider sends through Postmark's API. It implements mail.Provider.
type Provider struct {
	cfg    Config
	sender mail.Sender // MAIL_FROM, under a template's name
	client *httpprovider.Client
}

// New returns a Postmark provider; cfg must be valid.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MessageStream == "" {
		cfg.MessageStream = DefaultMessageStream
	}
	sender, _ := mail.ParseSender(cfg.From)
	return &Provider{cfg: cfg, sender: sender, client: newClient(cfg.BaseURL, cfg.ServerToken, cfg.Timeout)}, nil
}

// Close closes idle connections.
func (p *Provider) Close() { p.client.Close() }

// email is the body of POST /email
// (https://postmarkapp.com/developer/api/email-api).
type email struct {
	From          string            `json:"From"`
	ReplyTo       string            `json:"ReplyTo,omitempty"`
	To            string            `json:"To"`
	Subject       string            `json:"Subject"`
	HTMLBody      string            `json:"HtmlBody,omitempty"`
	TextBody      string            `json:"TextBody,omitempty"`
	Headers       []header          `json:"Headers"`
	Metadata      map[string]string `json:"Metadata"`
	MessageStream string            `json:"MessageStream"`
}

type header struct {
	Name  string `json:"Name"`
	Value string `json:"Value"`
}

func (p *Provider) body(m mail.Message) ([]byte, error) {
	to, err := httpprovider.CheckMessage(m)
	if err != nil {
		return nil, err
	}
	if m.Text == "" && m.HTML == "" {
		return nil, errors.New("no text and no HTML: Postmark needs one")
	}
	headers := []header{{Name: "Message-ID", Value: "<" + m.MessageID + ">"}, {Name: "Auto-Submitted", Value: mail.AutoSubmitted}}
	if m.ListUnsubscribe != "" {
		headers = append(headers, header{Name: "List-Unsubscribe", Value: m.ListUnsubscribe}, header{Name: "List-Unsubscribe-Post", Value: mail.ListUnsubscribePost})
	}
	return json.Marshal(email{
		From: p.sender.WithName(m.FromName).Display(), ReplyTo: m.ReplyTo, To: to, Subject: m.Subject, HTMLBody: m.HTML, TextBody: m.Text,
		Headers:       headers,
		Metadata:      map[string]string{MetadataKey: mail.KeyHash(m.IdempotencyKey)},
		MessageStream: p.cfg.MessageStream,
	})
}

// sendAnswer is Postmark's answer to POST /email.
type sendAnswer struct {
	ErrorCode int    `json:"ErrorCode"`
	Message   string `json:"Message"`
	MessageID string `json:"MessageID"`
}

// Send implements mail.Provider. handOver runs right before the
// request goes out; the request's deadline (Timeout) counts from before
// it and is never extended.
func (p *Provider) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	body, err := p.body(m)
	if err != nil {
		return "", httpprovider.ComposeError(err)
	}
	ans, se := p.client.HandOver(ctx, handOver, http.MethodPost, "/email", http.Header{"Content-Type": {"application/json"}}, body)
	if se != nil {
		return "", se
	}
	var a sendAnswer
	decodeErr := json.Unmarshal(ans.Body, &a)
	if ans.Status == http.StatusOK && decodeErr == nil && a.ErrorCode == 0 && a.MessageID != "" {
		return a.MessageID, nil
	}
	if ans.Status == http.StatusOK && (decodeErr != nil || a.MessageID == "") && a.ErrorCode == 0 {
		// Accepted, most likely, but without an id: the look-up decides.
		return "", &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: mail.HTTPStatus(ans.Status), HandedOver: true,
			Err: fmt.Errorf("answer %d without a MessageID: %q", ans.Status, httpprovider.Truncate(ans.Body))}
	}
	se = classify(ans.Status, a.ErrorCode, a.Message, decodeErr == nil)
	return "", httpprovider.Refused(se)
}

// Probe implements mail.Provider: GET /server, which needs the server
// token and sends nothing.
func (p *Provider) Probe(ctx context.Context) error {
	ans, se := p.client.Do(ctx, http.MethodGet, "/server", nil, nil)
	if se != nil {
		return se
	}
	if ans.Status == http.StatusOK {
		return nil
	}
	var a sendAnswer
	decodeErr := json.Unmarshal(ans.Body, &a)
	se = classify(ans.Status, a.ErrorCode, a.Message, decodeErr == nil)
	se.Outcome = mail.OutcomeUnavailable // whatever GET /server says is about us
	return se
}

// newClient returns a client of Postmark's API at base (checked by
// Validate) with the server token, whose requests take at most timeout.
func newClient(base, token string, timeout time.Duration) *httpprovider.Client {
	base, _ = baseURL(base)
	return httpprovider.NewClient(base, http.Header{"X-Postmark-Server-Token": {token}}, timeout,
		func(status int) bool { return status == http.StatusOK })
}
