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

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smartbatch"
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
	// (mail.Batcher) gets them so (convoy.go; PROVIDER_BATCHES); false:
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
// handler for TaskTypeDeliver; wrap it in Middleware.
type Worker struct {
	db     *pgxpool.Pool
	lock   redisLock
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
	// requeue puts a delivery of a task of many back in a task of its own
	// (many.go), after retryDelay (the server's back-off, RetryDelay).
	plans      postgres.GenericPlans // the pool, for the statements that take arrays
	requeue    *asynq.Client
	retryDelay func(n int, err error) time.Duration

	// The statements on the way to a send, each shared by the attempts
	// that reach it at once (internal/smartbatch; batch.go).
	claims    *smartbatch.Batch[notify.Claim, *notify.Judged]
	handOvers *smartbatch.Batch[notify.HandOverArgs, bool]
	sents     *smartbatch.Batch[notify.SentArgs, bool]
	// The lock's round trips, shared the same way (lock.go).
	locks, unlocks *smartbatch.Batch[lockCall, lockResult]
}

// maxBatch bounds the attempts one statement takes; with the default
// concurrencies a batch never reaches it.
const maxBatch = 64

// Drain makes the worker start no new attempt: tasks that have not
// claimed their delivery yet go back to the queue, so that shutdown only
// waits for sends already under way.
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
	// The three batch statements take their rows in arrays: on a generic
	// plan, or PostgreSQL plans them anew each time (postgres.GenericPlans).
	plans := postgres.GenericPlans{DB: db}
	sizes := func(statement string) func(int) {
		h := metrics.batchSize.WithLabelValues(statement)
		return func(n int) { h.Observe(float64(n)) }
	}
	routes := make([]*route, len(providers))
	for i, p := range providers {
		routes[i] = &route{name: p.Name, provider: p.Provider, resend: p.Resend, budget: p.Budget, health: newHealth(metrics.providerUp.WithLabelValues(p.Name)),
			line: &line{budget: p.Budget, maxWait: cfg.PaceWait}}
	}
	w := &Worker{
		db:     db,
		lock:   redisLock{rdb: rdb, ttl: cfg.LockTTL},
		routes: routes,
		test: &route{name: mail.TestProvider, provider: testmail.New(), line: &line{maxWait: cfg.PaceWait},
			// Always up, and shown nowhere.
			health: newHealth(noUp{})},
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
		claims: &smartbatch.Batch[notify.Claim, *notify.Judged]{Max: maxBatch, Timeout: recordTimeout, Sizes: sizes("claim"), Alone: perRow,
			Run: func(ctx context.Context, cs []notify.Claim) ([]*notify.Judged, error) {
				return notify.ClaimAll(ctx, plans, cs)
			}},
		// A hand-over later than the lease is no use: the lease bounds it.
		handOvers: &smartbatch.Batch[notify.HandOverArgs, bool]{Max: maxBatch, Timeout: cfg.LockTTL, Sizes: sizes("hand_over"), Alone: perRow,
			Run: func(ctx context.Context, hs []notify.HandOverArgs) ([]bool, error) {
				return notify.HandOverAll(ctx, plans, hs)
			}},
		sents: &smartbatch.Batch[notify.SentArgs, bool]{Max: maxBatch, Timeout: recordTimeout, Sizes: sizes("sent"), Alone: perRow,
			Run: func(ctx context.Context, ss []notify.SentArgs) ([]bool, error) {
				return notify.MarkSentAll(ctx, plans, ss)
			}},
		plans: plans,
	}
	lk := redisLock{rdb: rdb, ttl: cfg.LockTTL}
	w.locks = &smartbatch.Batch[lockCall, lockResult]{Max: maxBatch, Timeout: releaseTimeout, Run: lk.acquireAll}
	w.unlocks = &smartbatch.Batch[lockCall, lockResult]{Max: maxBatch, Timeout: releaseTimeout, Run: lk.releaseAll}
	if cfg.Batches {
		for _, r := range routes {
			r.convoy = newConvoy(w, r)
		}
	}
	return w
}

// attempt is one claimed try at a delivery: the row as claimed, the lease
// that fences every write of this attempt, and the Redis lock held
// meanwhile.
type attempt struct {
	row       notify.Delivery
	lease     notify.Lease
	keyHash   string
	lockToken string
	taskID    string

	route    *route     // the provider this attempt sends through
	hb       *heartbeat // renews lock and lease from the send until the outcome is written
	lockLost bool       // the heartbeat found the lock gone
	sent     bool       // "sent" was recorded: cache it when the lock is released
	language string     // the template variant rendered, for the history
	// batched: handed over in a batch at the provider (convoy.go), whose
	// key is batch, of batchSize members: never sent again alone under
	// its own key while the batch's outcome is unknown.
	batched   bool
	batch     string
	batchSize int
	slot      *slot // its share of the worker's concurrency, given back while it waits in a convoy
}

// provider names the provider the attempt went to, for the history; ""
// before one was chosen.
func (a *attempt) provider() string {
	if a.route == nil {
		return ""
	}
	return a.route.name
}

// ProcessTask handles one delivery task. It is safe to run any number of
// times, concurrently, on any number of workers: at most one of them
// hands the message to the provider per claim, and none after it is sent.
func (w *Worker) ProcessTask(ctx context.Context, task *asynq.Task) error {
	l := taskLogFrom(ctx)
	ps, err := queue.ParseTask(task.Payload())
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
	if len(ps) > 1 {
		return w.processMany(ctx, l, ps)
	}
	return w.processOne(ctx, l, ps[0])
}

// processOne is one delivery's attempt, the task's or one of a task's
// many (processMany): l is its log line. It takes a slot of the
// worker's concurrency for itself: Concurrency bounds the deliveries
// under way, whatever tasks carry them.
func (w *Worker) processOne(ctx context.Context, l *taskLog, p queue.Payload) error {
	sl, err := w.limit.take(ctx)
	if err != nil {
		l.result = resultShutdown
		return fmt.Errorf("wait for a concurrency slot: %w", err)
	}
	defer sl.release()
	failpoint.Inject("after-dequeue")
	l.set(slog.String("delivery_id", p.DeliveryID.String()), slog.String("key_hash", p.KeyHash))
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("sekali.delivery_id", p.DeliveryID.String()), attribute.String("sekali.key_hash", p.KeyHash))

	// The provider's token before anything else: waiting for it holds
	// no lock, no lease and no claim (pace.go).
	paced, err := w.paceFor(ctx, l)
	if err != nil {
		return err
	}

	// One round trip: the cache may say "sent" (only that answer is ever
	// believed); otherwise the lock keeps two workers from doing this work
	// at once.
	token, got, err := w.acquireLock(ctx, p.KeyHash)
	for try := 0; got == lockBusy && err == nil && replayMemberFrom(ctx) != nil && try < 20; try++ {
		// A member taken in hand for its batch's replay: its own task
		// holds the lock a moment, as it leaves the member to the replay.
		time.Sleep(50 * time.Millisecond)
		token, got, err = w.acquireLock(ctx, p.KeyHash)
	}
	if got == lockCachedSent {
		w.duplicate(l, "cache")
		return nil
	}
	l.set(slog.String("lock_key", LockKey(p.KeyHash)))
	if err != nil {
		l.result = resultRedisError
		w.metrics.retries.WithLabelValues("redis").Inc()
		return err
	}
	if got == lockBusy {
		w.metrics.lockFailed.Inc()
		w.metrics.retries.WithLabelValues("lock_busy").Inc()
		l.set(slog.String("lock", "busy"))
		w.duplicate(l, "lock")
		return wait(errLockBusy, 500*time.Millisecond, time.Second)
	}
	w.metrics.lockAcquired.Inc()
	l.set(slog.String("lock", "acquired"))
	taskID, _ := asynq.GetTaskID(ctx)
	a := &attempt{keyHash: p.KeyHash, lockToken: token, taskID: taskID, slot: sl,
		lease: notify.Lease{Token: uuid.New(), TTL: w.cfg.LockTTL, Actor: w.cfg.WorkerID}}
	defer w.releaseLock(ctx, a)
	failpoint.Inject("after-lock")

	if w.draining.Load() {
		l.result = resultHandedBack
		w.metrics.handedBack.WithLabelValues("shutdown").Inc()
		return wait(errDraining, 500*time.Millisecond, time.Second)
	}
	if done, err := w.claim(ctx, l, a, p); done || err != nil {
		return err
	}
	failpoint.Inject("after-claim")
	if w.draining.Load() {
		return w.apply(ctx, l, a.row, a, decideDraining())
	}
	// The provider whose token the task took, or the one the row is
	// pinned to (with a token of its own); a test delivery's is the test
	// provider, always.
	route, s := w.routeOf(ctx, a.row, paced)
	if s != nil {
		return w.apply(ctx, l, a.row, a, *s)
	}
	a.route = route
	l.set(slog.String("provider", a.route.name))
	if s, past := decidePastResendWindow(a.row, a.route.name, a.route.resend, time.Now()); past {
		return w.apply(ctx, l, a.row, a, s)
	}
	if g, s := w.replayFor(ctx, l, a); s != nil {
		return w.apply(ctx, l, a.row, a, *s)
	} else if g != nil {
		// It leads its batch's replay: its own place in the group, and
		// the task ends once every member's attempt has.
		rm := &replayMember{g: g}
		defer func() {
			sl.release() // the members taken in hand may need it
			g.wg.Wait()
		}()
		defer rm.leave()
		ctx = context.WithValue(ctx, replayKey{}, rm)
	}

	// From the claim on, the attempt runs to its outcome even if asynq
	// cancels ctx (shutdown, task deadline): stopping half-way is what
	// makes outcomes ambiguous.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.SendTimeout)
	defer cancel()
	// deliver starts the heartbeat; it goes on until the outcome is
	// written (a write that waits for its batch must not outlive the
	// lease, or the reconciler would judge a send this worker knows the
	// outcome of), and stops whatever happens, a panic in a provider
	// included, before the lock is released.
	defer func() {
		if a.hb != nil {
			a.hb.stop()
		}
	}()
	providerID, sendErr := w.deliver(sctx, a)
	// The outcome is written whatever time the send took: a message the
	// provider accepted must be recorded as sent even if SEND_TIMEOUT ran
	// out while waiting for its reply.
	rctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancelRecord()
	rctx, span := w.tracer.Start(rctx, "record outcome")
	defer span.End()
	if a.batch != "" {
		l.set(slog.String("batch", a.batch), slog.Int("batch_size", a.batchSize))
	}
	if p, ok := errors.AsType[*pacedSend](sendErr); ok {
		return w.apply(rctx, l, a.row, a, decidePaced(a.route.name, p.turn))
	}
	if p, ok := errors.AsType[*replayPutOff](sendErr); ok {
		return w.apply(rctx, l, a.row, a, decideReplayPutOff(p.why))
	}
	return w.apply(rctx, l, a.row, a, decideOutcome(a.row, providerID, sendErr, time.Now(), w.cfg.MaxAge, a.route.resend > 0 && !a.batched))
}

// routeOf is the provider an attempt at the claimed row d sends
// through: the test provider for a test delivery (test mode:
// docs/testmode.md), otherwise routeAfterPace's.
func (w *Worker) routeOf(ctx context.Context, d notify.Delivery, paced *route) (*route, *step) {
	if d.Test {
		return w.test, nil
	}
	return w.routeAfterPace(ctx, d, paced)
}

// errWrongMode refuses, before anything is sent, an attempt whose route
// is not its delivery's mode's: a test delivery anywhere but at the test
// provider, or a live one there. routeOf never makes one; this is the
// last line should a change ever do.
var errWrongMode = errors.New("a test delivery goes to the test provider alone, and only a test delivery does")

// claim takes the row for this attempt: one conditional UPDATE that
// judges the row under its row lock and takes it only when the attempt
// may go ahead (ClaimDeliveries says when). It is the attempt's only read
// of the row: when it takes nothing, its verdict says why, and
// decideUnclaimed what the task does.
func (w *Worker) claim(ctx context.Context, l *taskLog, a *attempt, p queue.Payload) (done bool, err error) {
	cctx, span := w.tracer.Start(ctx, "claim")
	judged, err := w.claims.Do(cctx, notify.Claim{
		ID: p.DeliveryID, KeyHash: p.KeyHash, Lease: a.lease, MessageID: mail.MessageIDOfHash(p.KeyHash, w.cfg.MessageIDDomain),
		TaskID: a.taskID, Templates: w.templateNames, Subscriptions: w.subscriptions, Usable: w.usable(), MaxAge: w.cfg.MaxAge,
	})
	span.End()
	if err != nil {
		l.result = resultDBError
		w.metrics.retries.WithLabelValues("database").Inc()
		return true, fmt.Errorf("claim delivery: %w", err)
	}
	if judged == nil {
		missing := notify.Delivery{ID: p.DeliveryID}
		return true, w.apply(ctx, l, missing, nil, decideUnclaimed(verdictMissing, missing, p.KeyHash, w.cfg.MaxAge, time.Now()))
	}
	row, v := judged.Delivery, judged.Verdict
	if v == notify.VerdictPinnedElsewhere && !w.hasRoute(row.Provider) {
		v = verdictPinnedMissing
	}
	if v != notify.VerdictClaimed {
		if v != notify.VerdictNotTask {
			l.set(slog.String("order_id", row.OrderID.String()), slog.String("template", row.Template))
		}
		return true, w.apply(ctx, l, row, nil, decideUnclaimed(v, row, p.KeyHash, w.cfg.MaxAge, time.Now()))
	}
	a.row = row
	l.set(slog.String("order_id", row.OrderID.String()), slog.String("template", row.Template),
		slog.String("from_status", string(judged.FromStatus)), slog.Int("attempt", row.Attempts))
	return false, nil
}

// releaseLock caches "sent" when the attempt recorded it, then releases
// the lock, in one script, in the round trip it shares with the attempts
// releasing theirs at the same moment.
func (w *Worker) releaseLock(ctx context.Context, a *attempt) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	r, err := w.unlocks.Do(rctx, lockCall{keyHash: a.keyHash, token: a.lockToken, sent: a.sent})
	if err == nil {
		err = r.err
	}
	released := r.released
	if err != nil {
		taskLogFrom(ctx).set(slog.String("release_error", err.Error()))
	}
	if err == nil && !released && !a.lockLost {
		// The lock expired under us without the heartbeat noticing.
		w.metrics.lockExpired.Inc()
	}
}

// duplicate counts a duplicate caught by layer before the claim (the
// cache, the lock).
func (w *Worker) duplicate(l *taskLog, layer string) {
	w.metrics.duplicates.WithLabelValues(layer).Inc()
	l.result = duplicateResult(layer)
}

// renderError: the template exists but cannot render the stored data.
type renderError struct{ err error }

func (e *renderError) Error() string {
	return "the template cannot render this delivery's data: " + e.err.Error()
}

// deliver renders the delivery and hands it to the provider under a
// heartbeat, with the last lease check right before the data. It writes
// no outcome; record does.
func (w *Worker) deliver(ctx context.Context, a *attempt) (providerID string, err error) {
	d := a.row
	if d.Test != (a.route == w.test) {
		return "", &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageConnect, Err: errWrongMode}
	}
	_, renderSpan := w.tracer.Start(ctx, "render", trace.WithAttributes(attribute.String("sekali.template", d.Template)))
	r, err := w.templates.RenderLocale(d.Template, d.Data, d.Locale)
	renderSpan.End()
	if err != nil {
		return "", &renderError{err: err}
	}
	a.language = r.Language

	// Not bounded by ctx (SEND_TIMEOUT): the caller stops it once the
	// outcome is written, however long that waits for its batch, and
	// whatever ends the attempt.
	hb := w.startHeartbeat(context.WithoutCancel(ctx), a)
	a.hb = hb
	msg := mail.Message{
		To:             d.Recipient,
		Subject:        r.Subject,
		Text:           r.Text,
		HTML:           r.HTML,
		MessageID:      d.MessageID, // the claim stores it when it is missing
		IdempotencyKey: d.IdempotencyKey,
		FromName:       r.FromName,
		ReplyTo:        r.ReplyTo,
	}
	if r.Category == mailtemplate.CategorySubscription && w.cfg.Unsubscribe.BaseURL != "" {
		msg.ListUnsubscribe = w.cfg.Unsubscribe.header(d.Recipient, r.Category, d.CreatedAt)
	}
	ho := notify.HandOverArgs{Leased: notify.Leased{ID: d.ID, Lease: a.lease}, Provider: a.route.name,
		Subject: r.Subject, Language: r.Language, Version: w.templates.Version(d.Template)}
	if c := a.route.convoy; c != nil && w.cfg.Batches {
		a.slot.release() // the request is one, however many ride in it
		pctx, span := w.tracer.Start(ctx, "provider batch send", trace.WithSpanKind(trace.SpanKindClient))
		span.SetAttributes(attribute.String("sekali.provider", a.route.name))
		providerID, err = c.ride(&rider{ctx: pctx, a: a, msg: msg, ho: ho, urgent: urgent(ctx, w.cfg.Queue), tally: onItsWayFrom(ctx), replay: replayMemberFrom(ctx), wake: make(chan bool, 1)})
		w.sent(a, span, err)
		span.End()
		return providerID, err
	}
	lastLeaseCheck := func() error {
		if hb.lockLost() {
			return errLockLost
		}
		failpoint.Inject("before-data")
		held, err := w.handOvers.Do(ctx, ho)
		if err != nil {
			return err
		}
		if !held {
			return notify.ErrLeaseLost
		}
		failpoint.Inject("after-handover")
		w.depart(ctx, a.route)
		return nil
	}
	sendStart := time.Now()
	pctx, span := w.tracer.Start(ctx, "provider send", trace.WithSpanKind(trace.SpanKindClient))
	span.SetAttributes(attribute.String("sekali.provider", a.route.name))
	var ok okAnswer
	providerID, err = a.route.provider.Send(mail.WithAnswerObserver(pctx, ok.observe), msg, lastLeaseCheck)
	w.metrics.sendLatency.Observe(time.Since(sendStart).Seconds())
	if err == nil {
		w.learnPace(ctx, a.route, ok.header())
	}
	w.sent(a, span, err)
	span.End()
	return providerID, err
}

// sent marks a send's span with its error, and notes a lock the
// heartbeat found gone meanwhile.
func (w *Worker) sent(a *attempt, span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	if a.hb.lockLost() {
		a.lockLost = true
		w.metrics.lockExpired.Inc()
	}
}

// acquireLock asks the cache and takes the lock (redisLock.acquire), in
// the round trip it shares with the attempts doing the same at once.
func (w *Worker) acquireLock(ctx context.Context, keyHash string) (token string, got lockOutcome, err error) {
	r, err := w.locks.Do(ctx, lockCall{keyHash: keyHash})
	if err == nil {
		err = r.err
	}
	if err != nil {
		return "", lockBusy, err
	}
	return r.token, r.got, nil
}
