package main

import (
	"testing"

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
