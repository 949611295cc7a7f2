// Package postmark is the Postmark mail provider: it implements
// notify.Provider over Postmark's HTTP API (POST /email), classifies
// every documented error code, probes with GET /server, finds a message
// of an ambiguous send by the metadata it carries (reconcile.Lookup),
// and checks Postmark's webhooks (HTTP Basic credentials of ours).
//
// Postmark has no idempotency key: a second request for the same
// delivery is a second e-mail. What stands between an ambiguous send and
// a duplicate is the look-up: every message carries
// Metadata{"sekali-key": notify.KeyHash(key)}, which the Messages API
// searches (metadata_sekali-key=…) for as long as Postmark keeps
// messages (45 days by default).
package postmark

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
)

// DefaultBaseURL is Postmark's API.
const DefaultBaseURL = "https://api.postmarkapp.com"

// DefaultMessageStream is the transactional stream every server has.
const DefaultMessageStream = "outbound"

// MetadataKey names the metadata field that carries
// notify.KeyHash(IdempotencyKey); look-ups and webhooks read it back.
const MetadataKey = "sekali-key"

const maxAnswer = 1 << 20

// Config configures the Postmark provider.
type Config struct {
	ServerToken   string        // POSTMARK_SERVER_TOKEN: the server's API token
	From          string        // MAIL_FROM: a bare address with a confirmed sender signature or domain
	MessageStream string        // POSTMARK_MESSAGE_STREAM: DefaultMessageStream when empty
	BaseURL       string        // POSTMARK_BASE_URL: DefaultBaseURL when empty; plain http only for loopback
	Timeout       time.Duration // one request, counted from before the hand-over; 30s when zero
}

// Validate checks the configuration and reports every problem at once.
func (c Config) Validate() error {
	errs := validateCommon(c.ServerToken, c.MessageStream, c.BaseURL, c.Timeout)
	if _, err := notify.NormalizeAddress(c.From); err != nil {
		errs = append(errs, fmt.Errorf("MAIL_FROM: %w", err))
	}
	return errors.Join(errs...)
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
		errs = append(errs, fmt.Errorf("POSTMARK_TIMEOUT %s must not be negative", timeout))
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
func baseURL(raw string) (string, error) {
	if raw == "" {
		raw = DefaultBaseURL
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: want an URL such as %s", raw, DefaultBaseURL)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Hostname()) {
			return "", fmt.Errorf("%q: plain http only for loopback addresses; use https", raw)
		}
	default:
		return "", fmt.Errorf("%q: want an https URL", raw)
	}
	return u.String(), nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Provider sends through Postmark's API. It implements notify.Provider.
type Provider struct {
	cfg    Config
	from   string
	client *client
}

// New returns a Postmark provider; cfg must be valid.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MessageStream == "" {
		cfg.MessageStream = DefaultMessageStream
	}
	from, _ := notify.NormalizeAddress(cfg.From)
	return &Provider{cfg: cfg, from: from, client: newClient(cfg.BaseURL, cfg.ServerToken, cfg.Timeout)}, nil
}

// Close closes idle connections.
func (p *Provider) Close() { p.client.http.CloseIdleConnections() }

// Deduplicates reports that Postmark does not: a second request is a
// second e-mail, so an ambiguous send is decided by the look-up.
func (*Provider) Deduplicates() bool { return false }

// email is the body of POST /email
// (https://postmarkapp.com/developer/api/email-api).
type email struct {
	From          string            `json:"From"`
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

func (p *Provider) body(m notify.Message) ([]byte, error) {
	to, err := notify.NormalizeAddress(m.To)
	if err != nil {
		return nil, fmt.Errorf("recipient: %w", err)
	}
	if m.MessageID == "" || strings.ContainsAny(m.MessageID, "<> \r\n") {
		return nil, fmt.Errorf("message id %q: want id@domain without angle brackets", m.MessageID)
	}
	if m.IdempotencyKey == "" {
		return nil, errors.New("no idempotency key")
	}
	if m.Text == "" && m.HTML == "" {
		return nil, errors.New("no text and no HTML: Postmark needs one")
	}
	return json.Marshal(email{
		From: p.from, To: to, Subject: m.Subject, HTMLBody: m.HTML, TextBody: m.Text,
		Headers:       []header{{Name: "Message-ID", Value: "<" + m.MessageID + ">"}},
		Metadata:      map[string]string{MetadataKey: notify.KeyHash(m.IdempotencyKey)},
		MessageStream: p.cfg.MessageStream,
	})
}

// sendAnswer is Postmark's answer to POST /email.
type sendAnswer struct {
	ErrorCode int    `json:"ErrorCode"`
	Message   string `json:"Message"`
	MessageID string `json:"MessageID"`
}

// Send implements notify.Provider. handOver runs right before the
// request goes out; the request's deadline (Timeout) counts from before
// it and is never extended.
func (p *Provider) Send(ctx context.Context, m notify.Message, handOver func() error) (string, error) {
	body, err := p.body(m)
	if err != nil {
		return "", composeError(err)
	}
	before := time.Now()
	if err := handOver(); err != nil {
		return "", &notify.SendError{Outcome: notify.OutcomeAborted, Stage: notify.StageData, Err: err}
	}
	ctx, cancel := context.WithDeadline(ctx, before.Add(p.cfg.Timeout))
	defer cancel()
	ans, se := p.client.do(ctx, http.MethodPost, "/email", body)
	if se != nil {
		se.HandedOver = true
		return "", se
	}
	var a sendAnswer
	decodeErr := json.Unmarshal(ans.body, &a)
	if ans.status == http.StatusOK && decodeErr == nil && a.ErrorCode == 0 && a.MessageID != "" {
		return a.MessageID, nil
	}
	if ans.status == http.StatusOK && (decodeErr != nil || a.MessageID == "") && a.ErrorCode == 0 {
		// Accepted, most likely, but without an id: the look-up decides.
		return "", &notify.SendError{Outcome: notify.OutcomeAmbiguous, Stage: notify.StageData, Code: ans.status, HandedOver: true,
			Err: fmt.Errorf("answer %d without a MessageID: %q", ans.status, truncate(ans.body))}
	}
	se = classify(ans.status, a.ErrorCode, a.Message, decodeErr == nil)
	se.HandedOver = true
	return "", se
}

// Probe implements notify.Provider: GET /server, which needs the server
// token and sends nothing.
func (p *Provider) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	ans, se := p.client.do(ctx, http.MethodGet, "/server", nil)
	if se != nil {
		return se
	}
	if ans.status == http.StatusOK {
		return nil
	}
	var a sendAnswer
	decodeErr := json.Unmarshal(ans.body, &a)
	se = classify(ans.status, a.ErrorCode, a.Message, decodeErr == nil)
	se.Outcome = notify.OutcomeUnavailable // whatever GET /server says is about us
	return se
}

// client makes Postmark API requests with the server token.
type client struct {
	base  string
	token string
	http  *http.Client
}

func newClient(base, token string, timeout time.Duration) *client {
	base, _ = baseURL(base)
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &client{base: base, token: token, http: &http.Client{Transport: transport}}
}

type answer struct {
	status int
	body   []byte
}

// errFenced: the request's deadline passed before its body went out.
var errFenced = errors.New("deadline passed before the request body was sent")

// fencedBody hands out the request body only before its deadline, so
// that a worker that stalls after its last lease check cannot start
// sending the message once the reconciler may act on its expired lease.
type fencedBody struct {
	r        *bytes.Reader
	deadline time.Time
}

func (b *fencedBody) Read(p []byte) (int, error) {
	if !time.Now().Before(b.deadline) {
		return 0, errFenced
	}
	return b.r.Read(p)
}

func (b *fencedBody) Close() error { return nil }

// do runs one request (path may carry a query). A failure without an
// answer is classified by whether the whole request was written: before
// that nothing can have been accepted (unavailable), after it Postmark
// may have the message (ambiguous).
func (c *client) do(ctx context.Context, method, path string, body []byte) (answer, *notify.SendError) {
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				wrote.Store(true)
			}
		},
	})
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return answer{}, &notify.SendError{Outcome: notify.OutcomeUnavailable, Stage: notify.StageConnect, Err: err}
	}
	if body != nil {
		deadline, _ := ctx.Deadline()
		req.Body = &fencedBody{r: bytes.NewReader(body), deadline: deadline}
		req.GetBody = func() (io.ReadCloser, error) {
			return &fencedBody{r: bytes.NewReader(body), deadline: deadline}, nil
		}
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Postmark-Server-Token", c.token)
	req.Header.Set("User-Agent", "sekali")
	res, err := c.http.Do(req)
	if err != nil {
		if wrote.Load() {
			return answer{}, &notify.SendError{Outcome: notify.OutcomeAmbiguous, Stage: notify.StageData,
				Err: fmt.Errorf("no answer after the request was sent: %w", err)}
		}
		return answer{}, &notify.SendError{Outcome: notify.OutcomeUnavailable, Stage: notify.StageConnect,
			Err: fmt.Errorf("request not sent: %w", err)}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil && res.StatusCode == http.StatusOK {
		return answer{}, &notify.SendError{Outcome: notify.OutcomeAmbiguous, Stage: notify.StageData, Code: res.StatusCode,
			Err: fmt.Errorf("answer %d cut short: %w", res.StatusCode, err)}
	}
	return answer{status: res.StatusCode, body: b}, nil
}

// composeError classifies a message that cannot be put into a request:
// a bad recipient is refused for good, anything else is our bug and
// waits (retried until DELIVERY_MAX_AGE) for a fix.
func composeError(err error) *notify.SendError {
	if errors.Is(err, notify.ErrInvalidAddress) {
		return &notify.SendError{Outcome: notify.OutcomePermanent, Stage: notify.StageRecipient, Err: fmt.Errorf("compose request: %w", err)}
	}
	return &notify.SendError{Outcome: notify.OutcomeTemporary, Stage: notify.StageConnect, Err: fmt.Errorf("compose request: %w", err)}
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
