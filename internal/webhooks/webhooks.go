// Package webhooks builds, from the environment, the providers' webhooks
// that the API takes at POST /v1/webhooks/{provider}: each verifies a
// request the provider's documented way (docs/providers.md) and maps its
// errors onto the answers of package httpapi.
package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpapi"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailgun"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postmark"
	"github.com/sekali-dev/sekali/internal/resend"
	"github.com/sekali-dev/sekali/internal/ses"
)

// Settings are the providers' webhooks as the environment configures
// them: each provider whose secret is set, its verifier built.
type Settings struct {
	resend   *resend.WebhookVerifier
	postmark *postmark.WebhookVerifier
	mailgun  *mailgun.WebhookVerifier
	ses      *ses.WebhookVerifier
}

// ReadEnv reads which providers' events the API takes: each provider
// whose secret is set. None is the default — an unconfigured provider's
// URL answers 404, never an unverified 200. Bad settings are reported to
// env.
func ReadEnv(env *envconfig.Reader) Settings {
	var s Settings
	if secret := env.Secret("RESEND_WEBHOOK_SECRET", ""); secret != "" {
		v, err := resend.NewWebhookVerifier(secret)
		if check(env, "RESEND_WEBHOOK_SECRET", err) {
			s.resend = v
		}
	}
	user, password := env.String("POSTMARK_WEBHOOK_USER", ""), env.Secret("POSTMARK_WEBHOOK_PASSWORD", "")
	if user != "" || password != "" {
		v, err := postmark.NewWebhookVerifier(user, password)
		if check(env, "POSTMARK_WEBHOOK_PASSWORD", err) {
			s.postmark = v
		}
	}
	if key := env.Secret("MAILGUN_WEBHOOK_SIGNING_KEY", ""); key != "" {
		v, err := mailgun.NewWebhookVerifier(key)
		if check(env, "MAILGUN_WEBHOOK_SIGNING_KEY", err) {
			s.mailgun = v
		}
	}
	if arns := splitList(env.String("SES_SNS_TOPIC_ARNS", "")); len(arns) > 0 {
		v, err := ses.NewWebhookVerifier(arns...)
		if check(env, "SES_SNS_TOPIC_ARNS", err) {
			s.ses = v
		}
	}
	return s
}

// Tokens remembers the tokens of webhook signatures that do not cover
// their event (*notify.Operator): a token seen before is
// notify.ErrWebhookReplay.
type Tokens interface {
	RememberWebhookToken(ctx context.Context, provider, token string, expires time.Time) error
}

// Hooks returns the configured providers' webhooks; tokens may be nil
// only when Mailgun's is not configured. Mailgun's refuses, through
// tokens, a signature whose token came before: Mailgun signs a
// timestamp and a token, not the event, so a captured signature could
// otherwise carry a forged event (a permanent failure, which suppresses
// the address) while its timestamp is accepted. Resend's (Svix) signature
// covers the body, and Postmark's credentials are no signature to replay
// (docs/providers.md).
func (s Settings) Hooks(tokens Tokens) []httpapi.Webhook {
	var hooks []httpapi.Webhook
	if v := s.resend; v != nil {
		hooks = append(hooks, httpapi.Webhook{
			Provider: "resend", Challenge: `Signature realm="sekali-webhooks"`,
			Verify: func(_ context.Context, h http.Header, body []byte) ([]mail.Feedback, error) {
				fs, err := v.Verify(h, body, time.Now())
				return fs, webhookError(err, []error{resend.ErrBadSignature, resend.ErrStale}, []error{resend.ErrMalformed})
			},
		})
	}
	if v := s.postmark; v != nil {
		hooks = append(hooks, httpapi.Webhook{
			Provider: "postmark", Challenge: `Basic realm="sekali-webhooks"`,
			Verify: func(_ context.Context, h http.Header, body []byte) ([]mail.Feedback, error) {
				fs, err := v.Verify(h, body, time.Now())
				return fs, webhookError(err, []error{postmark.ErrBadCredentials}, []error{postmark.ErrMalformed})
			},
		})
	}
	if v := s.mailgun; v != nil {
		hooks = append(hooks, httpapi.Webhook{
			Provider: "mailgun", Challenge: `Signature realm="sekali-webhooks"`,
			Verify: func(ctx context.Context, h http.Header, body []byte) ([]mail.Feedback, error) {
				res, err := v.Verify(h, body, time.Now())
				if res.Token != "" {
					// Remembered whatever the event: a token of one that
					// is ignored, or malformed, is as good to a forger.
					if err := tokens.RememberWebhookToken(ctx, "mailgun", res.Token, res.Expires); err != nil {
						return nil, webhookError(err, []error{notify.ErrWebhookReplay}, nil)
					}
				}
				return res.Feedback, webhookError(err, []error{mailgun.ErrBadSignature, mailgun.ErrStale}, []error{mailgun.ErrMalformed})
			},
		})
	}
	if v := s.ses; v != nil {
		hooks = append(hooks, httpapi.Webhook{
			Provider: "ses", Challenge: `Signature realm="sekali-webhooks"`,
			Verify: func(ctx context.Context, h http.Header, body []byte) ([]mail.Feedback, error) {
				res, err := v.Verify(ctx, h, body, time.Now())
				if err := webhookError(err, []error{ses.ErrBadSignature, ses.ErrStale}, []error{ses.ErrMalformed}); err != nil {
					return nil, err
				}
				if c := res.Confirmation; c != nil {
					// A verified subscription of one of our topics:
					// confirming it is what makes SNS send events.
					if err := v.Confirm(ctx, c); err != nil {
						return nil, err
					}
					httpapi.LogAttrs(ctx, slog.String("sns_confirmed", c.Type), slog.String("topic", c.TopicARN))
				}
				return res.Feedback, nil
			},
		})
	}
	return hooks
}

// webhookError maps a provider's verification error onto what the HTTP
// layer answers: 401 for a signature, credentials or age that are not the
// provider's, 400 for a body that is not its event, 500 for the rest
// (which the provider retries).
func webhookError(err error, unauthorized, malformed []error) error {
	if err == nil {
		return nil
	}
	for _, e := range unauthorized {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", httpapi.ErrWebhookUnauthorized, err)
		}
	}
	for _, e := range malformed {
		if errors.Is(err, e) {
			return httpapi.NewMalformedWebhook(err, e)
		}
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// check reports err under name, without the name twice when the
// provider's error already starts with it; it says whether there was none.
func check(env *envconfig.Reader, name string, err error) bool {
	if err != nil && strings.HasPrefix(err.Error(), name) {
		err = errors.New(strings.TrimLeft(strings.TrimPrefix(err.Error(), name), ": "))
	}
	env.Check(name, err)
	return err == nil
}
