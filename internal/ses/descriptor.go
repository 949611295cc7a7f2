package ses

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Descriptor is Amazon SES as the binaries know it (internal/roster
// lists it): it sends through SES's v2 API with the AWS SDK, takes no
// key of ours and has no search the reconciler could ask (ambiguous
// sends follow RECONCILE_POLICIES), and reports through SNS, on mail
// sent through its API or its SMTP endpoint.
var Descriptor = mail.Descriptor{
	Name: "ses",
	Sender: func(env *envconfig.Reader, s mail.SenderSettings) mail.SenderConfig {
		c := ReadEnv(env)
		c.From, c.Timeout = s.From, s.Timeout
		env.Check("PROVIDER=ses", c.Validate())
		return c
	},
	Webhook: func(env *envconfig.Reader) mail.WebhookOpener {
		var arns []string
		for _, a := range strings.Split(env.String("SES_SNS_TOPIC_ARNS", ""), ",") {
			if a = strings.TrimSpace(a); a != "" {
				arns = append(arns, a)
			}
		}
		if len(arns) == 0 {
			return nil
		}
		v, err := NewWebhookVerifier(arns...)
		if !env.Check("SES_SNS_TOPIC_ARNS", err) {
			return nil
		}
		return func(deps mail.WebhookDeps) mail.Webhook { return hook{v: v, log: deps.Log} }
	},
}

// hook is the verifier as the API takes it.
type hook struct {
	v   *WebhookVerifier
	log *slog.Logger
}

// Verify returns SES's feedback, and confirms a verified subscription of
// one of our topics: confirming it is what makes SNS send events.
func (h hook) Verify(ctx context.Context, header http.Header, body []byte) ([]mail.Feedback, error) {
	res, err := h.v.Verify(ctx, header, body, time.Now())
	if err := mail.WebhookError(err); err != nil {
		return nil, err
	}
	if c := res.Confirmation; c != nil {
		if err := h.v.Confirm(ctx, c); err != nil {
			return nil, err
		}
		if h.log != nil {
			h.log.InfoContext(ctx, "SNS subscription confirmed", "type", c.Type, "topic", c.TopicARN)
		}
	}
	return res.Feedback, nil
}

func (hook) Challenge() string { return `Signature realm="sekali-webhooks"` }
