package mailtemplate

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// Every registered template renders its sample.json in every language it
// has exactly as the golden files testdata/golden/<template>.<language>.*
// say. After changing a template on purpose, run
//
//	go test ./internal/mailtemplate -run TestTemplatesGolden -update
//
// and review the diff; -update also deletes the files of a template or
// language that is gone.
func TestTemplatesGolden(t *testing.T) {
	t.Parallel()
	tmpl, err := LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	names := tmpl.Names()
	for _, want := range []string{"order-confirmation", "order-shipped"} {
		if !tmpl.Has(want) {
			t.Errorf("template %s is not registered (have %v)", want, names)
		}
	}
	dir := filepath.Join("testdata", "golden")
	written := map[string]bool{}
	for _, name := range names {
		sample, err := tmpl.Sample(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, lang := range tmpl.Languages(name) {
			r, err := tmpl.RenderLocale(name, sample, lang)
			if err != nil {
				t.Fatalf("%s (%s): %v", name, lang, err)
			}
			if r.Language != lang {
				t.Errorf("%s asked in %s rendered %s", name, lang, r.Language)
			}
			for ext, got := range map[string]string{"subject.txt": r.Subject + "\n", "txt": r.Text, "html": r.HTML} {
				base := name + "." + lang + "." + ext
				written[base] = true
				file := filepath.Join(dir, base)
				if *update {
					if err := os.MkdirAll(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatalf("%v (a new template or language? run with -update and review the files)", err)
				}
				if got != string(want) {
					t.Errorf("%s in %s renders differently from %s:\n--- got\n%s\n--- want\n%s", name, lang, file, got, want)
				}
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if written[e.Name()] {
			continue
		}
		if *update {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s belongs to no template and language (run with -update to delete it)", filepath.Join(dir, e.Name()))
	}
}

func TestRenderPicksTheLanguage(t *testing.T) {
	t.Parallel()
	for _, def := range []string{"id", "en"} {
		tmpl, err := Load(Config{DefaultLanguage: def})
		if err != nil {
			t.Fatal(err)
		}
		sample, err := tmpl.Sample("order-confirmation")
		if err != nil {
			t.Fatal(err)
		}
		for locale, want := range map[string]string{
			"id":             "id",
			"id-ID":          "id",
			"in":             "id", // the old code for Indonesian
			"ms-MY":          "id", // CLDR: Malay readers fall back to Indonesian, not English
			"jv":             "id",
			"en":             "en",
			"en-GB":          "en",
			"en-US":          "en",
			"en-GB,id;q=0.5": "en",
			"fr-FR":          def, // unknown: the default language
			"zh-Hant-TW":     def,
			"":               def,
			"not a locale!":  def,
		} {
			r, err := tmpl.RenderLocale("order-confirmation", sample, locale)
			if err != nil {
				t.Fatal(err)
			}
			if r.Language != want {
				t.Errorf("default %s, locale %q rendered in %s, want %s", def, locale, r.Language, want)
			}
		}
		// The old call renders the default language.
		if r, err := tmpl.Render("order-confirmation", sample); err != nil || r.Language != def {
			t.Errorf("default %s: Render = %s, %v", def, r.Language, err)
		}
	}
}

func TestRenderFormatsForTheLanguage(t *testing.T) {
	t.Parallel()
	tmpl, err := Load(Config{DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	data := json.RawMessage(`{"order_id":"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87","customer_name":"Ana",
		"currency":"IDR","items":[{"sku":"S","name":"Teh","quantity":1,"unit_price":21500050,"line_total":21500050}],
		"total":21500050,"placed_at":"2026-12-01T03:00:00Z"}`)
	for lang, want := range map[string][]string{
		"id": {"Rp 215.000,50", "1 Desember 2026 pukul 03.00 UTC", "Terima kasih atas pesanan Anda"},
		"en": {"IDR 215,000.50", "1 December 2026, 03:00 UTC", "Thank you for your order"},
	} {
		r, err := tmpl.RenderLocale("order-confirmation", data, lang)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(r.Text, w) || !strings.Contains(r.HTML, w) {
				t.Errorf("%s: text or HTML lacks %q:\n%s\n%s", lang, w, r.Text, r.HTML)
			}
		}
	}
	// Currencies keep their exponent in every language: none for JPY, three for KWD.
	for currency, want := range map[string]string{"JPY": "JPY 9.007.199.254.740.991", "KWD": "KWD 9.007.199.254.740,991", "USD": "USD 90.071.992.547.409,91"} {
		r, err := tmpl.RenderLocale("order-confirmation", json.RawMessage(`{"order_id":"0193a5b2","customer_name":"A","currency":"`+currency+`",
			"items":[],"total":9007199254740991,"placed_at":"2026-11-30T09:15:00Z"}`), "id")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.Text, "Total: "+want) {
			t.Errorf("%s in Indonesian: want %q in\n%s", currency, want, r.Text)
		}
	}
}

func TestRenderEscapesHTMLAndFormatsMoney(t *testing.T) {
	t.Parallel()
	tmpl, err := LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	data := json.RawMessage(`{"order_id":"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87","customer_name":"<script>x</script>",
		"currency":"JPY","items":[{"sku":"S","name":"A & B","quantity":3,"unit_price":9007199254740991,"line_total":9007199254740991}],
		"total":9007199254740991,"placed_at":"2026-11-30T09:15:00Z"}`)
	r, err := tmpl.Render("order-confirmation", data)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.HTML, "<script>") || !strings.Contains(r.HTML, "&lt;script&gt;") {
		t.Errorf("customer name not escaped in HTML:\n%s", r.HTML)
	}
	if !strings.Contains(r.Text, "JPY 9,007,199,254,740,991") {
		t.Errorf("the largest amount lost precision or format:\n%s", r.Text)
	}
	if r.Subject != "Your order 0193A5B2 is confirmed" {
		t.Errorf("subject = %q", r.Subject)
	}
}

func TestRenderRefusesBadData(t *testing.T) {
	t.Parallel()
	tmpl, err := LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render("no-such-template", json.RawMessage(`{}`)); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown template: err = %v", err)
	}
	for _, lang := range []string{"en", "id"} {
		for _, data := range []string{
			`not json`,
			`{"order_id":"x"}`, // missing fields
			`{"order_id":"0193a5b2","customer_name":"A","currency":"USD","items":[],"total":"lots","placed_at":"2026-11-30T09:15:00Z"}`,
			`{"order_id":"0193a5b2","customer_name":"A","currency":"USD","items":[],"total":1,"placed_at":"yesterday"}`,
		} {
			if _, err := tmpl.RenderLocale("order-confirmation", json.RawMessage(data), lang); err == nil {
				t.Errorf("RenderLocale(%s, %s) = nil error", data, lang)
			}
		}
	}
	// A render error names the file and line, for a held delivery's last_error.
	_, err = tmpl.RenderLocale("order-confirmation", json.RawMessage(`{"customer_name":"A"}`), "id")
	if err == nil || !strings.Contains(err.Error(), "order-confirmation/id/subject.tmpl:1:") {
		t.Errorf("err = %v, want the file and line", err)
	}
}

func TestSubjectIsOneLine(t *testing.T) {
	t.Parallel()
	tmpl, err := LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range tmpl.Languages("order-confirmation") {
		r, err := tmpl.RenderLocale("order-confirmation", json.RawMessage(`{"order_id":"ab\r\nBcc: eve@example.com-1","customer_name":"A",
		"currency":"USD","items":[],"total":1,"placed_at":"2026-11-30T09:15:00Z"}`), lang)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(r.Subject, "\r\n") {
			t.Errorf("%s subject %q spans lines", lang, r.Subject)
		}
	}
}

func TestRenderConcurrently(t *testing.T) {
	t.Parallel()
	tmpl, err := LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for _, name := range tmpl.Names() {
				sample, _ := tmpl.Sample(name)
				if _, err := tmpl.RenderLocale(name, sample, []string{"id-ID", "en-GB"}[i%2]); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}
