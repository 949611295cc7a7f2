package main

import (
	"fmt"
	"strings"
	"testing"

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
