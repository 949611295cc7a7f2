package mailtemplate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

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
	tmpl, err := Load(Config{Dir: dir})
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
	if err := tmpl.Validate("no-such-template", json.RawMessage(`{}`)); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown template: %v", err)
	}
	err = tmpl.Validate("order-cancelled", json.RawMessage(`{"refund":"x"}`))
	if want := "mailtemplate: template order-cancelled cannot take this data: /cancelled_at: is required; /currency: is required; /customer_name: is required; /refund: got string, want integer"; err == nil || err.Error() != want {
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

// Data the schema lets through but a language of the template cannot
// render is refused by Validate as the schema's refusals are, at the
// whole data, naming the language and the part: JSON Schema's "integer"
// takes 1.0 and 1e30, which money cannot take as minor units, and a
// field only one language formats is checked in that language too.
func TestValidateRendersEveryLanguage(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, with(cancelled(), map[string]string{
		"reminder/schema.json":     `{"type": "object", "properties": {"when": {"type": "string"}}}`,
		"reminder/sample.json":     `{"when": "2026-12-01T03:00:00Z"}`,
		"reminder/id/subject.tmpl": "Pengingat",
		"reminder/id/text.tmpl":    "Segera.",
		"reminder/id/html.tmpl":    "<p>Segera.</p>",
		"reminder/en/subject.tmpl": "Reminder",
		"reminder/en/text.tmpl":    "By {{date .when}}.",
		"reminder/en/html.tmpl":    "<p>Soon.</p>",
	}))
	tmpl, err := Load(Config{Dir: dir, DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, data, want string }{
		{"order-cancelled", `{"customer_name":"Ana","refund":1.0,"currency":"IDR","cancelled_at":"2026-11-30T09:15:00Z"}`, `parsing "1.0"`},
		{"order-cancelled", `{"customer_name":"Ana","refund":1e30,"currency":"IDR","cancelled_at":"2026-11-30T09:15:00Z"}`, `parsing "1e30"`},
		{"reminder", `{"when":"soon"}`, "its text in en"},
	} {
		err := tmpl.Validate(tt.name, json.RawMessage(tt.data))
		var derr *DataError
		if !errors.As(err, &derr) || len(derr.Fields) != 1 || derr.Fields[0].Pointer != "" ||
			!strings.Contains(derr.Fields[0].Detail, "cannot be rendered") || !strings.Contains(derr.Fields[0].Detail, tt.want) {
			t.Errorf("Validate(%s, %s) = %v, want a *DataError at the whole data naming %q", tt.name, tt.data, err, tt.want)
		}
		if _, err := tmpl.Render(tt.name, json.RawMessage(tt.data)); tt.name == "order-cancelled" && err == nil {
			t.Errorf("Render(%s, %s) renders what Validate refuses", tt.name, tt.data)
		}
	}
	if err := tmpl.Validate("reminder", json.RawMessage(`{"when":"2026-12-01T03:00:00Z"}`)); err != nil {
		t.Errorf("data every language renders: %v", err)
	}
}
