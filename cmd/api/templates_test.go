package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// The API refuses to start on a broken TEMPLATES_DIR: it validates
// every notification's data against the templates it loads, so it must
// not serve with fewer than the workers have.
func TestBrokenTemplatesDirStopsTheAPIAtStart(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue,
		"HTTP_ADDR": "127.0.0.1:0", "METRICS_ADDR": fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
	}
	checkBrokenTemplatesStopStartUp(t, nil, env, "api listening")
}

// templatesDir writes a TEMPLATES_DIR with one template of the shop's
// own, payment-reminder; broken, its text.tmpl calls an unknown function
// on line 2.
func templatesDir(t *testing.T, broken bool) string {
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
		file := filepath.Join(dir, "payment-reminder", name)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startUp runs the binary's run until it returns or logs startedMsg.
// started is true if it logged it; run is then stopped and err is what
// it returned.
func startUp(t *testing.T, args []string, env map[string]string, startedMsg string) (started bool, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testenv.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, func(k string) string { return env[k] }, logs, io.Discard) }()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			return false, err
		case <-deadline:
			t.Fatalf("run neither returned nor logged %q within 30s:\n%s", startedMsg, logs)
		case <-time.After(10 * time.Millisecond):
		}
		if _, ok := logs.Field(startedMsg, "msg"); ok {
			cancel()
			return true, <-done
		}
	}
}

// A TEMPLATES_DIR with a broken template stops start-up with an error
// that names the file and line; the same directory fixed starts.
func checkBrokenTemplatesStopStartUp(t *testing.T, args []string, env map[string]string, startedMsg string) {
	t.Helper()
	env["TEMPLATES_DIR"] = templatesDir(t, true)
	started, err := startUp(t, args, env, startedMsg)
	if started || err == nil {
		t.Fatalf("started with a broken TEMPLATES_DIR (started %v, run = %v)", started, err)
	}
	for _, want := range []string{"payment-reminder/text.tmpl:2:", `function "monye" not defined`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("run = %q, want it to name %q", err, want)
		}
	}
	env["TEMPLATES_DIR"] = templatesDir(t, false)
	if started, err := startUp(t, args, env, startedMsg); !started {
		t.Errorf("with the template fixed: did not start, run = %v", err)
	}
}

// A broken TEMPLATES_DIR is named even while the database is down: the
// templates are read before the first connection.
func TestBrokenTemplatesDirIsNamedWhileTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":  fmt.Sprintf("postgres://postgres@127.0.0.1:%d/none?connect_timeout=1", testenv.FreePort(t)),
		"REDIS_URL":     "redis://127.0.0.1:6379/0",
		"HTTP_ADDR":     "127.0.0.1:0",
		"METRICS_ADDR":  fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"TEMPLATES_DIR": templatesDir(t, true),
	}
	started, err := startUp(t, nil, env, "api listening")
	if started || err == nil || !strings.Contains(err.Error(), "payment-reminder/text.tmpl:2:") {
		t.Fatalf("started=%v, err=%v; want the broken template named before the database is tried", started, err)
	}
}
