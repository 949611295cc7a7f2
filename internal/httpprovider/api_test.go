package httpprovider_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// acme is an HTTP provider as the skeleton knows one.
var acme = httpprovider.API{
	Name:           "acme",
	KeyVar:         "ACME_API_KEY",
	BaseURLVar:     "ACME_BASE_URL",
	DefaultBaseURL: "https://api.acme.example",
	HostOnly:       true,
	Header:         func(key string) http.Header { return http.Header{"Authorization": {"Bearer " + key}} },
	Accepted:       func(status int) bool { return status == http.StatusOK },
	Search:         httpprovider.Window{Retention: 72 * time.Hour, Settle: time.Minute},
	MaxRetention:   30 * 24 * time.Hour,
}

// acmeConfig is a provider's Config: the skeleton's, and what only it
// reads (ACME_REGION).
type acmeConfig struct {
	httpprovider.Config
	Region string
}

func (c acmeConfig) Validate() error { return acme.CheckSender(c.Config, c.problems()...) }

func (c acmeConfig) checkLookup() error { return acme.CheckLookup(c.Config, c.problems()...) }

func (c acmeConfig) problems() []error {
	if c.Region == "nowhere" {
		return []error{errors.New("ACME_REGION nowhere: want eu or us")}
	}
	return nil
}

func (c acmeConfig) Open() (mail.Provider, func(), error) { return nil, func() {}, nil }
func (c acmeConfig) String() string                       { return acme.Name }

func readAcme(env *envconfig.Reader, c httpprovider.Config) acmeConfig {
	return acmeConfig{Config: c, Region: env.String("ACME_REGION", "eu")}
}

func envOf(vars map[string]string) *envconfig.Reader {
	return envconfig.New(func(k string) string { return vars[k] })
}

// Every problem is named by its variable, at once: the provider's own
// beside the skeleton's; the look-up is checked without MAIL_FROM, with
// its window.
func TestCheckNamesEveryVariable(t *testing.T) {
	t.Parallel()
	err := acme.CheckSender(httpprovider.Config{Key: "two words", From: "Shop <orders at shop.example>", BaseURL: "http://api.acme.example", Timeout: -1},
		errors.New("ACME_REGION nowhere"))
	for _, want := range []string{"ACME_API_KEY", "MAIL_FROM", "ACME_BASE_URL", "PROVIDER_TIMEOUT", "ACME_REGION"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckSender = %v, want it to name %s", err, want)
		}
	}
	if err := acme.CheckSender(httpprovider.Config{From: "orders@shop.example"}); err == nil || !strings.Contains(err.Error(), "ACME_API_KEY must be set") {
		t.Errorf("no key: %v", err)
	}
	if err := acme.CheckSender(httpprovider.Config{Key: "k", From: "orders@shop.example"}); err != nil {
		t.Errorf("defaults: %v", err)
	}
	err = acme.CheckLookup(httpprovider.Config{Key: "k", Window: httpprovider.Window{Retention: 31 * 24 * time.Hour, Settle: -1}})
	for _, want := range []string{"ACME_RETENTION", "ACME_LOOKUP_SETTLE"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckLookup = %v, want it to name %s", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "MAIL_FROM") {
		t.Errorf("CheckLookup = %v: a look-up sends nothing, from nobody", err)
	}
	// HostOnly: the API's paths carry its version.
	if err := acme.CheckSender(httpprovider.Config{Key: "k", From: "orders@shop.example", BaseURL: "https://api.acme.example/v3"}); err == nil || !strings.Contains(err.Error(), "ACME_BASE_URL") {
		t.Errorf("a path under the host: %v", err)
	}
	if err := acme.CheckSender(httpprovider.Config{Key: "k", From: "orders@shop.example", BaseURL: "https://api.eu.acme.example/"}); err != nil {
		t.Errorf("another host: %v", err)
	}
}

// The descriptor's Sender reads the provider's variables and the
// worker's settings, and reports its problems under PROVIDER=<name>.
func TestSender(t *testing.T) {
	t.Parallel()
	sender := httpprovider.Sender(&acme, readAcme)
	s := mail.SenderSettings{From: "orders@shop.example", Timeout: 5 * time.Second}
	env := envOf(map[string]string{"ACME_API_KEY": "k", "ACME_BASE_URL": "https://api.us.acme.example", "ACME_REGION": "us"})
	got, ok := sender(env, s).(acmeConfig)
	want := acmeConfig{Config: httpprovider.Config{Key: "k", From: s.From, BaseURL: "https://api.us.acme.example", Timeout: s.Timeout}, Region: "us"}
	if !ok || got != want || env.Err() != nil {
		t.Errorf("Sender = %+v, %v; want %+v", got, env.Err(), want)
	}
	if d, v := got.SendTimeout(); d != s.Timeout || v != "PROVIDER_TIMEOUT" {
		t.Errorf("SendTimeout = %s, %s", d, v)
	}
	env = envOf(map[string]string{"ACME_REGION": "nowhere"})
	sender(env, s)
	if err := env.Err(); err == nil || !strings.Contains(err.Error(), "PROVIDER=acme") || !strings.Contains(err.Error(), "ACME_API_KEY") ||
		!strings.Contains(err.Error(), "ACME_REGION") {
		t.Errorf("bad settings: %v, want them named under PROVIDER=acme", err)
	}
}

// The descriptor's Lookup reads the window too, opens nothing when its
// settings are wrong, and opens with them otherwise.
func TestLookup(t *testing.T) {
	t.Parallel()
	var opened acmeConfig
	lookup := httpprovider.Lookup(&acme, readAcme, acmeConfig.checkLookup, func(c acmeConfig) (*nowhere, error) {
		opened = c
		return nil, errors.New("not today")
	})
	env := envOf(map[string]string{"ACME_API_KEY": "k", "ACME_RETENTION": "48h"})
	open := lookup(env)
	if open == nil || env.Err() != nil {
		t.Fatalf("Lookup = %v, %v", open, env.Err())
	}
	// A failed open is an error and no look-up: not a nil *nowhere in a
	// non-nil mail.Lookup.
	if l, err := open(context.Background()); l != nil || err == nil {
		t.Errorf("open = %v, %v; want nil and the error", l, err)
	}
	if opened.Key != "k" || opened.Retention != 48*time.Hour || opened.Region != "eu" {
		t.Errorf("opened with %+v", opened)
	}
	if w := acme.LookupWindow(opened.Config); w != (httpprovider.Window{Retention: 48 * time.Hour, Settle: time.Minute}) {
		t.Errorf("window %+v: want ACME_RETENTION's, and the settle margin's default", w)
	}
	env = envOf(map[string]string{"ACME_API_KEY": "k", "ACME_RETENTION": "800h"})
	if open := lookup(env); open != nil || env.Err() == nil || !strings.Contains(env.Err().Error(), "PROVIDER=acme") {
		t.Errorf("a retention past what a plan keeps: %v, %v; want no look-up and the problem", open != nil, env.Err())
	}
}

type nowhere struct{ mail.Lookup }

// A webhook one secret configures: none while it is unset, its problem
// named once under the variable, the hook made with the service's
// dependencies otherwise.
func TestWebhook(t *testing.T) {
	t.Parallel()
	webhook := httpprovider.Webhook("ACME_WEBHOOK_SECRET", func(secret string) (string, error) {
		if !strings.HasPrefix(secret, "whsec_") {
			return "", errors.New("ACME_WEBHOOK_SECRET: want whsec_…")
		}
		return secret, nil
	}, func(secret string, deps mail.WebhookDeps) mail.Webhook {
		return mail.SignedWebhook{Realm: secret}
	})
	env := envOf(nil)
	if open := webhook(env); open != nil || env.Err() != nil {
		t.Errorf("unset: %v, %v; want none", open != nil, env.Err())
	}
	env = envOf(map[string]string{"ACME_WEBHOOK_SECRET": "plain"})
	if open := webhook(env); open != nil || env.Err() == nil || strings.Count(env.Err().Error(), "ACME_WEBHOOK_SECRET") != 1 {
		t.Errorf("bad secret: %v, %v; want none, the variable named once", open != nil, env.Err())
	}
	env = envOf(map[string]string{"ACME_WEBHOOK_SECRET": "whsec_x"})
	open := webhook(env)
	if open == nil || env.Err() != nil {
		t.Fatalf("good secret: %v, %v", open != nil, env.Err())
	}
	if got := open(mail.WebhookDeps{}).Challenge(); got != "whsec_x" {
		t.Errorf("hook made of %q", got)
	}
}

// A look-up's request is answered by a 200 with JSON, or it is an error
// that says what came.
func TestGet(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = io.WriteString(w, `{"items": []}`)
		case "/html":
			_, _ = io.WriteString(w, `<html>maintenance</html>`)
		default:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	})
	c := client(t, srv, time.Second)
	var page struct{ Items []string }
	if err := c.Get(context.Background(), "/ok", &page); err != nil || page.Items == nil {
		t.Errorf("200 with JSON: %v, %+v", err, page)
	}
	for target, want := range map[string]string{"/html": "not JSON", "/busy": "answered 503: busy"} {
		if err := c.Get(context.Background(), target, &page); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", target, err, want)
		}
	}
}

// A probe passes on the provider's accepted answer or one its refusal
// lets pass, and is otherwise unavailable, whatever the provider's
// classification made of the answer: it is about us.
func TestProbe(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/up":
		case "/restricted":
			http.Error(w, "restricted_api_key", http.StatusUnauthorized)
		default:
			http.Error(w, "no such recipient", http.StatusUnprocessableEntity)
		}
	})
	c := client(t, srv, time.Second)
	refused := func(ans httpprovider.Answer) *mail.SendError {
		if strings.Contains(string(ans.Body), "restricted_api_key") {
			return nil
		}
		return &mail.SendError{Outcome: mail.OutcomePermanent, Stage: mail.StageRecipient, Reply: mail.HTTPStatus(ans.Status), Err: errors.New(string(ans.Body))}
	}
	for _, target := range []string{"/up", "/restricted"} {
		if err := c.Probe(context.Background(), target, refused); err != nil {
			t.Errorf("%s: %v, want it to pass", target, err)
		}
	}
	var se *mail.SendError
	if err := c.Probe(context.Background(), "/down", refused); !errors.As(err, &se) || se.Outcome != mail.OutcomeUnavailable || se.Reply.Code != http.StatusUnprocessableEntity {
		t.Errorf("refused: %v, want unavailable with the 422", err)
	}
}
