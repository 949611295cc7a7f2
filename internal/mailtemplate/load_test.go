package mailtemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBuiltinTemplatesSpeakIndonesianAndEnglish(t *testing.T) {
	t.Parallel()
	for def, want := range map[string][]string{"": {"en", "id"}, "id": {"id", "en"}, "id-ID": {"id", "en"}, "en-GB": {"en", "id"}} {
		tmpl, err := Load(Config{DefaultLanguage: def})
		if err != nil {
			t.Fatalf("default %q: %v", def, err)
		}
		for _, name := range tmpl.Names() {
			if got := tmpl.Languages(name); !slices.Equal(got, want) {
				t.Errorf("default %q: %s has languages %v, want %v", def, name, got, want)
			}
		}
	}
	if tmpl, _ := LoadBuiltin(); tmpl.Languages("no-such-template") != nil {
		t.Error("an unknown template has languages")
	}
}

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

func TestLoadFromDirectory(t *testing.T) {
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
	tmpl, err := Load(Config{Dir: dir, DefaultLanguage: "id"})
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
	if problems := Check(Config{Dir: dir, DefaultLanguage: "id"}); len(problems) != 0 {
		t.Errorf("Check = %v", problems)
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

func TestCheckRefusesBrokenTemplates(t *testing.T) {
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
			cfg := Config{Dir: dir, DefaultLanguage: "id"}
			problems := Check(cfg)
			wantProblem(t, problems, dir, tt.file, tt.line, tt.msg...)
			_, err := Load(cfg)
			var terr *LoadError
			if !errors.As(err, &terr) || !slices.Equal(terr.Problems, problems) {
				t.Errorf("Load: err = %v, want a *LoadError with the problems Check found", err)
			}
		})
	}
}

func TestCheckRefusesBadNames(t *testing.T) {
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
	problems := Check(Config{Dir: dir, DefaultLanguage: "id"})
	for _, name := range []string{"Order-Cancelled", "order_cancelled", "-cancelled", "cancelled-", "order--cancelled", "pesanan-dibatalkan-é", strings.Repeat("a", 65)} {
		wantProblem(t, problems, dir, name, 0, "is not a template name")
	}
	wantProblem(t, problems, dir, "order-confirmation", 0, "is a built-in template")
	if len(problems) != 8 {
		t.Errorf("want 8 problems, got:\n%s", problemLines(problems))
	}
}

// One check reports every problem of every template at once.
func TestCheckReportsEveryProblem(t *testing.T) {
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
	problems := Check(Config{Dir: dir, DefaultLanguage: "id"})
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

func TestCheckConfig(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nowhere")
	if p := Check(Config{Dir: missing}); len(p) != 1 || p[0].File != missing || !strings.Contains(p[0].Message, "cannot read") {
		t.Errorf("a missing directory: %v", p)
	}
	if p := Check(Config{DefaultLanguage: "bahasa indonesia"}); len(p) != 1 || !strings.Contains(p[0].Message, "not a BCP 47 tag") {
		t.Errorf("a bad default language: %v", p)
	}
	// Built-ins have id and en only: a default they lack refuses them.
	p := Check(Config{DefaultLanguage: "fr"})
	if len(p) != 2 || !strings.Contains(p[0].String(), "internal/mailtemplate/builtin/order-confirmation: has no variant in the default language, fr") {
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
	err := &LoadError{Problems: []Problem{{File: "a", Line: 1, Message: "x"}, {File: "b", Message: "y"}}}
	if got := err.Error(); got != "mailtemplate: broken templates: a:1: x; b: y" {
		t.Errorf("Error = %q", got)
	}
}
