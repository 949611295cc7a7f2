package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The worker refuses to start on a broken TEMPLATES_DIR: a template it
// cannot render must stop the deploy, not a delivery at 3 a.m.
func TestBrokenTemplatesDirStopsTheWorkerAtStart(t *testing.T) {
	t.Parallel()
	w := newWorld(t, smtpsink.Config{})
	testenv.CheckBrokenTemplatesStopStartUp(t, run, w.env(), "worker started")
}

// With TEMPLATES_RELOAD=true (make run's), a template edited while the
// worker runs is what the next delivery sends, without a restart: here
// the layout of TEMPLATES_DIR, which the confirmation uses; the edited
// version is kept, so that the console shows that e-mail as it was sent.
func TestTemplatesReloadSendsAnEditWithoutARestart(t *testing.T) {
	t.Parallel()
	w := newWorld(t, smtpsink.Config{})
	dir := t.TempDir()
	builtin := "../../internal/mailtemplate/builtin/_layouts/default"
	for _, name := range []string{"html.tmpl", "text.tmpl"} {
		b, err := os.ReadFile(filepath.Join(builtin, name))
		if err != nil {
			t.Fatal(err)
		}
		testenv.WriteFile(t, filepath.Join(dir, "_layouts", "default", name), string(b))
	}
	worker := testenv.StartRun(t, run, w.env("TEMPLATES_DIR", dir, "TEMPLATES_RELOAD", "true"))
	const marker = "EDITED WHILE THE WORKER RAN"
	sent := func(email string) (string, notify.Delivery) {
		t.Helper()
		d := w.checkout(t, email)
		var got string
		testenv.WaitFor(t, "the e-mail to "+email, 30*time.Second, func() bool {
			if ms := w.sink.ByRecipient(email); len(ms) > 0 {
				got = string(ms[0].Data)
				return true
			}
			return false
		})
		return got, d
	}
	if before, _ := sent("before@example.com"); strings.Contains(before, marker) {
		t.Fatal("the marker is in the e-mail before the edit")
	}
	text := filepath.Join(dir, "_layouts", "default", "text.tmpl")
	b, err := os.ReadFile(text)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, text, marker+"\n\n"+string(b))
	after, d := sent("after@example.com")
	if !strings.Contains(after, marker) {
		t.Error("the e-mail sent after the edit is not the edited one")
	}
	_, events, err := notify.NewOperator(w.db.Pool, nil, nil, nil).Get(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := notify.LastHandOver(events)
	var kept bool
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM template_versions WHERE digest = $1)`, h.Version).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if !ok || h.Version == "" || !kept {
		t.Errorf("the edited version %q of the hand-over is kept: %v", h.Version, kept)
	}
	if err := worker.Stop(t, 60*time.Second); err != nil {
		t.Error(err)
	}
	if !strings.Contains(worker.Logs.String(), `"msg":"templates reloaded"`) {
		t.Error("the worker did not log the reload")
	}
}
