package testenv

import (
	"os"
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
