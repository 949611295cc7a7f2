package resend

import (
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Descriptor is Resend as the binaries know it (internal/provider lists
// it): it sends, refuses a second message under our key for
// DedupWindow, so it needs no look-up, and signs its webhooks.
var Descriptor = mail.Descriptor{
	Name:  "resend",
	Dedup: DedupWindow,
	Sender: func(env *envconfig.Reader, s mail.SenderSettings) mail.SenderConfig {
		c := Config{APIKey: env.Secret("RESEND_API_KEY", ""), From: s.From, BaseURL: env.String("RESEND_BASE_URL", ""), Timeout: s.Timeout}
		env.Check("PROVIDER=resend", c.Validate())
		return c
	},
	Webhook: func(env *envconfig.Reader) mail.WebhookOpener {
		secret := env.Secret("RESEND_WEBHOOK_SECRET", "")
		if secret == "" {
			return nil
		}
		v, err := NewWebhookVerifier(secret)
		if !env.Check("RESEND_WEBHOOK_SECRET", err) {
			return nil
		}
		return func(mail.WebhookDeps) mail.Webhook {
			return mail.SignedWebhook{VerifyAt: v.Verify, Unauthorized: []error{ErrBadSignature, ErrStale}, Malformed: []error{ErrMalformed}, Realm: `Signature realm="sekali-webhooks"`}
		}
	},
}

// Open implements mail.SenderConfig.
func (c Config) Open() (mail.Provider, func(), error) { return mail.Opened(New(c)) }

// SendTimeout implements mail.SenderConfig: PROVIDER_TIMEOUT.
func (c Config) SendTimeout() (time.Duration, string) { return c.Timeout, "PROVIDER_TIMEOUT" }

func (c Config) String() string { return "resend" }
