package postmark

import (
	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Descriptor is Postmark as the binaries know it (internal/roster lists
// it): it sends, takes no key of ours (its Idempotency-Key is not a
// deduplication), so the reconciler searches its messages by our
// metadata, and authenticates its webhooks with Basic credentials.
var Descriptor = mail.Descriptor{
	Name:   api.Name,
	Sender: httpprovider.Sender(&api, readEnv),
	Lookup: httpprovider.Lookup(&api, readEnv, Config.checkLookup, newLookup),
	// Two variables, not one secret: the user and the password Postmark
	// sends, either set configuring it.
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
			return mail.SignedWebhook{VerifyAt: v.Verify, Realm: `Basic realm="sekali-webhooks"`}
		}
	},
}

// Open implements mail.SenderConfig.
func (c Config) Open() (mail.Provider, func(), error) { return mail.Opened(New(c)) }

func (c Config) String() string { return api.Name }
