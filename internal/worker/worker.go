package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sekali-dev/sekali/internal/breaker"
	"github.com/sekali-dev/sekali/internal/keylock"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/testmail"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// tracerName names this package's spans.
const tracerName = "github.com/sekali-dev/sekali/internal/worker"

// Config tunes the delivery worker.
type Config struct {
	// LockTTL is the life of the Redis lock and of the row's lease; the
	// heartbeat renews both every LockTTL/3 while a send is in progress.
	LockTTL time.Duration
	// MaxAge is how long a delivery keeps trying, counted from when its
	// tries began (recording, or an operator's retry): a provider that
	// refuses us or defers the message makes it wait, never fail, until
	// then. Mail servers keep a message for days (Postfix: 5).
	MaxAge time.Duration
	// ProbeInterval is how often a provider that refuses us is probed;
	// waiting tasks come back within a few of these.
	ProbeInterval time.Duration
	// SendTimeout bounds one attempt from claim to outcome.
	SendTimeout time.Duration
	// MessageIDDomain is the right-hand side of every Message-ID a
	// delivery's first attempt builds (later ones use the stored one).
	MessageIDDomain string
	// WorkerID names this process in logs (hostname and pid).
	WorkerID string
	// Queue is the asynq queue served, under which the worker publishes
	// its view of the provider.
	Queue string
	// Concurrency is the most deliveries handled at once (asynq's
	// Concurrency); an operator may lower it at run time, see
	// WatchConcurrency.
	Concurrency int
	// Tracer records the attempt's spans; nil records none.
	Tracer trace.Tracer
	// Unsubscribe builds the one-click unsubscribe of subscription
	// templates' messages; cmd/worker refuses to start without it when
	// there is such a template.
	Unsubscribe Unsubscribe
	// PaceWait is how long a task may wait for its provider's token in
	// its goroutine, holding nothing else; past it, the task is handed
	// back to the queue for the expected wait (PACE_WAIT).
	PaceWait time.Duration
	// SpillAfter: a delivery never handed over whose first provider
	// would make it wait longer than this for a token goes to the next
	// provider that has one now (PACE_SPILL_AFTER); 0, the default:
	// never, every delivery waits for the first.
	SpillAfter time.Duration
	// Batches: a provider that takes many messages in one request
	// (mail.Batcher) gets them so (send.go; PROVIDER_BATCHES); false:
	// one message a request, everywhere.
	Batches bool
}

// Unsubscribe is how a subscription message's List-Unsubscribe is made:
// the API's public base URL (UNSUBSCRIBE_URL, e.g.
// https://shop.example/sekali), the secret that signs the tokens
// (UNSUBSCRIBE_SECRET, which the API verifies with), and an optional
// mailto address (UNSUBSCRIBE_MAILTO).
type Unsubscribe struct {
	BaseURL, Secret, Mailto string
}

// header is the List-Unsubscribe of a message of category to recipient,
// its token issued on the day the delivery was recorded (created), so
// that every attempt at the message carries the same header.
func (u Unsubscribe) header(recipient, category string, created time.Time) string {
	h := "<" + strings.TrimSuffix(u.BaseURL, "/") + "/v1/unsubscribe/" + mail.UnsubscribeToken(u.Secret, recipient, category, created) + ">"
	if u.Mailto != "" {
		h += ", <mailto:" + u.Mailto + "?subject=unsubscribe>"
	}
	return h
}

// An attempt's outcome is written, and its lock released, even after
// SendTimeout has run out (a message the provider accepted must be
// recorded as sent): these bound those two steps.
const (
	recordTimeout  = 10 * time.Second
	releaseTimeout = 2 * time.Second
)

// MinShutdownTimeout is the least SIGTERM must wait for a worker whose
// attempts may take sendTimeout: the send, then recording its outcome and
// releasing its lock.
func MinShutdownTimeout(sendTimeout time.Duration) time.Duration {
	return sendTimeout + recordTimeout + releaseTimeout
}

// Worker drives deliveries pending → sending → sent. It is the asynq
// handler for TaskTypeDeliver; wrap it in Middleware. A task's
// deliveries go through one pipeline together (task.go): the task is the
// batch.
type Worker struct {
	db     *pgxpool.Pool
	rdb    redis.UniversalClient
	lock   keylock.Locks
	routes []*route // PROVIDERS, in order: each attempt takes the first that is up
	// test is test mode's provider (internal/testmail), which takes every
	// test delivery and nothing else; it is in no list, so no
	// configuration can route a test delivery to a real provider, or a
	// live one to it.
	test      *route
	templates *mailtemplate.Templates
	// templateNames are the templates this worker may claim deliveries
	// of; subscriptions those of the subscription category.
	templateNames, subscriptions []string
	cfg                          Config
	log                          *slog.Logger
	metrics                      *Metrics
	limit                        *limiter
	tracer                       trace.Tracer
	draining                     atomic.Bool
	// The statements that take a task's rows in arrays, on a generic plan
	// (postgres.GenericPlans).
	plans postgres.GenericPlans
	// requeue puts a delivery of a task of many back in a task of its
	// own, or a batch's members in its task (task.go), after retryDelay
	// (the server's back-off, RetryDelay).
	requeue    *asynq.Client
	retryDelay func(n int, err error) time.Duration
}

// Drain makes the worker start no new attempt: tasks that have not
// claimed their deliveries yet go back to the queue, so that shutdown
// only waits for sends already under way.
func (w *Worker) Drain() { w.draining.Store(true) }

// NamedProvider is one provider of the worker's ordered list
// (PROVIDERS), under the name recorded with each hand-over.
type NamedProvider struct {
	Name     string
	Provider mail.Provider
	// Resend, for a provider whose refusal of a second message under our
	// key makes sending again safe (Resend), is how long after the
	// earliest attempt whose outcome is unknown that lasts
	// (roster.DedupWindows): a delivery pinned here and older than that
	// is held, not sent again. 0: no such window.
	Resend time.Duration
	// Budget paces the requests to it, shared with every worker
	// (internal/pace); nil: unpaced.
	Budget *pace.Budget
}

// Only is the list of one provider, for a worker without failover.
func Only(name string, p mail.Provider) []NamedProvider {
	return []NamedProvider{{Name: name, Provider: p}}
}

// New returns a Worker that sends through providers, the first
// that is up for each attempt (at least one). db must be the primary:
// every decision is read from and written to the source of truth, never
// a replica.
func New(db *pgxpool.Pool, rdb redis.UniversalClient, providers []NamedProvider, templates *mailtemplate.Templates, cfg Config, log *slog.Logger, metrics *Metrics) *Worker {
	names := templates.Names()
	metrics.knowTemplates(names)
	metrics.knowProviders(providers)
	routes := make([]*route, len(providers))
	for i, p := range providers {
		routes[i] = newRoute(p, cfg.Batches, breaker.New(metrics.providerUp.WithLabelValues(p.Name)))
	}
	return &Worker{
		db:     db,
		rdb:    rdb,
		lock:   keylock.New(rdb, cfg.LockTTL),
		routes: routes,
		// Always up, and shown nowhere.
		test:          newRoute(NamedProvider{Name: mail.TestProvider, Provider: testmail.New()}, false, breaker.New(breaker.Nowhere{})),
		templates:     templates,
		templateNames: names,
		subscriptions: templates.Subscriptions(),
		cfg:           cfg,
		log:           log,
		metrics:       metrics,
		limit:         newLimiter(max(cfg.Concurrency, 1)),
		requeue:       asynq.NewClientFromRedisClient(rdb),
		retryDelay:    func(n int, err error) time.Duration { return RetryDelay(n, err, nil) },
		tracer:        cmp.Or[trace.Tracer](cfg.Tracer, noop.NewTracerProvider().Tracer(tracerName)),
		// The statements take their rows in arrays: on a generic plan, or
		// PostgreSQL plans them anew each time (postgres.GenericPlans).
		plans: postgres.GenericPlans{DB: db},
	}
}

// ProcessTask handles one task: its deliveries, one or many, through one
// pipeline (task.go). It is safe to run any number of times,
// concurrently, on any number of workers: at most one of them hands a
// message to the provider per claim, and none after it is sent.
func (w *Worker) ProcessTask(ctx context.Context, task *asynq.Task) error {
	l := taskLogFrom(ctx)
	t, err := queue.ParseTask(task.Payload())
	if err != nil {
		l.result = resultBadPayload
		return fmt.Errorf("malformed task payload %q: %w: %w", textrule.Clip(string(task.Payload()), 200), err, asynq.SkipRetry)
	}
	// While every provider refuses us, no attempt is made: the task
	// comes back after the next probe.
	if !w.anyAvailable() {
		l.result = resultProviderUnavailable
		w.metrics.handedBack.WithLabelValues("provider_unavailable").Inc()
		return w.providerWait(errProviderUnavailable)
	}
	return w.run(ctx, l, t)
}

// renderError: the template exists but cannot render the stored data.
type renderError struct{ err error }

func (e *renderError) Error() string {
	return "the template cannot render this delivery's data: " + e.err.Error()
}

// errWrongMode refuses, before anything is sent, an attempt whose route
// is not its delivery's mode's: a test delivery anywhere but at the test
// provider, or a live one there. routeOf never makes one; this is the
// last line should a change ever do.
var errWrongMode = errors.New("a test delivery goes to the test provider alone, and only a test delivery does")
