package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// The checkout's locale travels with the intent: the e-mail is written in
// the template's closest language, with money and dates formatted for it,
// and the history says which language went out. Without a locale, the
// default language (Indonesian here, as the binaries default to).
func TestEmailsAreWrittenInTheCustomersLanguage(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	indonesian, err := mailtemplate.Load(mailtemplate.Config{DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	w := e.worker(t, workerOpts{templates: indonesian})
	ctx := context.Background()
	price := int64(21500050)
	place := func(email, locale string) notify.Delivery {
		o, err := e.orders.Place(ctx, order.Checkout{CustomerEmail: email, CustomerName: "Ana", Currency: "IDR", Locale: locale,
			Items: []order.CheckoutItem{{SKU: "TEA", Name: "Teh", Quantity: 1, UnitPrice: &price}}}, order.Caller{}, "")
		if err != nil {
			t.Fatal(err)
		}
		return e.delivery(t, o.Notifications[0].IdempotencyKey)
	}
	for _, c := range []struct {
		email, locale, language, money string
	}{
		{"british@example.com", "en-GB", "en", "IDR 215,000.50"},
		{"jakarta@example.com", "id-ID", "id", "Rp 215.000,50"},
		{"nolocale@example.com", "", "id", "Rp 215.000,50"},
		{"unknown@example.com", "fr-FR", "id", "Rp 215.000,50"},
	} {
		d := place(c.email, c.locale)
		if err := process(ctx, w, d); err != nil {
			t.Fatal(err)
		}
		msgs := e.sink.ByRecipient(c.email)
		if len(msgs) != 1 || !strings.Contains(string(msgs[0].Data), c.money) {
			t.Errorf("%s (%q): %d e-mails, want one with %q", c.email, c.locale, len(msgs), c.money)
		}
		_, events, err := e.ops.Get(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		var lang string
		for _, ev := range events {
			if ev.Event == "sent" {
				var detail struct{ Language string }
				_ = json.Unmarshal(ev.Detail, &detail)
				lang = detail.Language
			}
		}
		if lang != c.language {
			t.Errorf("%s (%q): the history says %q, want %q", c.email, c.locale, lang, c.language)
		}
	}
}

// A locale that is not a BCP 47 tag is refused at checkout; a valid one
// is stored canonical.
func TestCheckoutLocaleIsCanonical(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	price := int64(1)
	c := order.Checkout{CustomerEmail: "a@example.com", CustomerName: "A", Currency: "IDR",
		Items: []order.CheckoutItem{{SKU: "A", Name: "A", Quantity: 1, UnitPrice: &price}}}
	c.Locale = "english please"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "/locale") {
		t.Errorf("locale %q: %v", c.Locale, err)
	}
	c.Locale = "id-id"
	o, err := e.orders.Place(context.Background(), c, order.Caller{}, "")
	if err != nil || o.Locale != "id-ID" {
		t.Errorf("locale id-id: stored %q, %v", o.Locale, err)
	}
}
