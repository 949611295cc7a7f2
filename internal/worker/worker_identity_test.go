package worker_test

import (
	"context"
	"encoding/json"
	netmail "net/mail"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
)

// A template's meta.json reaches the e-mail: its From name in the
// recipient's language, its Reply-To; every message says it was sent
// automatically.
func TestTemplateSenderReachesTheEmail(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	tmpl, err := mailtemplate.Load(mailtemplate.Config{Dir: "../../deploy/templates", DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	w := e.worker(t, workerOpts{templates: tmpl})
	order := e.checkout(t, "budi@example.com")
	sample, err := tmpl.Sample("payment-reminder")
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(sample, &data); err != nil {
		t.Fatal(err)
	}
	d := e.f.Scheduled(order.OrderID, "payment-reminder", order.Recipient, data, time.Time{})
	e.deliver(t, w, d)
	var got *smtpsink.Message
	for _, m := range e.sink.Messages() {
		if m.Header.Get("Reply-To") != "" {
			got = &m
		}
	}
	if got == nil {
		t.Fatal("no e-mail with a Reply-To at the sink")
	}
	from, err := netmail.ParseAddress(got.Header.Get("From"))
	if err != nil || from.Name != "Toko Ana · Pembayaran" || from.Address != "orders@"+mailDomain {
		t.Errorf("From %q (%v)", got.Header.Get("From"), err)
	}
	if rt, _ := netmail.ParseAddress(got.Header.Get("Reply-To")); rt == nil || rt.Address != "payments@shop.example" {
		t.Errorf("Reply-To %q", got.Header.Get("Reply-To"))
	}
	if got.Header.Get("Auto-Submitted") != "auto-generated" {
		t.Errorf("Auto-Submitted %q", got.Header.Get("Auto-Submitted"))
	}
}

// newsletter is a subscription template, in a directory of its own.
func newsletter(t *testing.T) *mailtemplate.Templates {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"newsletter/schema.json":  `{"type": "object", "required": ["customer_name"], "properties": {"customer_name": {"type": "string"}}}`,
		"newsletter/sample.json":  `{"customer_name": "Ana"}`,
		"newsletter/meta.json":    `{"from_name": "Toko Ana Kabar", "category": "subscription"}`,
		"newsletter/subject.tmpl": "Kabar dari Toko Ana",
		"newsletter/text.tmpl":    "Halo {{.customer_name}}",
		"newsletter/html.tmpl":    "<p>Halo {{.customer_name}}</p>",
	} {
		testenv.WriteFile(t, filepath.Join(dir, filepath.FromSlash(name)), body)
	}
	tmpl, err := mailtemplate.Load(mailtemplate.Config{Dir: dir, DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// A subscription template's message carries one-click unsubscribe whose
// token is the recipient's; a transactional one does not. Once the
// recipient unsubscribes, the subscription template's next delivery is
// suppressed without a try, and the order's confirmation still goes out.
func TestSubscriptionMailAndUnsubscribe(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	const secret = "unsubscribe-secret-unsubscribe-secret"
	tmpl := newsletter(t)
	w := e.worker(t, workerOpts{templates: tmpl, unsubscribe: worker.Unsubscribe{BaseURL: "https://shop.example/sekali/", Secret: secret, Mailto: "leave@shop.example"}})

	order := e.checkout(t, "budi@example.com")
	news := e.f.Scheduled(order.OrderID, "newsletter", order.Recipient, map[string]string{"customer_name": "Budi"}, time.Time{})
	e.deliver(t, w, news)
	var got *smtpsink.Message
	for _, m := range e.sink.Messages() {
		if m.Header.Get("Subject") == "Kabar dari Toko Ana" {
			got = &m
		}
	}
	if got == nil {
		t.Fatal("the newsletter did not arrive")
	}
	lu := got.Header.Get("List-Unsubscribe")
	token := strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(lu, ",", 2)[0], "<https://shop.example/sekali/v1/unsubscribe/"), ">")
	if c, err := mail.ParseUnsubscribeToken(secret, token, time.Now(), mail.DefaultUnsubscribeTTL); err != nil || c.Recipient != "budi@example.com" || c.Category != "subscription" || c.Legacy() ||
		!strings.Contains(lu, "<mailto:leave@shop.example?subject=unsubscribe>") || got.Header.Get("List-Unsubscribe-Post") != "List-Unsubscribe=One-Click" {
		t.Errorf("List-Unsubscribe %q (token %+v, %v), List-Unsubscribe-Post %q", lu, c, err, got.Header.Get("List-Unsubscribe-Post"))
	}

	if added, err := e.ops.Unsubscribe(context.Background(), "Budi@Example.com", "subscription"); err != nil || !added {
		t.Fatalf("Unsubscribe = %v, %v", added, err)
	}
	again := e.f.Scheduled(order.OrderID, "newsletter", order.Recipient, map[string]string{"customer_name": "Budi"}, time.Time{})
	e.deliver(t, w, again)
	if d := e.f.Get(again.ID); d.Status != notify.StatusSuppressed || !strings.Contains(d.LastError, "unsubscribed") {
		t.Errorf("the newsletter after the unsubscribe is %s (%q), want suppressed", d.Status, d.LastError)
	}
	confirmation := e.checkout(t, "budi@example.com")
	e.deliver(t, e.worker(t, workerOpts{unsubscribe: worker.Unsubscribe{BaseURL: "https://shop.example/sekali", Secret: secret}}), confirmation)
	if d := e.f.Get(confirmation.ID); d.Status != notify.StatusSent {
		t.Errorf("the order confirmation after the unsubscribe is %s, want sent", d.Status)
	}
	for _, m := range e.sink.Messages() {
		if m.Header.Get("List-Unsubscribe") != "" && m.Header.Get("Subject") != "Kabar dari Toko Ana" {
			t.Errorf("a transactional message carries List-Unsubscribe: %q", m.Header.Get("Subject"))
		}
	}
}
