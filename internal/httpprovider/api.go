package httpprovider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
)

// API is what one HTTP provider's configuration has of its own, besides
// the variables only it reads (Mailgun's domain, Postmark's stream): its
// name, the variables of its credential and base URL, where its API is,
// how a request carries the credential, which answers say that a request
// was taken, and, for a provider the reconciler can search, that
// search's window. Reading, checking and opening are the same for every
// HTTP provider and are done here, from a Config.
type API struct {
	Name           string                       // PROVIDER's value ("postmark"), and the start of the <NAME>_ variables
	KeyVar         string                       // the credential's variable ("POSTMARK_SERVER_TOKEN")
	BaseURLVar     string                       // the base URL's variable ("POSTMARK_BASE_URL")
	DefaultBaseURL string                       // the API's address when BaseURLVar is unset
	HostOnly       bool                         // the base URL is a host alone: the API's paths carry its version (Mailgun's /v3, /v4)
	Header         func(key string) http.Header // the credential as every request carries it
	Accepted       func(status int) bool        // the statuses with which the API answers a request it took (NewClient)
	// Search is the look-up's window when <NAME>_RETENTION and
	// <NAME>_LOOKUP_SETTLE are unset; MaxRetention, when set, the longest
	// a plan may keep what the look-up searches (Postmark's 365 days).
	Search       Window
	MaxRetention time.Duration
}

// Config is what every HTTP provider is configured with; a provider's
// Config embeds it beside what only that provider reads.
type Config struct {
	Key     string        // API.KeyVar: the credential
	From    string        // MAIL_FROM, the worker's: the sender, with a display name or without; sending only
	BaseURL string        // API.BaseURLVar: API.DefaultBaseURL when empty; plain http only for loopback
	Timeout time.Duration // PROVIDER_TIMEOUT, the worker's: one request, counted from before the hand-over; DefaultTimeout when zero
	// Window is the look-up's (<NAME>_RETENTION, <NAME>_LOOKUP_SETTLE):
	// API.Search's where zero.
	Window
}

// SendTimeout implements mail.SenderConfig for a provider's Config:
// PROVIDER_TIMEOUT.
func (c Config) SendTimeout() (time.Duration, string) { return c.Timeout, "PROVIDER_TIMEOUT" }

// ReadSender reads what the worker sends through the provider with: its
// credential and base URL, with the worker's MAIL_FROM and
// PROVIDER_TIMEOUT (s).
func (a *API) ReadSender(env *envconfig.Reader, s mail.SenderSettings) Config {
	return Config{Key: env.Secret(a.KeyVar, ""), From: s.From, BaseURL: env.String(a.BaseURLVar, ""), Timeout: s.Timeout}
}

// ReadLookup reads what the reconciler searches the provider with: its
// credential and base URL, and the window of <NAME>_RETENTION and
// <NAME>_LOOKUP_SETTLE.
func (a *API) ReadLookup(env *envconfig.Reader) Config {
	return Config{Key: env.Secret(a.KeyVar, ""), BaseURL: env.String(a.BaseURLVar, ""), Window: ReadWindow(env, a.prefix())}
}

// CheckSender checks c for sending, with the problems the provider finds
// in what only it reads (own), and reports them all at once, each by its
// variable: the credential, MAIL_FROM, the base URL, PROVIDER_TIMEOUT.
func (a *API) CheckSender(c Config, own ...error) error {
	errs := a.problems(c)
	if _, err := mail.ParseSender(c.From); err != nil {
		errs = append(errs, fmt.Errorf("MAIL_FROM: %w", err))
	}
	return errors.Join(append(errs, own...)...)
}

// CheckLookup checks c for the look-up as CheckSender does for sending,
// with the window instead of MAIL_FROM.
func (a *API) CheckLookup(c Config, own ...error) error {
	errs := append(a.problems(c), c.Problems(a.prefix(), a.MaxRetention)...)
	return errors.Join(append(errs, own...)...)
}

// problems says what is wrong with what sending and the look-up share.
func (a *API) problems(c Config) []error {
	var errs []error
	if strings.TrimSpace(c.Key) == "" {
		errs = append(errs, fmt.Errorf("%s must be set", a.KeyVar))
	} else if strings.ContainsAny(c.Key, " \r\n\t") {
		errs = append(errs, fmt.Errorf("%s must not contain spaces or line breaks", a.KeyVar))
	}
	if _, err := a.baseURL(c.BaseURL); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", a.BaseURLVar, err))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("PROVIDER_TIMEOUT %s must not be negative", c.Timeout))
	}
	return errs
}

// baseURL is BaseURL with the API's default and, for HostOnly, no path.
func (a *API) baseURL(raw string) (string, error) {
	base, err := BaseURL(raw, a.DefaultBaseURL)
	if err != nil || !a.HostOnly {
		return base, err
	}
	if u, _ := url.Parse(base); u.Path != "" {
		return "", fmt.Errorf("%q: want a host such as %s, not a path under it", raw, a.DefaultBaseURL)
	}
	return base, nil
}

// prefix is what the provider's variables begin with: POSTMARK.
func (a *API) prefix() string { return strings.ToUpper(a.Name) }

// Open returns what every HTTP provider's New makes of c, which must
// have passed CheckSender: who its messages are from (MAIL_FROM, for
// mail.Sender.WithName) and the client of its API.
func (a *API) Open(c Config) (mail.Sender, *Client) {
	sender, _ := mail.ParseSender(c.From)
	return sender, a.NewClient(c)
}

// NewClient returns the client of the API c configures (its base URL,
// credential and timeout); c must have passed CheckSender or
// CheckLookup.
func (a *API) NewClient(c Config) *Client {
	base, _ := a.baseURL(c.BaseURL)
	return NewClient(base, a.Header(c.Key), c.Timeout, a.Accepted)
}

// LookupWindow is c's window with the API's defaults where it has none.
func (a *API) LookupWindow(c Config) Window { return c.Or(a.Search) }

// Sender is the Descriptor's Sender of an HTTP provider: what every one
// reads (ReadSender), made the provider's Config by own, which reads what
// only it does, and checked by that Config's Validate, whose problems are
// reported under PROVIDER=<Name>.
func Sender[C interface {
	mail.SenderConfig
	Validate() error
}](a *API, own func(env *envconfig.Reader, c Config) C) func(env *envconfig.Reader, s mail.SenderSettings) mail.SenderConfig {
	return func(env *envconfig.Reader, s mail.SenderSettings) mail.SenderConfig {
		c := own(env, a.ReadSender(env, s))
		env.Check("PROVIDER="+a.Name, c.Validate())
		return c
	}
}

// Lookup is the Descriptor's Lookup of an HTTP provider the reconciler
// can search: what every one reads for it (ReadLookup), made the
// provider's Config by own, and checked by check, whose problems are
// reported under PROVIDER=<Name> (and then there is no look-up); else
// open makes the look-up when the reconciler starts.
func Lookup[C any, L mail.Lookup](a *API, own func(env *envconfig.Reader, c Config) C, check func(C) error, open func(C) (L, error)) func(env *envconfig.Reader) mail.LookupOpener {
	return func(env *envconfig.Reader) mail.LookupOpener {
		c := own(env, a.ReadLookup(env))
		if !env.Check("PROVIDER="+a.Name, check(c)) {
			return nil
		}
		return func(context.Context) (mail.Lookup, error) {
			l, err := open(c)
			if err != nil {
				return nil, err // not l: a nil *Lookup is no nil mail.Lookup
			}
			return l, nil
		}
	}
}

// Webhook is a Descriptor's Webhook for a provider whose webhook one
// secret configures (variable): none while it is unset; else the verifier
// newVerifier makes of the secret, which hook turns into the API's
// Webhook once the service is up. newVerifier's error is reported under
// variable, and then there is no webhook (the API answers 404).
func Webhook[V any](variable string, newVerifier func(secret string) (V, error), hook func(v V, deps mail.WebhookDeps) mail.Webhook) func(env *envconfig.Reader) mail.WebhookOpener {
	return func(env *envconfig.Reader) mail.WebhookOpener {
		secret := env.Secret(variable, "")
		if secret == "" {
			return nil
		}
		v, err := newVerifier(secret)
		if !env.Check(variable, err) {
			return nil
		}
		return func(deps mail.WebhookDeps) mail.Webhook { return hook(v, deps) }
	}
}
