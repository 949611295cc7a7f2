package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/sekali-dev/sekali/internal/logbuf"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

// Every task attempt writes one JSON log line, and each key appears in it
// once (logbuf.DuplicateKeys says why that matters).
// The attempts run under a real asynq server (task id and retry count
// from asynq) with the binary's logger, and cover every kind of outcome:
// sent, refused for now then sent on the retry, refused for good,
// ambiguous (left for the reconciler), and a duplicate.
func TestEachAttemptLogsOneLineWithEachKeyOnce(t *testing.T) {
	t.Parallel()
	var laterTries atomic.Int32
	e := setup(t, smtpsink.Config{
		OnRcpt: func(to string) error {
			switch {
			case strings.HasPrefix(to, "gone@"):
				return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
			case strings.HasPrefix(to, "later@") && laterTries.Add(1) == 1:
				return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 7, 1}, Message: "greylisted, try later"}
			}
			return nil
		},
		DropAfterData: func(m *smtpsink.Message) bool {
			return slices.ContainsFunc(m.To, func(to string) bool { return strings.HasPrefix(to, "lost@") })
		},
	})
	logs := &testenv.Buffer{}
	// As cmd/worker builds it: a JSON handler with the service's name on
	// every line.
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("service", "worker")
	w := worker.New(e.db.Pool, e.rdb, worker.Only("smtp", e.smtp(t)), e.templates, worker.Config{
		LockTTL: 10 * time.Second, MaxAge: time.Hour, ProbeInterval: 100 * time.Millisecond, SendTimeout: 10 * time.Second,
		MessageIDDomain: mailDomain, WorkerID: "worker-7:1234", Queue: e.redis.Queue, Concurrency: 4,
	}, log, e.metrics)
	stop := workertest.Serve(t, w, worker.ServerConfig{Redis: e.redis.Opt, DelayedTaskCheckInterval: 100 * time.Millisecond, RetryBase: 50 * time.Millisecond})

	ok, later, gone, lost := e.checkout(t, "ok@example.com"), e.checkout(t, "later@example.com"),
		e.checkout(t, "gone@example.com"), e.checkout(t, "lost@example.com")
	testenv.WaitFor(t, "every delivery to reach its outcome", 30*time.Second, func() bool {
		return e.delivery(t, ok.IdempotencyKey).Status == notify.StatusSent &&
			e.delivery(t, later.IdempotencyKey).Status == notify.StatusSent &&
			e.delivery(t, gone.IdempotencyKey).Status == notify.StatusFailed &&
			e.delivery(t, lost.IdempotencyKey).HandedOverAt != nil && strings.HasPrefix(e.delivery(t, lost.IdempotencyKey).LastError, "ambiguous")
	})
	stop()
	// The same task once more, after it was sent: a duplicate.
	if err := w.Middleware(w).ProcessTask(context.Background(), queue.NewDeliverTask(ok)); err != nil {
		t.Fatal(err)
	}

	want := map[string][]string{ // delivery id → the results of its attempts, in order
		ok.ID.String():    {"sent", "duplicate_cache"},
		later.ID.String(): {"retried", "sent"},
		gone.ID.String():  {"failed"},
		lost.ID.String():  {"left_for_reconciler"},
	}
	got := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var rec struct {
			Msg        string `json:"msg"`
			DeliveryID string `json:"delivery_id"`
			Result     string `json:"result"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("a log line is not JSON: %v\n%s", err, line)
		}
		if rec.Msg != "delivery attempt" {
			continue
		}
		dups, err := logbuf.DuplicateKeys(line)
		if err != nil {
			t.Fatalf("parse attempt line: %v\n%s", err, line)
		}
		if len(dups) > 0 {
			t.Errorf("attempt line has keys more than once: %v\n%s", dups, line)
		}
		got[rec.DeliveryID] = append(got[rec.DeliveryID], rec.Result)
	}
	for id, results := range want {
		if !slices.Equal(got[id], results) {
			t.Errorf("delivery %s: attempt lines with results %v, want one per attempt: %v", id, got[id], results)
		}
	}
	if t.Failed() {
		t.Logf("logs:\n%s", logs)
	}
}
