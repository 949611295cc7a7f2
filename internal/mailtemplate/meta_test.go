package mailtemplate

import (
	"testing"
)

// meta.json gives a template its own From name (per language, or one for
// all), a Reply-To and a category; without it, MAIL_FROM's name, no
// Reply-To, transactional.
func TestMetaSetsTheSenderPerLanguage(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, with(cancelled(), map[string]string{
		"order-cancelled/meta.json": `{"from_name": {"id": "Toko Ana", "en": "Ana's Shop"}, "reply_to": "CS@Shop.Example", "category": "subscription"}`,
	}))
	tmpl, err := Load(Config{Dir: dir, DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	sample, _ := tmpl.Sample("order-cancelled")
	for locale, want := range map[string]string{"id-ID": "Toko Ana", "en-GB": "Ana's Shop", "": "Toko Ana"} {
		r, err := tmpl.RenderLocale("order-cancelled", sample, locale)
		if err != nil || r.FromName != want || r.ReplyTo != "cs@shop.example" || r.Category != CategorySubscription {
			t.Errorf("%q: from %q, reply-to %q, category %q, %v; want %q", locale, r.FromName, r.ReplyTo, r.Category, err, want)
		}
	}

	one := writeDir(t, with(cancelled(), map[string]string{"order-cancelled/meta.json": `{"from_name": "Toko Büdi"}`}))
	tmpl, err = Load(Config{Dir: one, DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := tmpl.RenderLocale("order-cancelled", sample, "en"); r.FromName != "Toko Büdi" || r.ReplyTo != "" || r.Category != CategoryTransactional {
		t.Errorf("one name for all: %+v", r)
	}
	builtin, _ := LoadBuiltin()
	s, _ := builtin.Sample("order-confirmation")
	if r, _ := builtin.Render("order-confirmation", s); r.FromName != "" || r.Category != CategoryTransactional {
		t.Errorf("a meta.json with a layout only: from %q, category %q", r.FromName, r.Category)
	}
}

// A meta.json that is wrong stops the template at load, saying why.
func TestMetaIsChecked(t *testing.T) {
	t.Parallel()
	for meta, want := range map[string]string{
		`{"from_name": "Toko", "signature": "x"}`: "unknown field",
		`{"category": "marketing"}`:               "want transactional or subscription",
		`{"reply_to": "not an address"}`:          "reply_to",
		`{"from_name": "Toko\u2028Ana"}`:          "must be one line",
		`{"from_name": {"fr": "Boutique"}}`:       `"fr" is not a language of this template`,
		`{"from_name": ""}`:                       "is empty",
		`{"from_name": 7}`:                        "want a name",
	} {
		dir := writeDir(t, with(cancelled(), map[string]string{"order-cancelled/meta.json": meta}))
		wantProblem(t, Check(Config{Dir: dir, DefaultLanguage: "id"}), dir, "order-cancelled/meta.json", 0, want)
	}
}
