package mail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
)

// Descriptor is everything the binaries know of one provider, in one
// place: its name, how it reads its settings and opens, whether and how
// long it refuses a second message under our key, how the reconciler
// asks it about a message, and how the API takes its webhook. Each
// provider package exports one; internal/roster lists them, and the
// worker, the reconciler and the API read only that list, so adding a
// provider adds a package and one line there.
type Descriptor struct {
	// Name is the provider's value of PROVIDER, and the {provider} of
	// its webhook's URL.
	Name string
	// Dedup is how long the provider refuses a second message under the
	// same ProviderKey (Resend: 24 h); 0 for one that takes no key of
	// ours. Within it, the reconciler may send an ambiguous message again.
	Dedup time.Duration
	// Sender reads what the worker needs to send through the provider,
	// reporting bad settings to env; nil for a provider that only reports
	// on mail sent elsewhere (SES, here).
	Sender func(env *envconfig.Reader, s SenderSettings) SenderConfig
	// Lookup reads what the reconciler needs to ask the provider whether
	// it holds a message, reporting bad settings to env; nil, or a nil
	// LookupOpener, when there is no such search.
	Lookup func(env *envconfig.Reader) LookupOpener
	// Rate is the requests a second the provider allows an account by
	// default, as it documents it (Resend: 2), and Quota the messages a
	// day (0: none documented). <NAME>_RATE and <NAME>_DAILY_QUOTA
	// override them; a provider without a rate is not paced, though a
	// refusal for pace still makes its delivery wait.
	Rate  float64
	Quota int
	// Webhook reads the secret of the provider's webhook, reporting bad
	// settings to env; nil, or a nil WebhookOpener, when it has none or
	// none is configured (the API then answers 404 for it, never an
	// unverified 200).
	Webhook func(env *envconfig.Reader) WebhookOpener
}

// WebhookOpener makes a provider's Webhook once the service it reports
// to is up.
type WebhookOpener func(deps WebhookDeps) Webhook

// WebhookDeps are what a provider's webhook may need of the service.
type WebhookDeps struct {
	// Tokens counts the tokens of signatures that do not cover their
	// event (Mailgun's), so that each is taken once.
	Tokens WebhookTokens
	// Log is the API's logger, for what a webhook does besides
	// returning events (SNS's subscription confirmations).
	Log *slog.Logger
}

// SenderSettings are what every provider's sending shares, read by the
// worker.
type SenderSettings struct {
	From    string        // MAIL_FROM, the sender address, checked by the provider's Validate
	Timeout time.Duration // PROVIDER_TIMEOUT: an HTTP provider's bound on one request
	MaxIdle int           // connections worth keeping open: the worker's concurrency
}

// SenderConfig is one provider's sending settings, as read.
type SenderConfig interface {
	// Open makes the provider; done releases its kept connections.
	Open() (p Provider, done func(), err error)
	// SendTimeout bounds a send's data after the last lease check, and
	// variable names the setting it comes from: the worker refuses one
	// not shorter than LOCK_TTL.
	SendTimeout() (d time.Duration, variable string)
	// String names the provider (and its endpoint) for the start-up log
	// line.
	String() string
}

// Opened is what a SenderConfig's Open returns for a provider made by
// a constructor such as New(cfg): the provider, and its Close to call.
func Opened[P interface {
	Provider
	Close()
}](p P, err error) (Provider, func(), error) {
	if err != nil {
		return nil, nil, err
	}
	return p, p.Close, nil
}

// LookupOpener makes a Lookup, checking at start, where it can, that the
// provider's search answers as expected.
type LookupOpener func(ctx context.Context) (Lookup, error)

// Webhook verifies a provider's event requests.
type Webhook interface {
	// Verify checks the request the provider's way and returns its
	// events. For what the caller sent wrong its errors wrap
	// ErrWebhookUnauthorized (401) or are a *MalformedWebhook (400);
	// any other is ours (500, which the provider retries).
	Verify(ctx context.Context, header http.Header, body []byte) ([]Feedback, error)
	// Challenge is the WWW-Authenticate of a 401, e.g. Basic
	// realm="sekali-webhooks" for credentials a provider sends.
	Challenge() string
}

// SignedWebhook is the Webhook of a provider whose verifier needs
// nothing of the service: Verify checks a request at now, and its
// errors are mapped onto the contract by WebhookError.
type SignedWebhook struct {
	VerifyAt func(header http.Header, body []byte, now time.Time) ([]Feedback, error)
	Realm    string // the WWW-Authenticate of a 401
}

// Verify implements Webhook.
func (w SignedWebhook) Verify(_ context.Context, header http.Header, body []byte) ([]Feedback, error) {
	fs, err := w.VerifyAt(header, body, time.Now())
	return fs, WebhookError(err)
}

// Challenge implements Webhook.
func (w SignedWebhook) Challenge() string { return w.Realm }

// WebhookTokens remembers the tokens of webhook signatures that do not
// cover their event (*notify.Operator): a token seen before is
// ErrWebhookReplay.
type WebhookTokens interface {
	RememberWebhookToken(ctx context.Context, provider, token string, expires time.Time) error
}

var (
	// ErrWebhookUnauthorized: the request's signature, timestamp or
	// credentials are not the provider's (or are too old: a replay).
	ErrWebhookUnauthorized = errors.New("mail: the webhook's signature or credentials are not valid")
	// ErrWebhookReplay: a webhook signature whose token came before
	// (WebhookTokens).
	ErrWebhookReplay = errors.New("mail: the webhook's signature was used before")

	// What a provider's verifier says of a request, wrapped with what
	// was wrong (WebhookError makes the first two a 401, the last a 400).
	// ErrBadSignature: its signature or credentials are missing or not
	// the provider's; ErrStale: its timestamp is too far from now (a
	// replay, or a clock far off); ErrMalformed: its body is not the
	// provider's event.
	ErrBadSignature = errors.New("webhook signature or credentials missing or wrong")
	ErrStale        = errors.New("webhook timestamp too far from now")
	ErrMalformed    = errors.New("webhook body malformed")
)

// MalformedWebhook is a body that is not the provider's event. Reason
// is what the 400 tells the sender: what was wrong with the body, in its
// terms (a missing field, a value of the wrong type), never this
// service's package names or Go types; Err, the whole story, goes to the
// request's log line.
type MalformedWebhook struct {
	Reason string
	Err    error
}

func (e *MalformedWebhook) Error() string { return e.Err.Error() }
func (e *MalformedWebhook) Unwrap() error { return e.Err }

// WebhookError maps a provider's verification error onto the contract:
// ErrBadSignature, ErrStale and ErrWebhookReplay wrap
// ErrWebhookUnauthorized; ErrMalformed becomes a *MalformedWebhook whose
// reason is what err says after the sentinel ("no type", "email.bounced
// without bounce"), or, for a body encoding/json could not take, which
// field or that it is not JSON. Any other error is returned as it is.
func WebhookError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrWebhookUnauthorized):
		return err
	case errors.Is(err, ErrBadSignature), errors.Is(err, ErrStale), errors.Is(err, ErrWebhookReplay):
		return fmt.Errorf("%w: %w", ErrWebhookUnauthorized, err)
	case errors.Is(err, ErrMalformed):
		return malformedWebhook(err, ErrMalformed)
	}
	return err
}

// malformedWebhook is WebhookError's *MalformedWebhook of err, which
// wraps sentinel.
func malformedWebhook(err, sentinel error) *MalformedWebhook {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	reason := strings.TrimPrefix(err.Error(), sentinel.Error()+": ")
	switch {
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		reason = "not valid JSON"
	case errors.As(err, &typ) && typ.Field != "":
		reason = fmt.Sprintf("%s must be a JSON %s, not %s", typ.Field, jsonKind(typ.Type.Kind()), typ.Value)
	case errors.As(err, &typ):
		reason = fmt.Sprintf("must be a JSON %s, not %s", jsonKind(typ.Type.Kind()), typ.Value)
	case reason == err.Error():
		reason = "not an event of this provider"
	}
	return &MalformedWebhook{Reason: reason, Err: err}
}

// jsonKind names the JSON type a field of kind k takes.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	default:
		return "number"
	}
}
