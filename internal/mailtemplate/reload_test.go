package mailtemplate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// reloadDir is a TEMPLATES_DIR with one template, notice, whose subject
// is subject.
func reloadDir(t *testing.T, subject string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"schema.json":  `{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}`,
		"sample.json":  `{"name":"Sari"}`,
		"subject.tmpl": subject,
		"text.tmpl":    "Halo {{.name}}.\n",
		"html.tmpl":    `<p>Halo {{.name}}.</p>`,
	} {
		writeTemplateFile(t, filepath.Join(dir, "notice", name), content)
	}
	return dir
}

// writeTemplateFile writes a file as an editor would. (Each edit below
// changes the file's size too: a file system whose clock is coarse still
// tells it.)
func writeTemplateFile(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func subjectOf(t *testing.T, reg *Templates) string {
	t.Helper()
	r, err := reg.Render("notice", []byte(`{"name":"Sari"}`))
	if err != nil {
		t.Fatal(err)
	}
	return r.Subject
}

// With Reload (TEMPLATES_RELOAD), an edited template is what the next
// read renders, its version is the edited one's, and OnReload hears of
// it; an edit that does not load keeps the templates it had and says
// why, and the next good edit is read; a template added is there. Without
// Reload, the production default, the registry is what it started with.
func TestReloadReadsTheDirectoryAgainWhenItChanges(t *testing.T) {
	t.Parallel()
	dir := reloadDir(t, "Pemberitahuan untuk {{.name}}")
	var mu sync.Mutex
	var heard []error
	reg, err := Load(Config{Dir: dir, DefaultLanguage: "id", Reload: true, OnReload: func(_ *Templates, err error) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, err)
	}})
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := Load(Config{Dir: dir, DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	before := reg.Version("notice")
	if got := subjectOf(t, reg); got != "Pemberitahuan untuk Sari" {
		t.Fatalf("the subject before an edit: %q", got)
	}
	if len(heard) != 0 {
		t.Errorf("OnReload heard %v before any edit", heard)
	}

	subject := filepath.Join(dir, "notice", "subject.tmpl")
	writeTemplateFile(t, subject, "Kabar untuk {{.name}}")
	if got := subjectOf(t, reg); got != "Kabar untuk Sari" || reg.Version("notice") == before {
		t.Errorf("after an edit: subject %q, version %s (before %s); want the edit and its version", got, reg.Version("notice"), before)
	}
	if got := subjectOf(t, fixed); got != "Pemberitahuan untuk Sari" {
		t.Errorf("without Reload the edit is read: %q", got)
	}

	writeTemplateFile(t, subject, "Kabar untuk {{.name")
	if got := subjectOf(t, reg); got != "Kabar untuk Sari" {
		t.Errorf("after a broken edit: %q, want the templates it had", got)
	}
	var lerr *LoadError
	mu.Lock()
	if len(heard) != 2 || heard[0] != nil || !errors.As(heard[1], &lerr) || !strings.Contains(heard[1].Error(), "subject.tmpl") {
		t.Errorf("OnReload heard %v; want the reload, then the broken file named", heard)
	}
	mu.Unlock()

	writeTemplateFile(t, subject, "Kabar baru untuk {{.name}}")
	writeTemplateFile(t, filepath.Join(dir, "other", "subject.tmpl"), "Lain untuk {{.name}}")
	for name, content := range map[string]string{"schema.json": `{"type":"object"}`, "sample.json": `{"name":"Sari"}`, "text.tmpl": "x\n", "html.tmpl": "<p>x</p>"} {
		writeTemplateFile(t, filepath.Join(dir, "other", name), content)
	}
	if got := subjectOf(t, reg); got != "Kabar baru untuk Sari" || !reg.Has("other") {
		t.Errorf("after the fix and a new template: %q, has other %v", got, reg.Has("other"))
	}
}
