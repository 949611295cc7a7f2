package mailtemplate

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailmime"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Every template the service ships — the built-in ones and the example
// of deploy/templates that `make run` and the compose stack load — in
// every language, with the shop's settings and without (its link to the
// order by its number, or by its id: a UUID in a URL), with an order
// number and without, is mail SpamAssassin passes: composed as the SMTP
// provider composes it (mailmime, with MAIL_FROM named after the brand,
// as the worker names it), each scores at most 1.0 with Debian's
// SpamAssassin and its shipped rules, and trips none of its rules about
// how a message is built (testenv.StructuralSpamRules).
func TestShippedTemplatesPassSpamAssassin(t *testing.T) {
	t.Parallel()
	byID := shopBrand
	byID.OrderURL = "https://shop.example/orders/{order_id}"
	msgs := map[string][]byte{}
	for setting, b := range map[string]Brand{"no settings": {}, "the shop's settings": shopBrand, "a link by the order's id": byID} {
		tmpl, err := Load(Config{Brand: b, Dir: filepath.Join("..", "..", "deploy", "templates")})
		if err != nil {
			t.Fatal(err)
		}
		from := mail.Sender{Address: "orders@shop.example"}.WithName(b.Name)
		for _, name := range tmpl.Names() {
			sample, _ := tmpl.Sample(name)
			for number, data := range map[string]json.RawMessage{"its sample": sample, "no order number": withoutReference(t, sample)} {
				for _, lang := range tmpl.Languages(name) {
					r, err := tmpl.RenderLocale(name, data, lang)
					if err != nil {
						t.Fatal(err)
					}
					// The message as the worker makes it of a delivery.
					key := fmt.Sprintf("%s:0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87:%s:%s:%s:ana@example.com", name, lang, setting, number)
					raw, err := mailmime.Compose(mail.Message{To: "ana@example.com", Subject: r.Subject, Text: r.Text, HTML: r.HTML,
						MessageID: mail.MessageID(key, "shop.example"), IdempotencyKey: key, FromName: r.FromName, ReplyTo: r.ReplyTo},
						mailmime.Options{From: from})
					if err != nil {
						t.Fatal(err)
					}
					msgs[fmt.Sprintf("%s (%s, %s, %s)", name, lang, setting, number)] = raw
				}
			}
		}
	}
	if len(msgs) != 36 {
		t.Errorf("composed %d messages, want 3 templates × 2 languages × 3 settings × 2 kinds of data", len(msgs))
	}
	testenv.CheckSpamScores(t, 1.0, msgs)
}

// withoutReference is data without its "reference".
func withoutReference(t *testing.T, data json.RawMessage) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "reference")
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
