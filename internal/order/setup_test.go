package order

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// keyTTL is how long the tests' Idempotency-Keys live.
const keyTTL = 24 * time.Hour

// env is a Service on a database of its own, queueing on a test Redis,
// with its clock in the test's hand.
type env struct {
	svc       *Service
	db        testenv.DB
	redis     testenv.Redis
	inspector *asynq.Inspector
	templates *mailtemplate.Templates
	now       time.Time // the service's clock: move it to pass time
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{db: testenv.NewDB(t), redis: testenv.NewRedis(t), templates: shopTemplates(t), now: time.Now().UTC().Truncate(time.Microsecond)}
	rdb := redisconn.NewClient(e.redis.Opt)
	t.Cleanup(func() { rdb.Close() })
	e.inspector = asynq.NewInspector(e.redis.Opt)
	t.Cleanup(func() { e.inspector.Close() })
	reg := prometheus.NewRegistry()
	enq := queue.NewEnqueuer(rdb, e.redis.Queue, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	e.svc = NewService(e.db.Pool, enq, e.templates, keyTTL, reg)
	e.svc.now = func() time.Time { return e.now }
	return e
}

// count is the number of rows in table.
func (e *env) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := e.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// queued reports whether delivery id has a task on the queue.
func (e *env) queued(t *testing.T, id uuid.UUID) bool {
	t.Helper()
	_, err := e.inspector.GetTaskInfo(e.redis.Queue, queue.TaskID(id))
	return err == nil
}

// place records c for caller without an Idempotency-Key.
func (e *env) place(t *testing.T, c Checkout, caller Caller) Placed {
	t.Helper()
	p, err := e.svc.Place(t.Context(), c, caller, "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// keyed is a caller with an API key of its own (its owner).
func keyed() Caller {
	id := uuid.New()
	return Caller{Key: id, Owner: id}
}
