package postmark

import (
	"context"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Descriptor is Postmark as the binaries know it (internal/provider
// lists it): it sends, takes no key of ours (its Idempotency-Key is
// not a deduplication), so the reconciler searches its messages by our
// metadata, and authenticates its webhooks with Basic credentials.
var Descriptor = mail.Descriptor{
	Name: "postmark",
	Sender: func(env *envconfig.Reader, s mail.SenderSettings) mail.SenderConfig {
		c := ReadEnv(env)
		c.From, c.Timeout = s.From, s.Timeout
		env.Check("PROVIDER=postmark", c.Validate())
		return c
	},
	Lookup: func(env *envconfig.Reader) mail.LookupOpener {
		c := ReadLookupEnv(env)
		if !env.Check("PROVIDER=postmark", c.Validate()) {
			return nil
		}
		return func(context.Context) (mail.Lookup, error) { return NewLookup(c) }
	},
	Webhook: func(env *envconfig.Reader) mail.WebhookOpener {
		user, password := env.String("POSTMARK_WEBHOOK_USER", ""), env.Secret("POSTMARK_WEBHOOK_PASSWORD", "")
		if user == "" && password == "" {
			return nil
		}
		v, err := NewWebhookVerifier(user, password)
		if !env.Check("POSTMARK_WEBHOOK_PASSWORD", err) {
			return nil
		}
		return func(mail.WebhookDeps) mail.Webhook {
			return mail.SignedWebhook{VerifyAt: v.Verify, Unauthorized: []error{ErrBadCredentials}, Malformed: []error{ErrMalformed}, Realm: `Basic realm="sekali-webhooks"`}
		}
	},
}

// Open implements mail.SenderConfig.
func (c Config) Open() (mail.Provider, func(), error) { return mail.Opened(New(c)) }

// SendTimeout implements mail.SenderConfig: PROVIDER_TIMEOUT.
func (c Config) SendTimeout() (time.Duration, string) { return c.Timeout, "PROVIDER_TIMEOUT" }

func (c Config) String() string { return "postmark" }
