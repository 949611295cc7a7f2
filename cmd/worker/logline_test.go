package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/logbuf"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The attempt lines the binary writes, with the logger it builds, carry
// each key once: a field added to that logger (slog's With) and written
// by the middleware too would appear twice on every line.
func TestAttemptLogLinesOfTheBinaryHaveEachKeyOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, smtpsink.Config{})
	worker := testenv.StartRun(t, run, w.env())

	d := w.checkout(t, "sari@example.com")
	testenv.WaitFor(t, "the delivery to be sent", 30*time.Second, func() bool { return w.delivery(t, d).Status == notify.StatusSent })
	if err := worker.Stop(t, 60*time.Second); err != nil {
		t.Errorf("run = %v", err)
	}
	logs := worker.Logs

	attempts := 0
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "delivery attempt" {
			continue
		}
		attempts++
		dups, err := logbuf.DuplicateKeys(sc.Bytes())
		if err != nil || len(dups) > 0 {
			t.Errorf("attempt line with keys more than once: %v (%v)\n%s", dups, err, sc.Bytes())
		}
	}
	if attempts != 1 {
		t.Errorf("%d attempt lines for one sent delivery, want 1:\n%s", attempts, logs)
	}
}
