package roster_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/roster"
)

// The one list: every provider once, by a name PROVIDER and the webhook
// URL can carry; the senders are what PROVIDER takes, smtp the default.
func TestTheList(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	var senders []string
	for _, d := range roster.All {
		if d.Name == "" || d.Name != strings.ToLower(d.Name) || strings.ContainsAny(d.Name, " /") || seen[d.Name] {
			t.Errorf("provider name %q: empty, not lower case, not a path segment, or twice", d.Name)
		}
		seen[d.Name] = true
		if d.Sender == nil && d.Webhook == nil {
			t.Errorf("%s neither sends nor reports", d.Name)
		}
		if d.Dedup > 0 && d.Sender == nil {
			t.Errorf("%s deduplicates what it does not send", d.Name)
		}
		if d.Sender != nil {
			senders = append(senders, d.Name)
		}
	}
	if got := roster.Senders(); !slices.Equal(got, senders) {
		t.Errorf("senders %v, want those of All that send, in its order: %v", got, senders)
	}
	env := envconfig.New(func(string) string { return "" })
	if ds := roster.Read(env); !slices.Equal(roster.Names(ds), []string{"smtp"}) || env.Err() != nil {
		t.Errorf("PROVIDER unset: %v, %v", roster.Names(ds), env.Err())
	}
	env = envconfig.New(func(k string) string { return map[string]string{"PROVIDER": "sendgrid"}[k] })
	if roster.Read(env); env.Err() == nil || !strings.Contains(env.Err().Error(), strings.Join(senders, ", ")) {
		t.Errorf("PROVIDER=sendgrid: %v", env.Err())
	}
	env = envconfig.New(func(k string) string { return map[string]string{"PROVIDERS": "ses, smtp"}[k] })
	if ds := roster.Read(env); !slices.Equal(roster.Names(ds), []string{"ses", "smtp"}) || env.Err() != nil {
		t.Errorf("PROVIDERS=ses, smtp: %v, %v", roster.Names(ds), env.Err())
	}
}

// Only the webhooks whose secrets are set are taken; a bad secret is a
// configuration error that names its variable once.
func TestReadWebhooks(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"RESEND_WEBHOOK_SECRET": "not-a-whsec", "MAILGUN_WEBHOOK_SIGNING_KEY": "key-abc",
		"POSTMARK_WEBHOOK_USER": "shop", "POSTMARK_WEBHOOK_PASSWORD": "short"}
	env := envconfig.New(func(k string) string { return vars[k] })
	hooks := roster.ReadWebhooks(env)
	if _, ok := hooks["mailgun"]; !ok || len(hooks) != 1 {
		t.Errorf("webhooks %v, want mailgun's alone", hooks)
	}
	err := env.Err()
	// Resend's says "NAME: …", Postmark's "NAME must …": both once.
	for _, name := range []string{"RESEND_WEBHOOK_SECRET", "POSTMARK_WEBHOOK_PASSWORD"} {
		if err == nil || strings.Count(err.Error(), name) != 1 {
			t.Errorf("error %v: want %s named once", err, name)
		}
	}
}

// The window in which a delivery whose outcome is unknown may be sent
// again: the provider's Dedup less an hour, or PROVIDER_DEDUP_WINDOW for
// the first of the list, never longer than what the provider promises.
func TestDedupWindows(t *testing.T) {
	t.Parallel()
	read := func(vars map[string]string) ([]time.Duration, error) {
		env := envconfig.New(func(k string) string { return vars[k] })
		ds := roster.Read(env)
		return roster.DedupWindows(env, ds), env.Err()
	}
	if got, err := read(map[string]string{"PROVIDERS": "resend,smtp"}); err != nil || !slices.Equal(got, []time.Duration{23 * time.Hour, 0}) {
		t.Errorf("resend, smtp: %v, %v; want 23h, 0", got, err)
	}
	// Resend's SMTP endpoint deduplicates by a header we send.
	if got, err := read(map[string]string{"PROVIDER": "smtp", "PROVIDER_DEDUP_WINDOW": "20h"}); err != nil || !slices.Equal(got, []time.Duration{20 * time.Hour}) {
		t.Errorf("smtp with a window: %v, %v; want 20h", got, err)
	}
	if _, err := read(map[string]string{"PROVIDER": "resend", "PROVIDER_DEDUP_WINDOW": "48h"}); err == nil || !strings.Contains(err.Error(), "PROVIDER_DEDUP_WINDOW") {
		t.Errorf("resend with 48h: %v, want refused: Resend forgets a key after 24 h", err)
	}
}
