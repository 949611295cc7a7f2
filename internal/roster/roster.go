// Package roster is the one list of the mail providers this build
// knows (All), which every binary reads: the worker (PROVIDER or
// PROVIDERS: who sends, in order), the reconciler (who is asked about an
// ambiguous send, and how long each deduplicates) and the API (whose
// webhooks it takes). Each provider describes itself in its own package
// (a mail.Descriptor; mail.Provider is the contract it implements).
// Adding one adds that package and a line to All; this package's tests
// then name what else must follow it: the depguard rules and the
// OpenAPI document's provider names.
package roster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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

// Read reads the providers the workers send through, in order of
// preference: PROVIDERS, a comma-separated list (failover: each attempt
// goes to the first that is up), or PROVIDER, one. A name that is no
// sender, a name given twice, or both variables set is reported to env;
// the list is then the default's, smtp alone.
func Read(env *envconfig.Reader) []mail.Descriptor {
	senders := Senders()
	list := env.String("PROVIDERS", "")
	if list == "" {
		name := env.OneOf("PROVIDER", senders[0], senders...)
		return []mail.Descriptor{byName(name)}
	}
	if env.String("PROVIDER", "") != "" {
		env.Check("PROVIDER", fmt.Errorf("set PROVIDERS or PROVIDER, not both (PROVIDERS=%s)", list))
		return All[:1]
	}
	var out []mail.Descriptor
	var errs []error
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case !slices.Contains(senders, name):
			errs = append(errs, fmt.Errorf("%q is not a provider that sends (want %s)", name, strings.Join(senders, ", ")))
		case seen[name]:
			errs = append(errs, fmt.Errorf("%s is named twice", name))
		default:
			seen[name] = true
			out = append(out, byName(name))
		}
	}
	if !env.Check("PROVIDERS", errors.Join(errs...)) {
		return All[:1]
	}
	return out
}

// Names are the descriptors' names, in order.
func Names(ds []mail.Descriptor) []string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	return names
}

// byName is the descriptor named name, which must be in All.
func byName(name string) mail.Descriptor {
	for _, d := range All {
		if d.Name == name {
			return d
		}
	}
	return All[0] // PROVIDER's default: OneOf returned it for a bad value
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

// DedupWindows reads, for each of ds, how long after an attempt whose
// outcome is unknown a delivery may be sent again through that provider
// because it refuses a second message under our key: its Dedup less an
// hour of margin (Resend: 23 h), and, for the first of the list,
// PROVIDER_DEDUP_WINDOW instead when set (a relay that deduplicates by a
// header we send, such as Resend's SMTP endpoint, says so with it). The
// worker holds a pinned delivery past its window, and the reconciler
// sends an ambiguous one again only within it, so both read it here. A
// window longer than the provider's own Dedup is reported to env: past
// Dedup a second message is delivered.
func DedupWindows(env *envconfig.Reader, ds []mail.Descriptor) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = max(d.Dedup-time.Hour, 0)
		if i > 0 {
			continue
		}
		out[i] = env.DurationOrZero("PROVIDER_DEDUP_WINDOW", out[i])
		if d.Dedup > 0 && out[i] > d.Dedup {
			env.Check("PROVIDER_DEDUP_WINDOW", fmt.Errorf("%s is longer than the %s in which %s refuses a second message under our key", out[i], d.Dedup, d.Name))
		}
	}
	return out
}
