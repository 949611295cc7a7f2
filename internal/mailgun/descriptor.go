package mailgun

import (
	"context"
	"net/http"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Descriptor is Mailgun as the binaries know it (internal/roster lists
// it): it sends, takes no key of ours, so the reconciler searches its
// events by our metadata, and signs its webhooks' timestamp and token,
// not their event, so each token counts once (mail.WebhookTokens).
var Descriptor = mail.Descriptor{
	Name:   api.Name,
	Sender: httpprovider.Sender(&api, readEnv),
	Lookup: httpprovider.Lookup(&api, readEnv, Config.checkLookup, NewLookup),
	Webhook: httpprovider.Webhook("MAILGUN_WEBHOOK_SIGNING_KEY", NewWebhookVerifier, func(v *WebhookVerifier, deps mail.WebhookDeps) mail.Webhook {
		return hook{v: v, tokens: deps.Tokens}
	}),
}

// Open implements mail.SenderConfig.
func (c Config) Open() (mail.Provider, func(), error) { return mail.Opened(New(c)) }

func (c Config) String() string { return api.Name }

// hook is the verifier as the API takes it, with the tokens it counts.
type hook struct {
	v      *WebhookVerifier
	tokens mail.WebhookTokens
}

// Verify refuses, through tokens, a signature whose token came before:
// Mailgun signs a timestamp and a token, not the event, so a captured
// signature could otherwise carry a forged event (a permanent failure,
// which suppresses the address) while its timestamp is accepted.
func (h hook) Verify(ctx context.Context, header http.Header, body []byte) ([]mail.Feedback, error) {
	res, err := h.v.Verify(header, body, time.Now())
	if res.Token != "" {
		// Remembered whatever the event: a token of one that is
		// ignored, or malformed, is as good to a forger.
		if err := h.tokens.RememberWebhookToken(ctx, "mailgun", res.Token, res.Expires); err != nil {
			return nil, mail.WebhookError(err)
		}
	}
	return res.Feedback, mail.WebhookError(err)
}

func (hook) Challenge() string { return `Signature realm="sekali-webhooks"` }
