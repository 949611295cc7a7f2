package testenv

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// TemplatesDir writes a TEMPLATES_DIR with one template of the shop's
// own, payment-reminder; broken, its text.tmpl calls an unknown function
// on line 2.
func TemplatesDir(t testing.TB, broken bool) string {
	t.Helper()
	text := "Halo {{.customer_name}},\nmohon selesaikan pembayaran Anda.\n"
	if broken {
		text = "Halo {{.customer_name}},\n{{monye 1}}\n"
	}
	dir := t.TempDir()
	for name, content := range map[string]string{
		"schema.json":  `{"type":"object","required":["customer_name"],"properties":{"customer_name":{"type":"string"}}}`,
		"sample.json":  `{"customer_name":"Sari"}`,
		"subject.tmpl": `Pengingat pembayaran untuk {{.customer_name}}`,
		"text.tmpl":    text,
		"html.tmpl":    `<p>Halo {{.customer_name}}, mohon selesaikan pembayaran Anda.</p>`,
	} {
		WriteFile(t, filepath.Join(dir, "payment-reminder", name), content)
	}
	return dir
}

// WriteFile writes content to file, making its directory first.
func WriteFile(t testing.TB, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// CheckBrokenTemplatesStopStartUp checks that a TEMPLATES_DIR with a
// broken template (TemplatesDir) stops run's start-up with an error that
// names the file and line, and that the same directory fixed starts:
// run logs startedMsg. It sets env's TEMPLATES_DIR.
func CheckBrokenTemplatesStopStartUp(t testing.TB, run RunFunc, env map[string]string, startedMsg string) {
	t.Helper()
	env["TEMPLATES_DIR"] = TemplatesDir(t, true)
	started, err := RunUntilLogged(t, run, env, startedMsg)
	if started || err == nil {
		t.Fatalf("started with a broken TEMPLATES_DIR (started %v, run = %v)", started, err)
	}
	for _, want := range []string{"payment-reminder/text.tmpl:2:", `function "monye" not defined`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("run = %q, want it to name %q", err, want)
		}
	}
	env["TEMPLATES_DIR"] = TemplatesDir(t, false)
	if started, err := RunUntilLogged(t, run, env, startedMsg); !started {
		t.Errorf("with the template fixed: did not start, run = %v", err)
	}
}

// LayoutsDir writes a TEMPLATES_DIR whose templates share a layout of the
// shop's own (_layouts/shop) and a partial (_partials/footer); broken,
// each of the ways a layout or partial goes wrong is in it once:
//
//	payment-reminder/html.tmpl:2        calls a partial, signature, that does not exist
//	_layouts/bare/html.tmpl             a layout without the content slot
//	payment-overdue/meta.json:1         names a layout, shpo, that does not exist
//	order-delayed/en/text.tmpl:2        breaks its English variant only
func LayoutsDir(t testing.TB, broken bool) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"_layouts/shop/html.tmpl": "<!DOCTYPE html>\n<html lang=\"{{lang}}\">\n<head><meta charset=\"utf-8\"><title>{{brand.Name}}</title>\n" +
			"<style>p { margin: 0 0 12px; }</style></head>\n<body>\n{{template \"content\" .}}\n{{template \"footer\" .}}\n</body>\n</html>\n",
		"_layouts/shop/text.tmpl":    "{{template \"content\" .}}\n{{template \"footer\" .}}\n",
		"_partials/footer.html.tmpl": "<p>{{brand.Name}}</p>\n",
		"_partials/footer.text.tmpl": "-- \n{{brand.Name}}\n",
	}
	template := func(name string, langs []string, meta string, edits map[string]string) {
		files[name+"/schema.json"] = `{"type":"object","required":["customer_name"],"properties":{"customer_name":{"type":"string"}}}`
		files[name+"/sample.json"] = `{"customer_name":"Sari"}`
		files[name+"/meta.json"] = meta
		for _, lang := range langs {
			files[path.Join(name, lang, "subject.tmpl")] = "Pesanan untuk {{.customer_name}}"
			files[path.Join(name, lang, "text.tmpl")] = "Halo {{.customer_name}},\nterima kasih.\n"
			files[path.Join(name, lang, "html.tmpl")] = "<p>Halo {{.customer_name}},</p>\n<p>terima kasih.</p>\n"
		}
		for k, v := range edits {
			files[path.Join(name, k)] = v
		}
	}
	none := map[string]string{}
	template("payment-reminder", []string{""}, `{"layout": "shop"}`, none)
	template("payment-overdue", []string{""}, `{"layout": "shop"}`, none)
	template("order-delayed", []string{"id", "en"}, `{"layout": "shop"}`, none)
	if broken {
		template("payment-reminder", []string{""}, `{"layout": "shop"}`, map[string]string{"html.tmpl": "<p>Halo {{.customer_name}},</p>\n{{template \"signature\" .}}\n"})
		files["_layouts/bare/html.tmpl"] = "<!DOCTYPE html>\n<html lang=\"{{lang}}\"><head><title>x</title></head><body></body></html>\n"
		files["_layouts/bare/text.tmpl"] = "{{template \"content\" .}}\n"
		template("payment-overdue", []string{""}, `{"layout": "shpo"}`, none)
		template("order-delayed", []string{"id", "en"}, `{"layout": "shop"}`, map[string]string{"en/text.tmpl": "Hi {{.customer_name}},\n{{.delay_reason}}\n"})
	}
	for name, content := range files {
		WriteFile(t, filepath.Join(dir, filepath.FromSlash(name)), content)
	}
	return dir
}
