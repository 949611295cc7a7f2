package main

import (
	"encoding/json"
	"fmt"
	"net/http"
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
	testenv.CheckBrokenTemplatesStopStartUp(t, run, env, "api listening")
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
		"TEMPLATES_DIR": testenv.TemplatesDir(t, true),
	}
	started, err := testenv.RunUntilLogged(t, run, env, "api listening")
	if started || err == nil || !strings.Contains(err.Error(), "payment-reminder/text.tmpl:2:") {
		t.Fatalf("started=%v, err=%v; want the broken template named before the database is tried", started, err)
	}
}

// With TEMPLATES_RELOAD=true (make run's), a template edited while the
// API runs shows on the next preview, and the log says it was read
// again; without it, the production default, the API previews what it
// started with. Another value stops it at start.
func TestTemplatesReloadShowsAnEditOnTheNextPreview(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	for _, reload := range []string{"true", ""} {
		dir := testenv.TemplatesDir(t, false)
		env := map[string]string{
			"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue, "HTTP_ADDR": "127.0.0.1:0",
			"METRICS_ADDR": "127.0.0.1:0", "TEMPLATES_DIR": dir, "TEMPLATES_RELOAD": reload,
		}
		api := testenv.StartRun(t, run, env)
		addr := api.WaitLog(t, "api listening", "addr", 30*time.Second)
		subject := func() string {
			t.Helper()
			res, err := http.Get("http://" + addr + "/v1/templates/payment-reminder/preview")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var out struct{ Subject string }
			if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			return out.Subject
		}
		if got := subject(); got != "Pengingat pembayaran untuk Sari" {
			t.Fatalf("TEMPLATES_RELOAD=%q: the preview's subject before the edit is %q", reload, got)
		}
		testenv.WriteFile(t, filepath.Join(dir, "payment-reminder", "subject.tmpl"), "Segera bayar, {{.customer_name}}")
		got, want := subject(), "Segera bayar, Sari"
		if reload == "" {
			want = "Pengingat pembayaran untuk Sari"
		}
		if got != want {
			t.Errorf("TEMPLATES_RELOAD=%q: the preview after the edit says %q, want %q", reload, got, want)
		}
		if logged := strings.Contains(api.Logs.String(), `"msg":"templates reloaded"`); logged != (reload == "true") {
			t.Errorf("TEMPLATES_RELOAD=%q: logged the reload: %v", reload, logged)
		}
		if err := api.Stop(t, 30*time.Second); err != nil {
			t.Error(err)
		}
	}
	env := map[string]string{"DATABASE_URL": db.URL, "TEMPLATES_RELOAD": "yes", "HTTP_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0"}
	if started, err := testenv.RunUntilLogged(t, run, env, "api listening"); started || err == nil || !strings.Contains(err.Error(), "TEMPLATES_RELOAD") {
		t.Errorf("TEMPLATES_RELOAD=yes: started %v, %v; want it refused at start", started, err)
	}
}
