package notify

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// Every registered template renders its sample.json in every language it
// has exactly as the golden files testdata/golden/<template>.<language>.*
// say. After changing a template on purpose, run
//
//	go test ./internal/notify -run TestTemplatesGolden -update
//
// and review the diff; -update also deletes the files of a template or
// language that is gone.
func TestTemplatesGolden(t *testing.T) {
	t.Parallel()
	tmpl, err := LoadTemplates()
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

func TestBuiltinTemplatesSpeakIndonesianAndEnglish(t *testing.T) {
	t.Parallel()
	for def, want := range map[string][]string{"": {"en", "id"}, "id": {"id", "en"}, "id-ID": {"id", "en"}, "en-GB": {"en", "id"}} {
		tmpl, err := LoadTemplatesFrom(TemplateConfig{DefaultLanguage: def})
		if err != nil {
			t.Fatalf("default %q: %v", def, err)
		}
		for _, name := range tmpl.Names() {
			if got := tmpl.Languages(name); !slices.Equal(got, want) {
				t.Errorf("default %q: %s has languages %v, want %v", def, name, got, want)
			}
		}
	}
	if tmpl, _ := LoadTemplates(); tmpl.Languages("no-such-template") != nil {
		t.Error("an unknown template has languages")
	}
}

func TestRenderPicksTheLanguage(t *testing.T) {
	t.Parallel()
	for _, def := range []string{"id", "en"} {
		tmpl, err := LoadTemplatesFrom(TemplateConfig{DefaultLanguage: def})
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
	tmpl, err := LoadTemplatesFrom(TemplateConfig{DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	data := json.RawMessage(`{"order_id":"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87","customer_name":"Ana",
		"currency":"IDR","items":[{"sku":"S","name":"Teh","quantity":1,"unit_price":21500050,"line_total":21500050}],
		"total":21500050,"placed_at":"2026-12-01T03:00:00Z"}`)
	for lang, want := range map[string][]string{
		"id": {"Rp 215.000,50", "1 Desember 2026 pukul 03.00 UTC", "Terima kasih atas pesanan Anda"},
		"en": {"IDR 215,000.50", "1 December 2026, 03:00 UTC", "thank you for your order"},
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
	tmpl, err := LoadTemplates()
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
	tmpl, err := LoadTemplates()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render("no-such-template", json.RawMessage(`{}`)); !errors.Is(err, ErrUnknownTemplate) {
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
	tmpl, err := LoadTemplates()
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
	tmpl, err := LoadTemplates()
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

// --- templates from a directory ---

// cancelled is a valid directory template in two languages.
func cancelled() map[string]string {
	return map[string]string{
		"order-cancelled/schema.json": `{
  "type": "object",
  "required": ["customer_name", "refund", "currency", "cancelled_at"],
  "properties": {
    "customer_name": {"type": "string", "minLength": 1},
    "refund": {"type": "integer", "minimum": 0},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "cancelled_at": {"type": "string", "format": "date-time"}
  },
  "additionalProperties": false
}
`,
		"order-cancelled/sample.json": `{
  "customer_name": "Ana",
  "refund": 15000000,
  "currency": "IDR",
  "cancelled_at": "2026-11-30T09:15:00Z"
}
`,
		"order-cancelled/id/subject.tmpl": "Pesanan Anda dibatalkan\n",
		"order-cancelled/id/text.tmpl":    "Halo {{.customer_name}},\n\ndana {{money .refund .currency}} kami kembalikan.\nDibatalkan: {{date .cancelled_at}}\n",
		"order-cancelled/id/html.tmpl":    "<p>Halo {{.customer_name}},</p>\n<p>dana {{money .refund .currency}} kami kembalikan.</p>\n",
		"order-cancelled/en/subject.tmpl": "Your order was cancelled\n",
		"order-cancelled/en/text.tmpl":    "Hi {{.customer_name}},\n\nwe are refunding {{money .refund .currency}}.\nCancelled: {{date .cancelled_at}}\n",
		"order-cancelled/en/html.tmpl":    "<p>Hi {{.customer_name}},</p>\n<p>we are refunding {{money .refund .currency}}.</p>\n",
	}
}

// writeDir writes files (slash-separated path: content) under a new
// directory and returns it.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		file := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// with returns base changed by edits; an empty content deletes the file.
func with(base map[string]string, edits map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range edits {
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// renamed moves every file of base under another template name.
func renamed(base map[string]string, name string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		_, rest, _ := strings.Cut(k, "/")
		out[name+"/"+rest] = v
	}
	return out
}

func TestLoadTemplatesFromDirectory(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, with(cancelled(), map[string]string{
		"README.md":                   "plain files at the top are passed over",
		".hidden/whatever":            "so are hidden entries",
		"order-returned/schema.json":  `{"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}`,
		"order-returned/sample.json":  `{"name": "Ana"}`,
		"order-returned/subject.tmpl": "Retur diterima",
		"order-returned/text.tmpl":    "Halo {{.name}}",
		"order-returned/html.tmpl":    "<p>Halo {{.name}}</p>",
	}))
	tmpl, err := LoadTemplatesFrom(TemplateConfig{Dir: dir, DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tmpl.Names(), []string{"order-cancelled", "order-confirmation", "order-returned", "order-shipped"}; !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	if got := tmpl.Languages("order-cancelled"); !slices.Equal(got, []string{"id", "en"}) {
		t.Errorf("order-cancelled languages = %v", got)
	}
	// The files at the top of a template are in the default language.
	if got := tmpl.Languages("order-returned"); !slices.Equal(got, []string{"id"}) {
		t.Errorf("order-returned languages = %v", got)
	}
	sample, err := tmpl.Sample("order-cancelled")
	if err != nil {
		t.Fatal(err)
	}
	r, err := tmpl.RenderLocale("order-cancelled", sample, "en-AU")
	if err != nil {
		t.Fatal(err)
	}
	if r.Language != "en" || r.Subject != "Your order was cancelled" || !strings.Contains(r.Text, "we are refunding IDR 150,000.00.\nCancelled: 30 November 2026, 09:15 UTC") {
		t.Errorf("English: %+v", r)
	}
	r, err = tmpl.RenderLocale("order-cancelled", sample, "id-ID")
	if err != nil {
		t.Fatal(err)
	}
	if r.Language != "id" || !strings.Contains(r.Text, "dana Rp 150.000,00 kami kembalikan.\nDibatalkan: 30 November 2026 pukul 09.15 UTC") {
		t.Errorf("Indonesian: %+v", r)
	}
	if r, err := tmpl.RenderLocale("order-returned", json.RawMessage(`{"name":"Bo"}`), "en"); err != nil || r.Language != "id" || r.Text != "Halo Bo" {
		t.Errorf("a one-language template: %+v, %v", r, err)
	}
	// The schema.json read from the directory is the one data is checked against.
	if err := tmpl.Validate("order-cancelled", json.RawMessage(`{"customer_name": "Ana", "currency": "IDR", "cancelled_at": "2026-11-30T09:15:00Z"}`)); err == nil || !strings.Contains(err.Error(), "/refund: is required") {
		t.Errorf("Validate without refund = %v", err)
	}
	if problems := CheckTemplates(TemplateConfig{Dir: dir, DefaultLanguage: "id"}); len(problems) != 0 {
		t.Errorf("CheckTemplates = %v", problems)
	}
}

// wantProblem fails unless problems has one at file (relative to dir)
// and line whose message contains each of msg.
func wantProblem(t *testing.T, problems []Problem, dir, file string, line int, msg ...string) {
	t.Helper()
	path := filepath.Join(dir, filepath.FromSlash(file))
	for _, p := range problems {
		if p.File != path || p.Line != line {
			continue
		}
		ok := true
		for _, m := range msg {
			ok = ok && strings.Contains(p.Message, m)
		}
		if ok {
			return
		}
	}
	t.Errorf("no problem at %s:%d containing %q; got:\n%s", file, line, msg, problemLines(problems))
}

func problemLines(problems []Problem) string {
	var b strings.Builder
	for _, p := range problems {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}

func TestCheckTemplatesRefusesBrokenTemplates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edits map[string]string
		file  string // relative to the directory
		line  int
		msg   []string
	}{
		{"text parse error", map[string]string{"order-cancelled/id/text.tmpl": "Halo,\n\n{{if .customer_name}}dana\n"},
			"order-cancelled/id/text.tmpl", 4, []string{"unexpected EOF"}},
		{"html parse error", map[string]string{"order-cancelled/en/html.tmpl": "<p>Hi</p>\n<p>\n{{.customer_name}</p>\n"},
			"order-cancelled/en/html.tmpl", 3, []string{"bad character U+007D '}'"}},
		{"subject parse error keeps its line", map[string]string{"order-cancelled/en/subject.tmpl": "\n\nYour {{order}}\n"},
			"order-cancelled/en/subject.tmpl", 3, []string{`function "order" not defined`}},
		{"unknown function", map[string]string{"order-cancelled/id/text.tmpl": "Halo\n{{monye .refund .currency}}\n"},
			"order-cancelled/id/text.tmpl", 2, []string{`function "monye" not defined`}},
		{"field the sample lacks", map[string]string{"order-cancelled/en/text.tmpl": "Hi\n\n\n{{.refund_reason}}\n"},
			"order-cancelled/en/text.tmpl", 4, []string{"does not render sample.json", `map has no entry for key "refund_reason"`}},
		{"function refusing the sample", map[string]string{"order-cancelled/id/html.tmpl": "<p>\n{{date .customer_name}}</p>\n"},
			"order-cancelled/id/html.tmpl", 2, []string{"does not render sample.json", "date:"}},
		{"HTML escaping error", map[string]string{"order-cancelled/en/html.tmpl": "<p>\n<a href='{{.customer_name}}>x</a>\n"},
			"order-cancelled/en/html.tmpl", 0, []string{"does not render sample.json"}},
		{"sample.json syntax", map[string]string{"order-cancelled/sample.json": "{\n  \"customer_name\": \"Ana\",\n  \"refund\": 150000 00,\n}\n"},
			"order-cancelled/sample.json", 3, []string{"not valid JSON", "invalid character"}},
		{"sample.json cut short", map[string]string{"order-cancelled/sample.json": "{\n  \"customer_name\": \"Ana\",\n"},
			"order-cancelled/sample.json", 2, []string{"unexpected end of JSON input"}},
		{"sample.json not an object", map[string]string{"order-cancelled/sample.json": `["Ana"]`},
			"order-cancelled/sample.json", 1, []string{"must be a JSON object"}},
		{"schema.json syntax", map[string]string{"order-cancelled/schema.json": "{\n  \"type\": \"object\"\n  \"required\": []\n}\n"},
			"order-cancelled/schema.json", 3, []string{"not valid JSON"}},
		{"schema.json not a schema", map[string]string{"order-cancelled/schema.json": "{\n  \"type\": \"object\",\n  \"properties\": {\n    \"refund\": {\"type\": \"int\"}\n  }\n}\n"},
			"order-cancelled/schema.json", 4, []string{"not a valid JSON Schema", "/properties/refund/type"}},
		{"schema.json unknown text rule", map[string]string{"order-cancelled/schema.json": "{\n  \"properties\": {\n    \"customer_name\": {\"x-sekali-text\": \"multiline\"}\n  }\n}\n"},
			"order-cancelled/schema.json", 3, []string{"not a valid JSON Schema", "/properties/customer_name/x-sekali-text"}},
		{"sample.json breaking the text rule", map[string]string{"order-cancelled/sample.json": "{\n  \"customer_name\": \"Ana\\nMaria\",\n  \"refund\": 1,\n  \"currency\": \"IDR\",\n  \"cancelled_at\": \"2026-11-30T09:15:00Z\"\n}\n"},
			"order-cancelled/sample.json", 2, []string{"must not contain control characters"}},
		{"schema.json bad pattern", map[string]string{"order-cancelled/schema.json": "{\n  \"properties\": {\n    \"currency\": {\n      \"pattern\": \"^([A-Z]{3}$\"\n    }\n  }\n}\n"},
			"order-cancelled/schema.json", 4, []string{"^([A-Z]{3}$"}},
		{"schema.json refers to another file", map[string]string{"order-cancelled/schema.json": `{"properties": {"refund": {"$ref": "money.json"}}}`},
			"order-cancelled/schema.json", 0, []string{"$ref to money.json: a schema.json must be self-contained"}},
		{"sample.json breaks the schema", map[string]string{"order-cancelled/sample.json": "{\n  \"customer_name\": \"Ana\",\n  \"refund\": -1,\n  \"currency\": \"IDR\",\n  \"cancelled_at\": \"2026-11-30T09:15:00Z\"\n}\n"},
			"order-cancelled/sample.json", 3, []string{"does not satisfy schema.json", "/refund", "minimum"}},
		{"sample.json lacks a required field", map[string]string{"order-cancelled/sample.json": "\n{\n  \"customer_name\": \"Ana\",\n  \"refund\": 1,\n  \"cancelled_at\": \"2026-11-30T09:15:00Z\"\n}\n"},
			"order-cancelled/sample.json", 2, []string{"/currency: is required"}},
		{"sample.json has a wrong format", map[string]string{"order-cancelled/sample.json": "{\n  \"customer_name\": \"Ana\",\n  \"refund\": 1,\n  \"currency\": \"IDR\",\n  \"cancelled_at\": \"yesterday\"\n}\n"},
			"order-cancelled/sample.json", 5, []string{"/cancelled_at", "date-time"}},
		{"missing schema.json", map[string]string{"order-cancelled/schema.json": ""},
			"order-cancelled/schema.json", 0, []string{"missing"}},
		{"missing sample.json", map[string]string{"order-cancelled/sample.json": ""},
			"order-cancelled/sample.json", 0, []string{"missing"}},
		{"a language lacks a file", map[string]string{"order-cancelled/id/html.tmpl": ""},
			"order-cancelled/id/html.tmpl", 0, []string{"missing"}},
		{"unexpected file", map[string]string{"order-cancelled/subjet.tmpl": "typo"},
			"order-cancelled/subjet.tmpl", 0, []string{"unexpected file"}},
		{"language directory in capitals", map[string]string{"order-cancelled/EN/subject.tmpl": "x", "order-cancelled/EN/text.tmpl": "x", "order-cancelled/EN/html.tmpl": "x"},
			"order-cancelled/EN", 0, []string{"name this language directory en"}},
		{"language directory with an old code", map[string]string{"order-cancelled/in/subject.tmpl": "x", "order-cancelled/in/text.tmpl": "x", "order-cancelled/in/html.tmpl": "x"},
			"order-cancelled/in", 0, []string{"name this language directory id"}},
		{"directory that is no language", map[string]string{"order-cancelled/partials/footer.tmpl": "x"},
			"order-cancelled/partials", 0, []string{"is not a language"}},
		{"no default language", map[string]string{"order-cancelled/id/subject.tmpl": "", "order-cancelled/id/text.tmpl": "", "order-cancelled/id/html.tmpl": ""},
			"order-cancelled", 0, []string{"no variant in the default language, id", "it has en", "add a id/ directory"}},
		{"files at the top beside languages", map[string]string{"order-cancelled/text.tmpl": "x"},
			"order-cancelled", 0, []string{"both text.tmpl at the top and language directories"}},
		{"no text at all", map[string]string{"order-cancelled/id/subject.tmpl": "", "order-cancelled/id/text.tmpl": "", "order-cancelled/id/html.tmpl": "",
			"order-cancelled/en/subject.tmpl": "", "order-cancelled/en/text.tmpl": "", "order-cancelled/en/html.tmpl": ""},
			"order-cancelled", 0, []string{"has no text"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := writeDir(t, with(cancelled(), tt.edits))
			cfg := TemplateConfig{Dir: dir, DefaultLanguage: "id"}
			problems := CheckTemplates(cfg)
			wantProblem(t, problems, dir, tt.file, tt.line, tt.msg...)
			_, err := LoadTemplatesFrom(cfg)
			var terr *TemplateError
			if !errors.As(err, &terr) || !slices.Equal(terr.Problems, problems) {
				t.Errorf("LoadTemplatesFrom: err = %v, want a *TemplateError with the problems CheckTemplates found", err)
			}
		})
	}
}

func TestCheckTemplatesRefusesBadNames(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for _, name := range []string{"Order-Cancelled", "order_cancelled", "-cancelled", "cancelled-", "order--cancelled", "pesanan-dibatalkan-é", strings.Repeat("a", 65)} {
		for k, v := range renamed(cancelled(), name) {
			files[k] = v
		}
	}
	for k, v := range renamed(cancelled(), "order-confirmation") {
		files[k] = v
	}
	for k, v := range renamed(cancelled(), strings.Repeat("a", 64)) { // the longest name
		files[k] = v
	}
	dir := writeDir(t, files)
	problems := CheckTemplates(TemplateConfig{Dir: dir, DefaultLanguage: "id"})
	for _, name := range []string{"Order-Cancelled", "order_cancelled", "-cancelled", "cancelled-", "order--cancelled", "pesanan-dibatalkan-é", strings.Repeat("a", 65)} {
		wantProblem(t, problems, dir, name, 0, "is not a template name")
	}
	wantProblem(t, problems, dir, "order-confirmation", 0, "is a built-in template")
	if len(problems) != 8 {
		t.Errorf("want 8 problems, got:\n%s", problemLines(problems))
	}
}

// One check reports every problem of every template at once.
func TestCheckTemplatesReportsEveryProblem(t *testing.T) {
	t.Parallel()
	files := with(cancelled(), map[string]string{
		"order-cancelled/id/text.tmpl": "Halo\n{{.customer_name\n",
		"order-cancelled/en/html.tmpl": "<p>{{.nope}}</p>",
		"order-cancelled/sample.json":  "{\n  \"customer_name\": \"\",\n  \"refund\": 1,\n  \"currency\": \"idr\",\n  \"cancelled_at\": \"2026-11-30T09:15:00Z\",\n  \"extra\": true\n}\n",
	})
	for k, v := range renamed(with(cancelled(), map[string]string{"order-cancelled/schema.json": "{\n  \"type\": 3\n}"}), "order-refunded") {
		files[k] = v
	}
	dir := writeDir(t, files)
	problems := CheckTemplates(TemplateConfig{Dir: dir, DefaultLanguage: "id"})
	wantProblem(t, problems, dir, "order-cancelled/id/text.tmpl", 3, "unclosed action started at order-cancelled/id/text.tmpl:2")
	wantProblem(t, problems, dir, "order-cancelled/en/html.tmpl", 1, "nope")
	wantProblem(t, problems, dir, "order-cancelled/sample.json", 2, "/customer_name", "minLength")
	wantProblem(t, problems, dir, "order-cancelled/sample.json", 4, "/currency", "does not match pattern")
	wantProblem(t, problems, dir, "order-cancelled/sample.json", 6, "/extra: is not a property the schema allows")
	wantProblem(t, problems, dir, "order-refunded/schema.json", 2, "not a valid JSON Schema", "at /type: value must be one of 'array', 'boolean'")
	// and the metaschema's other branch: a list of types
	wantProblem(t, problems, dir, "order-refunded/schema.json", 2, "not a valid JSON Schema", "at /type: got number, want array")
	if t.Failed() {
		return
	}
	if len(problems) != 7 {
		t.Errorf("want 7 problems, got:\n%s", problemLines(problems))
	}
}

func TestCheckTemplatesConfig(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nowhere")
	if p := CheckTemplates(TemplateConfig{Dir: missing}); len(p) != 1 || p[0].File != missing || !strings.Contains(p[0].Message, "cannot read") {
		t.Errorf("a missing directory: %v", p)
	}
	if p := CheckTemplates(TemplateConfig{DefaultLanguage: "bahasa indonesia"}); len(p) != 1 || !strings.Contains(p[0].Message, "not a BCP 47 tag") {
		t.Errorf("a bad default language: %v", p)
	}
	// Built-ins have id and en only: a default they lack refuses them.
	p := CheckTemplates(TemplateConfig{DefaultLanguage: "fr"})
	if len(p) != 2 || !strings.Contains(p[0].String(), "internal/notify/templates/order-confirmation: has no variant in the default language, fr") {
		t.Errorf("default fr: %v", p)
	}
}

func TestProblemString(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "t/x/id/text.tmpl", Line: 3, Message: "unexpected EOF"}, "t/x/id/text.tmpl:3: unexpected EOF"},
		{Problem{File: "t/x", Message: "has no text"}, "t/x: has no text"},
		{Problem{Message: "bad default"}, "bad default"},
	} {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("String = %q, want %q", got, tt.want)
		}
	}
	err := &TemplateError{Problems: []Problem{{File: "a", Line: 1, Message: "x"}, {File: "b", Message: "y"}}}
	if got := err.Error(); got != "notify: broken templates: a:1: x; b: y" {
		t.Errorf("Error = %q", got)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, with(cancelled(), map[string]string{
		"odd-keys/schema.json":  `{"type": "object", "properties": {"a/b": {"type": "integer"}, "c~d": {"type": "integer"}}}`,
		"odd-keys/sample.json":  `{}`,
		"odd-keys/subject.tmpl": "x",
		"odd-keys/text.tmpl":    "x",
		"odd-keys/html.tmpl":    "x",
		"texts/schema.json": `{"type": "object", "properties": {"name": {"type": "string"},
			"address": {"type": "string", "x-sekali-text": "lines"}, "token": {"x-sekali-text": "any"},
			"tags": {"type": "array", "items": {"type": "string"}}}}`,
		"texts/sample.json":  `{}`,
		"texts/subject.tmpl": "x",
		"texts/text.tmpl":    "x",
		"texts/html.tmpl":    "x",
	}))
	tmpl, err := LoadTemplatesFrom(TemplateConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range tmpl.Names() {
		sample, _ := tmpl.Sample(name)
		if err := tmpl.Validate(name, sample); err != nil {
			t.Errorf("%s's sample: %v", name, err)
		}
	}
	// What the order package records: fractional seconds, and no extra fields.
	if err := tmpl.Validate("order-shipped", json.RawMessage(`{"order_id":"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87","customer_name":"Ana",
		"carrier":"JNE","tracking_number":"JNE-1","items":[{"sku":"S","name":"N","quantity":1}],"shipped_at":"2026-12-01T03:00:00.123456Z"}`)); err != nil {
		t.Errorf("order-shipped: %v", err)
	}

	tests := []struct {
		name, data string
		want       []FieldError
	}{
		{"order-confirmation", `{"order_id":"not-a-uuid","customer_name":"Ana","currency":"usd",
			"items":[{"sku":"S","name":"N","quantity":"2","unit_price":100,"line_total":200},{"sku":"","name":"N","quantity":0,"unit_price":-1}],
			"placed_at":"yesterday"}`, []FieldError{
			{"/currency", `'usd' does not match pattern '^[A-Z]{3}$'`},
			{"/items/0/quantity", "got string, want integer"},
			{"/items/1/line_total", "is required"},
			{"/items/1/quantity", "minimum: got 0, want 1"},
			{"/items/1/sku", "minLength: got 0, want 1"},
			{"/items/1/unit_price", "minimum: got -1, want 0"},
			{"/order_id", "'not-a-uuid' is not valid uuid: "},
			{"/placed_at", "'yesterday' is not valid date-time: "},
			{"/total", "is required"},
		}},
		{"order-cancelled", `{"customer_name":"Ana","refund":1,"currency":"IDR","cancelled_at":"2026-11-30T09:15:00Z","note":"x"}`,
			[]FieldError{{"/note", "is not a property the schema allows"}}},
		{"order-cancelled", `[]`, []FieldError{{"", "must be a JSON object"}}},
		{"order-cancelled", `{"customer_name":`, []FieldError{{"", "is not valid JSON: "}}},
		{"odd-keys", `{"a/b":"x","c~d":"y"}`, []FieldError{{"/a~1b", "got string, want integer"}, {"/c~0d", "got string, want integer"}}},
		// Strings are visible text, one line unless the schema says
		// otherwise (x-sekali-text), wherever they are.
		{"texts", `{"name":"Ana\nMaria","address":"Jl. Melati 1\nJakarta","token":"\u3164\n","tags":["ok","\u3164"]}`, []FieldError{
			{"/name", "must not contain control characters"},
			{"/tags/1", "must contain at least one visible character"},
		}},
		{"texts", `{"name":"\u2800","address":"Jl. \u202eMelati"}`, []FieldError{
			{"/address", "must not contain bidirectional control characters"},
			{"/name", "must contain at least one visible character"},
		}},
		{"order-cancelled", `{"customer_name":"\u3164","refund":1,"currency":"IDR","cancelled_at":"2026-11-30T09:15:00Z"}`,
			[]FieldError{{"/customer_name", "must contain at least one visible character"}}},
	}
	for _, tt := range tests {
		err := tmpl.Validate(tt.name, json.RawMessage(tt.data))
		var derr *DataError
		if !errors.As(err, &derr) {
			t.Errorf("Validate(%s, %s) = %v, want a *DataError", tt.name, tt.data, err)
			continue
		}
		if derr.Template != tt.name || len(derr.Fields) != len(tt.want) {
			t.Errorf("Validate(%s, %s): %v, want %v", tt.name, tt.data, derr.Fields, tt.want)
			continue
		}
		for i, f := range derr.Fields {
			if f.Pointer != tt.want[i].Pointer || !strings.HasPrefix(f.Detail, tt.want[i].Detail) {
				t.Errorf("Validate(%s): field %d = %+v, want %+v", tt.name, i, f, tt.want[i])
			}
		}
	}
	if err := tmpl.Validate("no-such-template", json.RawMessage(`{}`)); !errors.Is(err, ErrUnknownTemplate) {
		t.Errorf("unknown template: %v", err)
	}
	err = tmpl.Validate("order-cancelled", json.RawMessage(`{"refund":"x"}`))
	if want := "notify: data for template order-cancelled does not match its schema: /cancelled_at: is required; /currency: is required; /customer_name: is required; /refund: got string, want integer"; err == nil || err.Error() != want {
		t.Errorf("Error = %v\nwant    %s", err, want)
	}
}

func TestJSONLines(t *testing.T) {
	t.Parallel()
	data := []byte("{\n  \"a\": 1,\n  \"b\": [\n    {\"c\": 2},\n    3\n  ],\n  \"d/e\": {}\n}")
	lines := jsonLines(data)
	for ptr, want := range map[string]int{"": 1, "/a": 2, "/b": 3, "/b/0": 4, "/b/0/c": 4, "/b/1": 5, "/d~1e": 7, "/d~1e/missing": 7, "/b/7": 3} {
		if got := lineOf(lines, ptr); got != want {
			t.Errorf("line of %q = %d, want %d", ptr, got, want)
		}
	}
}
