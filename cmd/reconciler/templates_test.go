package main

import (
	"testing"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// The reconciler refuses to start on a broken TEMPLATES_DIR, as the
// worker and the API do: all three must agree on the templates there are.
func TestBrokenTemplatesDirStopsTheReconcilerAtStart(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue, "METRICS_ADDR": "127.0.0.1:0",
	}
	testenv.CheckBrokenTemplatesStopStartUp(t, run, env, "reconciler started")
}
