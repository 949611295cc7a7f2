package resend

import (
	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Descriptor is Resend as the binaries know it (internal/roster lists
// it): it sends, refuses a second message under our key for
// DedupWindow, so it needs no look-up, and signs its webhooks.
var Descriptor = mail.Descriptor{
	Name:  api.Name,
	Dedup: DedupWindow,
	// "The default maximum rate limit is 5 requests per second per
	// team", across its keys (Resend's Usage Limits page; it said 2
	// before). An account allowed less is learned from its
	// ratelimit-limit header at its first answer (pace.FromHTTP).
	Rate:   5,
	Sender: httpprovider.Sender(&api, func(_ *envconfig.Reader, c httpprovider.Config) Config { return Config{Config: c} }),
	Webhook: httpprovider.Webhook("RESEND_WEBHOOK_SECRET", NewWebhookVerifier, func(v *WebhookVerifier, _ mail.WebhookDeps) mail.Webhook {
		return mail.SignedWebhook{VerifyAt: v.Verify, Realm: `Signature realm="sekali-webhooks"`}
	}),
}

// Open implements mail.SenderConfig.
func (c Config) Open() (mail.Provider, func(), error) { return mail.Opened(New(c)) }

func (c Config) String() string { return api.Name }
