package notify_test

import (
	"encoding/json"
	"net/mail"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/smtpsink"
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
	from, err := mail.ParseAddress(got.Header.Get("From"))
	if err != nil || from.Name != "Toko Ana · Pembayaran" || from.Address != "orders@"+mailDomain {
		t.Errorf("From %q (%v)", got.Header.Get("From"), err)
	}
	if rt, _ := mail.ParseAddress(got.Header.Get("Reply-To")); rt == nil || rt.Address != "payments@shop.example" {
		t.Errorf("Reply-To %q", got.Header.Get("Reply-To"))
	}
	if got.Header.Get("Auto-Submitted") != "auto-generated" {
		t.Errorf("Auto-Submitted %q", got.Header.Get("Auto-Submitted"))
	}
}
