package notify

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// Every registered template renders its sample.json exactly as the golden
// files say. After changing a template on purpose, run
// go test ./internal/notify -run TestTemplatesGolden -update and review the diff.
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
	for _, name := range names {
		sample, err := tmpl.Sample(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := tmpl.Render(name, sample)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for ext, got := range map[string]string{"subject.txt": r.Subject + "\n", "txt": r.Text, "html": r.HTML} {
			file := filepath.Join("testdata", "golden", name+"."+ext)
			if *update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (a new template? run with -update and review the files)", err)
			}
			if got != string(want) {
				t.Errorf("%s renders differently from %s:\n--- got\n%s\n--- want\n%s", name, file, got, want)
			}
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
	for _, data := range []string{
		`not json`,
		`{"order_id":"x"}`, // missing fields
		`{"order_id":"0193a5b2","customer_name":"A","currency":"USD","items":[],"total":"lots","placed_at":"2026-11-30T09:15:00Z"}`,
		`{"order_id":"0193a5b2","customer_name":"A","currency":"USD","items":[],"total":1,"placed_at":"yesterday"}`,
	} {
		if _, err := tmpl.Render("order-confirmation", json.RawMessage(data)); err == nil {
			t.Errorf("Render(%s) = nil error", data)
		}
	}
}

func TestSubjectIsOneLine(t *testing.T) {
	t.Parallel()
	tmpl, err := LoadTemplates()
	if err != nil {
		t.Fatal(err)
	}
	r, err := tmpl.Render("order-confirmation", json.RawMessage(`{"order_id":"ab\r\nBcc: eve@example.com-1","customer_name":"A",
		"currency":"USD","items":[],"total":1,"placed_at":"2026-11-30T09:15:00Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(r.Subject, "\r\n") {
		t.Errorf("subject %q spans lines", r.Subject)
	}
}
