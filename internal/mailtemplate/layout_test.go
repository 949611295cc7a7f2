package mailtemplate

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// shopLayout is cancelled() on a layout of the directory, shop, with a
// footer partial in HTML and text. The layout's tags span lines on
// purpose: inlining its CSS joins them, and problems must still name the
// lines as written.
func shopLayout() map[string]string {
	return with(cancelled(), map[string]string{
		"_layouts/shop/html.tmpl": `<!DOCTYPE html>
<html lang="{{lang}}">
<head>
<meta charset="utf-8">
<title>{{block "title" .}}{{brand.Name}}{{end}}</title>
<style>
p { margin: 0 0 12px; }
.note {
  color: #555555;
}
@media (prefers-color-scheme: dark) { .note { color: #aaaaaa; } }
</style>
</head>
<body>
<div class="preheader">{{block "preheader" .}}{{end}}</div>
<table role="presentation"
  class="frame">
<tbody><tr><td>
{{template "content" .}}
</td></tr></tbody>
</table>
{{template "footer" .}}
</body>
</html>
`,
		"_layouts/shop/text.tmpl":    "{{template \"content\" .}}\n{{template \"footer\" .}}\n",
		"_partials/footer.html.tmpl": "<p class=\"note\">{{brand.Name}} · {{if eq lang \"id\"}}Terima kasih{{else}}Thank you{{end}}</p>\n",
		"_partials/footer.text.tmpl": "-- \n{{brand.Name}}\n",
		"order-cancelled/meta.json":  `{"layout": "shop"}`,
		"order-cancelled/en/html.tmpl": "{{define \"preheader\"}}Refund of {{money .refund .currency}}{{end}}\n" +
			"<p\n  class=\"lead\">Hi {{.customer_name}},</p>\n<p>we are refunding {{money .refund .currency}}.</p>\n",
	})
}

func TestLayoutWrapsTheTemplate(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, shopLayout())
	tmpl, err := Load(Config{Dir: dir, DefaultLanguage: "id", Brand: Brand{Name: "Toko <Ana>"}})
	if err != nil {
		t.Fatal(err)
	}
	sample, _ := tmpl.Sample("order-cancelled")
	r, err := tmpl.RenderLocale("order-cancelled", sample, "en")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<html lang="en">`,
		`<title>Toko &lt;Ana&gt;</title>`,                                                        // the layout's default title, escaped
		`<div class="preheader">Refund of IDR 150,000.00</div>`,                                  // the template's preheader
		`<p class="lead" style="margin:0 0 12px">Hi Ana,</p>`,                                    // the content, CSS inlined
		`<p class="note" style="margin:0 0 12px;color:#555555">Toko &lt;Ana&gt; · Thank you</p>`, // the partial, inlined too
		"@media (prefers-color-scheme: dark){\n.note {\ncolor: #aaaaaa !important\n}",            // what cannot be inlined stays, !important
	} {
		if !strings.Contains(r.HTML, want) {
			t.Errorf("the HTML lacks %q:\n%s", want, r.HTML)
		}
	}
	if strings.Contains(r.HTML, "margin: 0 0 12px") {
		t.Errorf("the rules that were inlined are still in the <style>:\n%s", r.HTML)
	}
	if want := "Hi Ana,\n\nwe are refunding IDR 150,000.00.\nCancelled: 30 November 2026, 09:15 UTC\n\n-- \nToko <Ana>\n\n"; r.Text != want {
		t.Errorf("text = %q, want %q", r.Text, want)
	}
	// Indonesian has no preheader of its own: the layout's empty default.
	r, err = tmpl.RenderLocale("order-cancelled", sample, "id")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.HTML, `<div class="preheader"></div>`) || !strings.Contains(r.HTML, "Terima kasih") || !strings.Contains(r.HTML, `<html lang="id">`) {
		t.Errorf("Indonesian:\n%s", r.HTML)
	}
	// A render error names the line of the file as written, not of the
	// file as inlined (where the <p> of lines 2 and 3 is one line).
	dir = writeDir(t, with(shopLayout(), map[string]string{
		"order-cancelled/en/text.tmpl": "Hi {{.customer_name}},\n",
		"order-cancelled/en/html.tmpl": "<p\n  class=\"lead\">Hi {{.customer_name}},</p>\n<p>we are refunding {{money .refund .currency}}.</p>\n<p>Cancelled {{date .cancelled_at}}.</p>\n",
	}))
	if tmpl, err = Load(Config{Dir: dir, DefaultLanguage: "id"}); err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.RenderLocale("order-cancelled", json.RawMessage(`{"customer_name": "Ana", "refund": 1, "currency": "IDR", "cancelled_at": "yesterday"}`), "en")
	if err == nil || !strings.Contains(err.Error(), "order-cancelled/en/html.tmpl:4:") {
		t.Errorf("err = %v, want it at order-cancelled/en/html.tmpl:4", err)
	}
}

// A layout in TEMPLATES_DIR named like the built-in one replaces it, for
// the built-in templates too; so does a partial.
func TestDirectoryLayoutReplacesTheBuiltIn(t *testing.T) {
	t.Parallel()
	files := shopLayout()
	files["_layouts/default/html.tmpl"] = files["_layouts/shop/html.tmpl"]
	files["_layouts/default/text.tmpl"] = "Toko Ana\n\n{{template \"content\" .}}"
	dir := writeDir(t, files)
	tmpl, err := Load(Config{Dir: dir, DefaultLanguage: "id", Brand: Brand{Name: "Toko Ana"}})
	if err != nil {
		t.Fatal(err)
	}
	sample, _ := tmpl.Sample("order-confirmation")
	r, err := tmpl.RenderLocale("order-confirmation", sample, "en")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.HTML, `class="frame"`) || !strings.Contains(r.HTML, "Toko Ana · Thank you") || !strings.HasPrefix(r.Text, "Toko Ana\n\nHi Ana Maria") {
		t.Errorf("order-confirmation is not on the directory's layout:\n%s\n%s", r.HTML, r.Text)
	}
}

func TestCheckRefusesBrokenLayoutsAndPartials(t *testing.T) {
	t.Parallel()
	layout := shopLayout()["_layouts/shop/html.tmpl"]
	tests := []struct {
		name  string
		edits map[string]string
		file  string // relative to the directory
		line  int
		msg   []string
	}{
		{"a missing partial", map[string]string{"order-cancelled/en/html.tmpl": "<p>Hi {{.customer_name}},</p>\n<p>we are refunding {{money .refund .currency}}.</p>\n{{template \"signature\" .}}\n"},
			"order-cancelled/en/html.tmpl", 3, []string{`no partial "signature"`, "add _partials/signature.html.tmpl"}},
		{"a missing text partial", map[string]string{"order-cancelled/id/text.tmpl": "Halo {{.customer_name}},\n{{template \"signature\" .}}\n"},
			"order-cancelled/id/text.tmpl", 2, []string{`no partial "signature"`, "add _partials/signature.text.tmpl"}},
		{"a partial missing in a branch the sample does not take", map[string]string{"order-cancelled/id/html.tmpl": "<p>Halo</p>\n{{if .nope}}{{end}}{{if false}}\n{{template \"signature\" .}}{{end}}\n"},
			"order-cancelled/id/html.tmpl", 3, []string{`no partial "signature"`}},
		{"a layout without the content slot", map[string]string{"_layouts/shop/html.tmpl": strings.Replace(layout, `{{template "content" .}}`, "", 1)},
			"_layouts/shop/html.tmpl", 0, []string{"has no content slot", `{{template "content" .}}`}},
		{"a text layout without the content slot", map[string]string{"_layouts/shop/text.tmpl": "{{template \"footer\" .}}\n"},
			"_layouts/shop/text.tmpl", 0, []string{"has no content slot"}},
		{"a layout that does not exist", map[string]string{"order-cancelled/meta.json": "{\n  \"from_name\": \"Toko Ana\",\n  \"layout\": \"shpo\"\n}\n"},
			"order-cancelled/meta.json", 3, []string{`layout "shpo": no such layout (there are default, shop)`, "add _layouts/shpo/html.tmpl and text.tmpl"}},
		{"a layout that breaks one language", map[string]string{"_layouts/shop/html.tmpl": strings.Replace(layout, `<div class="preheader">`, `<div class="preheader">{{if eq lang "id"}}{{.shop_phone}}{{end}}`, 1)},
			"_layouts/shop/html.tmpl", 15, []string{"does not render sample.json", `map has no entry for key "shop_phone"`}},
		{"a template that breaks one language, below a tag on two lines", map[string]string{"order-cancelled/id/html.tmpl": "<p\n  class=\"lead\">Halo {{.customer_name}},</p>\n<p>dana {{money .refund .currency}}</p>\n<p>{{.refund_reason}}</p>\n"},
			"order-cancelled/id/html.tmpl", 4, []string{"does not render sample.json", `map has no entry for key "refund_reason"`}},
		{"a partial that breaks", map[string]string{"_partials/footer.html.tmpl": "<p\n  class=\"note\">\n{{.shop_phone}}</p>\n"},
			"_partials/footer.html.tmpl", 3, []string{"does not render sample.json", "shop_phone"}},
		{"a partial that does not parse", map[string]string{"_partials/footer.text.tmpl": "-- \n{{brand.Name\n"},
			"_partials/footer.text.tmpl", 3, []string{"unclosed action"}},
		{"a layout that does not parse", map[string]string{"_layouts/shop/text.tmpl": "{{template \"content\" .}}\n{{if}}\n"},
			"_layouts/shop/text.tmpl", 2, []string{"missing value for if"}},
		{"a layout without text.tmpl", map[string]string{"_layouts/shop/text.tmpl": ""},
			"_layouts/shop/text.tmpl", 0, []string{"missing", "every HTML part having a plain-text one"}},
		{"an unexpected file in a layout", map[string]string{"_layouts/shop/style.css": "p {}"},
			"_layouts/shop/style.css", 0, []string{"unexpected file"}},
		{"a partial of no kind", map[string]string{"_partials/footer.tmpl": "x"},
			"_partials/footer.tmpl", 0, []string{"unexpected file", "<name>.html.tmpl"}},
		{"a partial with a bad name", map[string]string{"_partials/Footer.html.tmpl": "x"},
			"_partials/Footer.html.tmpl", 0, []string{"is not a partial name"}},
		{"a partial named like the slot", map[string]string{"_partials/content.html.tmpl": "x"},
			"_partials/content.html.tmpl", 0, []string{"cannot be named content"}},
		{"markup the HTML parser rearranges", map[string]string{"order-cancelled/en/html.tmpl": "<p>Hi</p>\n<table>\n{{range .customer_name}}<tr><td>x</td></tr>{{end}}\n</table>\n"},
			"order-cancelled/en/html.tmpl", 3, []string{"the HTML parser reads <tbody> here where the file has <tr>", "<tbody>"}},
		{"a layout's markup the parser rearranges", map[string]string{"_layouts/shop/html.tmpl": strings.Replace(layout, "<tbody><tr><td>", "<tr><td>", 1)},
			"_layouts/shop/html.tmpl", 18, []string{"cannot inline the layout's CSS", "reads <tbody>"}},
		{"a <style> beside a layout", map[string]string{"order-cancelled/en/html.tmpl": "<style>p { color: red; }</style>\n<p>Hi</p>\n"},
			"order-cancelled/en/html.tmpl", 0, []string{"has a <style>"}},
		{"a whole document beside a layout", map[string]string{"order-cancelled/en/html.tmpl": "<!DOCTYPE html>\n<html lang=\"en\">\n<body><p>Hi</p></body>\n</html>\n"},
			"order-cancelled/en/html.tmpl", 2, []string{"is a whole document", "the content only"}},
		{"_layouts is not a directory of layouts", map[string]string{"_layouts/notes.txt": "x"},
			"_layouts/notes.txt", 0, []string{"one directory per layout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := writeDir(t, with(shopLayout(), tt.edits))
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

// A partial or layout every template uses is one problem, not one a
// template and language.
func TestSharedProblemsAreReportedOnce(t *testing.T) {
	t.Parallel()
	files := with(shopLayout(), map[string]string{"_partials/footer.html.tmpl": "<p>{{.shop_phone}}</p>\n"})
	for k, v := range files {
		if rest, ok := strings.CutPrefix(k, "order-cancelled/"); ok {
			files["order-refunded/"+rest] = v
		}
	}
	dir := writeDir(t, files)
	problems := Check(Config{Dir: dir, DefaultLanguage: "id"})
	if len(problems) != 1 {
		t.Errorf("want one problem, got:\n%s", problemLines(problems))
	}
}
