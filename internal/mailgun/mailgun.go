// Package mailgun is the Mailgun mail provider: it implements
// mail.Provider over Mailgun's HTTP API (POST /v3/<domain>/messages),
// classifies its answers, probes with GET /v4/domains/<domain>, finds
// the message of an ambiguous send by our Message-ID in the Events API
// (mail.Lookup), and checks Mailgun's signed webhooks.
//
// Mailgun has no idempotency key: a second request is a second e-mail.
// Every message carries our Message-ID (h:Message-Id) and our key's hash
// (v:sekali-key), so the look-up and the webhooks can name it.
package mailgun

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Mailgun's API hosts: US, and EU for domains created in the EU region.
const (
	DefaultBaseURL = "https://api.mailgun.net"
	EUBaseURL      = "https://api.eu.mailgun.net"
)

// VariableKey names the custom variable (v:sekali-key) that carries
// mail.KeyHash(IdempotencyKey); events and webhooks echo it in
// user-variables.
const VariableKey = "sekali-key"

// api is Mailgun's API as the HTTP providers' skeleton reaches it: Basic
// auth api:<MAILGUN_API_KEY> (a key that can send and read the domain:
// the probe and the look-up read it), a host for a base URL (US, or
// EUBaseURL for a domain created in the EU region), 200 for a request it
// took, and the Events API's window by default (MAILGUN_RETENTION and
// MAILGUN_LOOKUP_SETTLE change it).
var api = httpprovider.API{
	Name:           "mailgun",
	KeyVar:         "MAILGUN_API_KEY",
	BaseURLVar:     "MAILGUN_BASE_URL",
	DefaultBaseURL: DefaultBaseURL,
	HostOnly:       true,
	Header: func(key string) http.Header {
		return http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("api:"+key))}}
	},
	Accepted: func(status int) bool { return status == http.StatusOK },
	Search: httpprovider.Window{
		// The least Mailgun keeps events ("at least 3 days"); a plan
		// that keeps them longer can say so.
		Retention: 3 * 24 * time.Hour,
		// Mailgun's event-polling guide calls pages with events younger
		// than about half an hour not trustworthy, since events reach
		// storage late and out of order.
		Settle: 30 * time.Minute,
	},
}

// Config configures the Mailgun provider: what every HTTP provider has,
// and the sending domain.
type Config struct {
	httpprovider.Config
	Domain string // MAILGUN_DOMAIN: the sending domain, e.g. mg.shop.example
}

// Validate checks the configuration for sending and reports every
// problem at once.
func (c Config) Validate() error { return api.CheckSender(c.Config, c.problems()...) }

// readEnv is c with what only Mailgun reads: MAILGUN_DOMAIN.
func readEnv(env *envconfig.Reader, c httpprovider.Config) Config {
	return Config{Config: c, Domain: env.String("MAILGUN_DOMAIN", "")}
}

// problems says what is wrong with what only Mailgun reads: the domain,
// and a key that its Basic auth cannot carry.
func (c Config) problems() []error {
	var errs []error
	if strings.Contains(c.Key, ":") {
		errs = append(errs, errors.New("MAILGUN_API_KEY must not contain colons"))
	}
	if !mail.IsHostName(c.Domain) || !strings.Contains(c.Domain, ".") {
		errs = append(errs, fmt.Errorf("MAILGUN_DOMAIN %q: want the sending domain, e.g. mg.shop.example", c.Domain))
	}
	return errs
}

// Provider sends through Mailgun's API. It implements mail.Provider.
type Provider struct {
	domain string
	sender mail.Sender // MAIL_FROM, under a template's name
	client *httpprovider.Client
}

// New returns a Mailgun provider; cfg must be valid.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sender, client := api.Open(cfg.Config)
	return &Provider{domain: cfg.Domain, sender: sender, client: client}, nil
}

// Close closes idle connections.
func (p *Provider) Close() { p.client.Close() }

func (p *Provider) form(m mail.Message) ([]byte, error) {
	to, err := httpprovider.CheckMessage(m)
	if err != nil {
		return nil, err
	}
	if m.Text == "" && m.HTML == "" {
		return nil, errors.New("no text and no HTML: Mailgun needs one")
	}
	v := url.Values{}
	v.Set("from", p.sender.WithName(m.FromName).Display())
	if m.ReplyTo != "" {
		v.Set("h:Reply-To", m.ReplyTo)
	}
	v.Set("h:Auto-Submitted", mail.AutoSubmitted)
	if m.ListUnsubscribe != "" {
		v.Set("h:List-Unsubscribe", m.ListUnsubscribe)
		v.Set("h:List-Unsubscribe-Post", mail.ListUnsubscribePost)
	}
	v.Set("to", to)
	v.Set("subject", m.Subject)
	if m.Text != "" {
		v.Set("text", m.Text)
	}
	if m.HTML != "" {
		v.Set("html", m.HTML)
	}
	v.Set("h:Message-Id", "<"+m.MessageID+">")
	v.Set("v:"+VariableKey, mail.KeyHash(m.IdempotencyKey))
	return []byte(v.Encode()), nil
}

// Send implements mail.Provider. handOver runs right before the
// request goes out; the request's deadline (Timeout) counts from before
// it and is never extended.
func (p *Provider) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	body, err := p.form(m)
	if err != nil {
		return "", httpprovider.ComposeError(err)
	}
	header := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	ans, se := p.client.HandOver(ctx, handOver, http.MethodPost, "/v3/"+p.domain+"/messages", header, body)
	if se != nil {
		return "", se
	}
	var a struct {
		ID      string `json:"id"`
		Message string `json:"message"`
	}
	decodeErr := json.Unmarshal(ans.Body, &a)
	if ans.Status == http.StatusOK {
		if decodeErr != nil || a.ID == "" {
			return "", &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: mail.HTTPStatus(ans.Status), HandedOver: true,
				Err: fmt.Errorf("answer %d without an id: %q", ans.Status, httpprovider.Truncate(ans.Body))}
		}
		return stripID(a.ID), nil
	}
	message := a.Message
	if decodeErr != nil {
		message = httpprovider.Truncate(ans.Body)
	}
	return "", httpprovider.Refused(classify(ans.Status, message), ans)
}

// Probe implements mail.Provider: GET /v4/domains/<domain>, which
// needs the key and sends nothing. A domain sending key cannot read the
// domain, so the probe needs a key that can; so does the look-up.
func (p *Provider) Probe(ctx context.Context) error {
	return p.client.Probe(ctx, "/v4/domains/"+p.domain, func(ans httpprovider.Answer) *mail.SendError {
		var a struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(ans.Body, &a) != nil {
			a.Message = httpprovider.Truncate(ans.Body)
		}
		return classify(ans.Status, a.Message)
	})
}

// A paceAnswer is a row of paceAnswers: an answer of Mailgun's about
// pace, as it documents it.
type paceAnswer struct {
	who      string // who documents it, and where
	status   int
	message  string // an example of its {"message"}
	throttle mail.Throttle
}

// paceAnswers are Mailgun's refusals for pace: not taken, slow down
// (mail.OutcomeThrottled, no attempt counted, no breaker), with the
// limit they name and the time their message names (mail.PauseNamed);
// a 429's header fields are internal/pace's to read. Each row is checked
// against mailguntest (TestEveryPaceAnswer).
var paceAnswers = []paceAnswer{
	{who: "Mailgun, API response codes: its rate limits, \"retry as defined in the response\"",
		status: http.StatusTooManyRequests, message: "Too many requests"},
	{who: "Mailgun (its maintainers, mailgun/mailgun-java#50): a domain's recipient limit, on new and warming domains, until the time it names",
		status: 420, message: "Domain mg.shop.example is not allowed to send: recipient limit exceeded, try again after Mon, 25 Aug 2025 07:00:31 UTC",
		throttle: mail.ThrottleMessages},
}

// classify decides what an error answer means for the delivery
// (https://documentation.mailgun.com/docs/mailgun/quickstart-guide/responses).
// Only an answer about the recipient is permanent. Its refusals for pace
// (paceAnswers: 429, and 420 for a domain's recipient limit) are a pace,
// not a failure: throttled, nothing taken. Mailgun does not
// deduplicate, so a 5xx after our request was written, 503 included, is
// ambiguous: Mailgun may have taken the message, and the look-up tells
// (the worker also stops sending until a probe passes).
//
//	401, 402, 403      our key, plan or access              unavailable (auth)
//	404                the domain, here or in the region    unavailable
//	429, 420           paceAnswers                          throttled
//	5xx                                                     ambiguous (look it up)
//	400 about 'to'                                          permanent (recipient)
//	400 about 'from'                                        unavailable (sender)
//	400 anything else, 413, other 4xx                       temporary
func classify(status int, message string) *mail.SendError {
	se := &mail.SendError{Reply: mail.HTTPStatus(status), Err: fmt.Errorf("mailgun answered %d: %s", status, message)}
	msg := strings.ToLower(message)
	if i := slices.IndexFunc(paceAnswers, func(a paceAnswer) bool { return a.status == status }); i >= 0 {
		se.Outcome, se.Stage, se.Throttle, se.Pause = mail.OutcomeThrottled, mail.StageConnect, paceAnswers[i].throttle, mail.PauseNamed(message, time.Now())
		return se
	}
	switch {
	case status == 401 || status == 402 || status == 403:
		se.Outcome, se.Stage = mail.OutcomeUnavailable, mail.StageAuth
	case status == 404:
		se.Outcome, se.Stage = mail.OutcomeUnavailable, mail.StageSender
	case status >= 500:
		se.Outcome, se.Stage = mail.OutcomeAmbiguous, mail.StageData
	case status == 400 && mentionsParam(msg, "to"):
		se.Outcome, se.Stage = mail.OutcomePermanent, mail.StageRecipient
	case status == 400 && mentionsParam(msg, "from"):
		se.Outcome, se.Stage = mail.OutcomeUnavailable, mail.StageSender
	default:
		se.Outcome, se.Stage = mail.OutcomeTemporary, mail.StageData
	}
	return se
}

// mentionsParam reports whether a message names a form parameter as
// Mailgun does: 'to' parameter, to parameter.
func mentionsParam(msg, name string) bool {
	return strings.Contains(msg, "'"+name+"' parameter") || strings.HasPrefix(msg, name+" parameter") || strings.Contains(msg, " "+name+" parameter")
}

// stripID returns a Message-ID without its angle brackets.
func stripID(s string) string { return strings.Trim(strings.TrimSpace(s), "<>") }
