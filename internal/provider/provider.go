// Package provider is the one list of the mail providers the service
// knows, which the worker (PROVIDER: who sends), the reconciler (who is
// asked about an ambiguous send, and how long it deduplicates) and the
// API (whose webhooks it takes) all read. Each provider describes itself
// in its own package (mail.Descriptor); adding one adds that package and
// a line to All.
package provider

import (
	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailgun"
	"github.com/sekali-dev/sekali/internal/postmark"
	"github.com/sekali-dev/sekali/internal/resend"
	"github.com/sekali-dev/sekali/internal/ses"
	"github.com/sekali-dev/sekali/internal/smtp"
)

// All lists every provider; the first is PROVIDER's default.
var All = []mail.Descriptor{smtp.Descriptor, resend.Descriptor, postmark.Descriptor, mailgun.Descriptor, ses.Descriptor}

// Senders names the providers that can send: the values PROVIDER takes.
func Senders() []string {
	var names []string
	for _, d := range All {
		if d.Sender != nil {
			names = append(names, d.Name)
		}
	}
	return names
}

// Read reads PROVIDER, and reports a value that names no sender to env;
// its descriptor is then the default's.
func Read(env *envconfig.Reader) mail.Descriptor {
	senders := Senders()
	name := env.OneOf("PROVIDER", senders[0], senders...)
	for _, d := range All {
		if d.Name == name {
			return d
		}
	}
	return All[0] // OneOf returned the default
}

// Webhooks are the webhooks the environment configures, by provider
// name, read and not yet opened.
type Webhooks map[string]mail.WebhookOpener

// ReadWebhooks reads the webhook of every provider whose secret the
// environment sets; bad settings are reported to env. None is the
// default.
func ReadWebhooks(env *envconfig.Reader) Webhooks {
	hooks := Webhooks{}
	for _, d := range All {
		if d.Webhook == nil {
			continue
		}
		if open := d.Webhook(env); open != nil {
			hooks[d.Name] = open
		}
	}
	return hooks
}

// Open opens each webhook with deps.
func (w Webhooks) Open(deps mail.WebhookDeps) map[string]mail.Webhook {
	hooks := make(map[string]mail.Webhook, len(w))
	for name, open := range w {
		hooks[name] = open(deps)
	}
	return hooks
}
