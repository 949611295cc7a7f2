package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
)

const mailDomain = "shop.example"

// env is one test's private world: database, queue, SMTP sink, and the
// pieces a worker is built from.
type env struct {
	db        testenv.DB
	redis     testenv.Redis
	rdb       redis.UniversalClient
	sink      *smtpsink.Server
	templates *mailtemplate.Templates
	reg       *prometheus.Registry // the worker's
	apiReg    *prometheus.Registry // the order service's and enqueuer's
	metrics   *worker.Metrics
	logs      *testenv.Buffer
	orders    *order.Service
	enq       *queue.Enqueuer // the order service's and the operator's
	ops       *notify.Operator
	f         *notifytest.Factory // deliveries in any state, through the service's statements
}

func setup(t testing.TB, sinkCfg smtpsink.Config) *env {
	t.Helper()
	e := &env{db: testenv.NewDB(t), redis: testenv.NewRedis(t), logs: &testenv.Buffer{}, reg: prometheus.NewRegistry()}
	e.f = notifytest.New(t, e.db.Pool)
	e.rdb = redisconn.NewClient(e.redis.Opt)
	t.Cleanup(func() { e.rdb.Close() })
	sink, err := smtpsink.Start(sinkCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	e.sink = sink
	// The built-in templates and a shop's own, payment-reminder: what
	// the generic trigger sends (schedule).
	if e.templates, err = mailtemplate.Load(mailtemplate.Config{Dir: "../../deploy/templates"}); err != nil {
		t.Fatal(err)
	}
	e.metrics = worker.NewMetrics(e.reg)
	apiReg := prometheus.NewRegistry()
	e.apiReg = apiReg
	enq := queue.NewEnqueuer(e.rdb, e.redis.Queue, slog.New(slog.NewTextHandler(io.Discard, nil)), apiReg)
	e.enq = enq
	e.orders = order.NewService(e.db.Pool, enq, e.templates, time.Hour, apiReg)
	ins := asynq.NewInspector(e.redis.Opt)
	t.Cleanup(func() { ins.Close() })
	e.ops = notify.NewOperator(e.db.Pool, enq, ins, e.rdb)
	return e
}

// smtp returns an SMTP provider pointed at the test sink.
func (e *env) smtp(t testing.TB) *smtp.Provider {
	t.Helper()
	return smtpAt(t, e.sink.Host(), e.sink.Port())
}

// smtpAt returns an SMTP provider, in plain text, for host:port.
func smtpAt(t testing.TB, host string, port int) *smtp.Provider {
	t.Helper()
	p, err := smtp.New(smtp.Config{
		Host: host, Port: port, TLS: smtp.TLSNone, HeloName: "worker-7.shop.example",
		From: "orders@" + mailDomain, IdempotencyHeader: "Idempotency-Key",
		Timeout: 5 * time.Second, MaxIdle: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

type workerOpts struct {
	provider    mail.Provider
	providers   []worker.NamedProvider // failover, instead of provider
	lockTTL     time.Duration
	maxAge      time.Duration
	templates   *mailtemplate.Templates
	unsubscribe worker.Unsubscribe
	paceWait    time.Duration // the default's 5 s when zero
	spillAfter  time.Duration
	batches     bool // PROVIDER_BATCHES=on
}

// testWorker is a Worker behind its Middleware, as cmd/worker serves it:
// ProcessTask logs the attempt's line.
type testWorker struct {
	*worker.Worker
	handler asynq.Handler
}

func (w testWorker) ProcessTask(ctx context.Context, task *asynq.Task) error {
	return w.handler.ProcessTask(ctx, task)
}

func (e *env) worker(t testing.TB, o workerOpts) testWorker {
	t.Helper()
	if o.provider == nil {
		o.provider = e.smtp(t)
	}
	if o.lockTTL == 0 {
		o.lockTTL = 10 * time.Second
	}
	if o.maxAge == 0 {
		o.maxAge = time.Hour
	}
	if o.templates == nil {
		o.templates = e.templates
	}
	if o.providers == nil {
		o.providers = worker.Only("smtp", o.provider)
	}
	if o.paceWait == 0 {
		o.paceWait = 5 * time.Second
	}
	w := worker.New(e.db.Pool, e.rdb, o.providers, o.templates, worker.Config{
		LockTTL: o.lockTTL, MaxAge: o.maxAge, ProbeInterval: 100 * time.Millisecond, SendTimeout: 10 * time.Second,
		MessageIDDomain: mailDomain, WorkerID: t.Name(), Queue: e.redis.Queue, Concurrency: 10, Unsubscribe: o.unsubscribe,
		PaceWait: o.paceWait, SpillAfter: o.spillAfter, Batches: o.batches,
	}, slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), e.metrics)
	return testWorker{Worker: w, handler: w.Middleware(w)}
}

// checkout places an order and returns its confirmation delivery.
func (e *env) checkout(t testing.TB, email string) notify.Delivery {
	t.Helper()
	price := int64(150000)
	o, err := e.orders.Place(context.Background(), order.Checkout{
		CustomerEmail: email, CustomerName: "Budi", Currency: "IDR",
		Items: []order.CheckoutItem{{SKU: "KOPI-1", Name: "Kopi Toraja", Quantity: 2, UnitPrice: &price}},
	}, order.Caller{}, "")
	if err != nil {
		t.Fatal(err)
	}
	return e.delivery(t, o.Notifications[0].IdempotencyKey)
}

func (e *env) delivery(t testing.TB, key string) notify.Delivery {
	t.Helper()
	d, err := notify.GetByKey(context.Background(), e.db.Pool, key)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// deliver runs d's task until it is done (process), failing the test on
// an error.
func (e *env) deliver(t *testing.T, w asynq.Handler, d notify.Delivery) {
	t.Helper()
	if err := process(context.Background(), w, d); err != nil {
		t.Fatal(err)
	}
}

// emails checks that the sink holds want e-mails; why says what the
// count means ("after the block was lifted").
func (e *env) emails(t *testing.T, want int, why string) {
	t.Helper()
	if n := e.sink.Count(); n != want {
		t.Errorf("%d e-mails %s, want %d", n, why, want)
	}
}

// process runs the handler on d's task, running it again as asynq would
// while the task waits (a busy lock, a provider that refuses us), and
// returns the final error; a task still waiting after 20 s is an error.
func process(ctx context.Context, w asynq.Handler, d notify.Delivery) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := w.ProcessTask(ctx, queue.NewDeliverTask(d))
		if err == nil || worker.IsFailure(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("task still waiting after 20s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (e *env) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testenv.Metric(t, e.reg, name, labels...)
}

func isSkipRetry(err error) bool { return errors.Is(err, asynq.SkipRetry) }

// corrupt writes a delivery's row by hand: for a test that means to
// break it, as nothing the service does would (notifytest makes every
// state the service can reach).
func (e *env) corrupt(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}
