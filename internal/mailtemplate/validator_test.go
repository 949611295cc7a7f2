package mailtemplate

import (
	"testing"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// fullBrand sets every field, so that every branch of the built-in
// layout is rendered.
var fullBrand = Brand{Name: "Toko Ana & Co", LogoURL: "https://shop.example/logo.png?v=2&s=320",
	Address: "Jl. Melati 7, Bandung 40115, Indonesia", SupportEmail: "help@shop.example"}

// Every built-in template, in every language, rendered with its sample
// data, with no brand and with every field of one, is HTML the Nu Html
// Checker (the W3C's validator) finds no error in, and no warning but
// those e-mail needs (testenv.CheckHTML says which, and why).
func TestBuiltinHTMLPassesTheNuHtmlChecker(t *testing.T) {
	t.Parallel()
	docs := map[string]string{}
	for brand, b := range map[string]Brand{"no brand": {}, "brand": fullBrand} {
		tmpl, err := Load(Config{Brand: b})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range tmpl.Names() {
			sample, _ := tmpl.Sample(name)
			for _, lang := range tmpl.Languages(name) {
				r, err := tmpl.RenderLocale(name, sample, lang)
				if err != nil {
					t.Fatal(err)
				}
				docs[name+" "+lang+" "+brand] = r.HTML
			}
		}
	}
	if len(docs) != 8 {
		t.Errorf("rendered %d documents, want 2 templates × 2 languages × 2 brands", len(docs))
	}
	testenv.CheckHTML(t, docs)
}
