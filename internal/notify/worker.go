package notify

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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/postgres"
)

// WorkerConfig tunes the delivery worker.
type WorkerConfig struct {
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
	db        *pgxpool.Pool
	lock      redisLock
	provider  mail.Provider
	templates *mailtemplate.Templates
	// templateNames are the templates this worker may claim deliveries of.
	templateNames []string
	cfg           WorkerConfig
	log           *slog.Logger
	metrics       *Metrics
	limit         *limiter
	health        *health
	tracer        trace.Tracer
	draining      atomic.Bool

	// The statements on the way to a send, each shared by the attempts
	// that reach it at once (batch.go).
	claims    *batch[claimArgs, *dbsqlc.ClaimDeliveriesRow]
	handOvers *batch[leased, bool]
	sents     *batch[sentArgs, bool]
}

// maxBatch bounds the attempts one statement takes; with the default
// concurrencies a batch never reaches it.
const maxBatch = 64

// Drain makes the worker start no new attempt: tasks that have not
// claimed their delivery yet go back to the queue, so that shutdown only
// waits for sends already under way.
func (w *Worker) Drain() { w.draining.Store(true) }

// NewWorker returns a Worker. db must be the primary: every decision is
// read from and written to the source of truth, never a replica.
func NewWorker(db *pgxpool.Pool, rdb redis.UniversalClient, provider mail.Provider, templates *mailtemplate.Templates, cfg WorkerConfig, log *slog.Logger, metrics *Metrics) *Worker {
	names := templates.Names()
	metrics.knowTemplates(names)
	// The three batch statements take their rows in arrays: on a generic
	// plan, or PostgreSQL plans them anew each time (postgres.GenericPlans).
	q := dbsqlc.New(postgres.GenericPlans{DB: db})
	sizes := func(statement string) func(int) {
		h := metrics.batchSize.WithLabelValues(statement)
		return func(n int) { h.Observe(float64(n)) }
	}
	w := &Worker{
		db:            db,
		lock:          redisLock{rdb: rdb, ttl: cfg.LockTTL},
		provider:      provider,
		templates:     templates,
		templateNames: names,
		cfg:           cfg,
		log:           log,
		metrics:       metrics,
		limit:         newLimiter(max(cfg.Concurrency, 1)),
		health:        newHealth(metrics.providerUp),
		tracer:        cmp.Or[trace.Tracer](cfg.Tracer, noop.NewTracerProvider().Tracer(tracerName)),
		claims: &batch[claimArgs, *dbsqlc.ClaimDeliveriesRow]{max: maxBatch, timeout: recordTimeout, sizes: sizes("claim"),
			run: func(ctx context.Context, cs []claimArgs) ([]*dbsqlc.ClaimDeliveriesRow, error) {
				return claimAll(ctx, q, cs)
			}},
		// A hand-over later than the lease is no use: the lease bounds it.
		handOvers: &batch[leased, bool]{max: maxBatch, timeout: cfg.LockTTL, sizes: sizes("hand_over"),
			run: func(ctx context.Context, ls []leased) ([]bool, error) { return handOverAll(ctx, q, ls) }},
		sents: &batch[sentArgs, bool]{max: maxBatch, timeout: recordTimeout, sizes: sizes("sent"),
			run: func(ctx context.Context, ss []sentArgs) ([]bool, error) { return markSentAll(ctx, q, ss) }},
	}
	return w
}

// attempt is one claimed try at a delivery: the row as claimed, the lease
// that fences every write of this attempt, and the Redis lock held
// meanwhile.
type attempt struct {
	row       dbsqlc.NotificationDelivery
	lease     lease
	keyHash   string
	lockToken string
	taskID    string

	lockLost bool   // the heartbeat found the lock gone
	sent     bool   // "sent" was recorded: cache it when the lock is released
	language string // the template variant rendered, for the history
}

// ProcessTask handles one delivery task. It is safe to run any number of
// times, concurrently, on any number of workers: at most one of them
// hands the message to the provider per claim, and none after it is sent.
func (w *Worker) ProcessTask(ctx context.Context, task *asynq.Task) error {
	l := taskLogFrom(ctx)
	if err := w.limit.acquire(ctx); err != nil {
		l.result = "shutdown"
		return fmt.Errorf("wait for a concurrency slot: %w", err)
	}
	defer w.limit.release()
	failpoint.Inject("after-dequeue")
	// While the provider refuses us, no attempt is made: the task comes
	// back after the next probe.
	if !w.health.available() {
		l.result = "provider_unavailable"
		w.metrics.handedBack.WithLabelValues("provider_unavailable").Inc()
		return w.providerWait(errProviderUnavailable)
	}
	var p deliverPayload
	if err := p.decode(task.Payload()); err != nil {
		l.result = "bad_payload"
		return fmt.Errorf("malformed task payload %q: %w: %w", truncate(task.Payload(), 200), err, asynq.SkipRetry)
	}
	l.set(slog.String("delivery_id", p.DeliveryID.String()), slog.String("key_hash", p.KeyHash))
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("sekali.delivery_id", p.DeliveryID.String()), attribute.String("sekali.key_hash", p.KeyHash))

	// One round trip: the cache may say "sent" (only that answer is ever
	// believed); otherwise the lock keeps two workers from doing this work
	// at once.
	token, got, err := w.lock.acquire(ctx, p.KeyHash)
	if got == lockCachedSent {
		w.duplicate(l, "cache")
		return nil
	}
	l.set(slog.String("lock_key", LockKey(p.KeyHash)))
	if err != nil {
		l.result = "redis_error"
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
	a := &attempt{keyHash: p.KeyHash, lockToken: token, taskID: taskID,
		lease: lease{token: uuid.New(), ttl: w.cfg.LockTTL, actor: w.cfg.WorkerID}}
	defer w.releaseLock(ctx, a)
	failpoint.Inject("after-lock")

	if w.draining.Load() {
		l.result = "handed_back"
		w.metrics.handedBack.WithLabelValues("shutdown").Inc()
		return wait(errDraining, 500*time.Millisecond, time.Second)
	}
	if done, err := w.claim(ctx, l, a, p); done || err != nil {
		return err
	}
	failpoint.Inject("after-claim")

	// From the claim on, the attempt runs to its outcome even if asynq
	// cancels ctx (shutdown, task deadline): stopping half-way is what
	// makes outcomes ambiguous.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.SendTimeout)
	defer cancel()
	providerID, sendErr := w.deliver(sctx, a)
	// The outcome is written whatever time the send took: a message the
	// provider accepted must be recorded as sent even if SEND_TIMEOUT ran
	// out while waiting for its reply.
	rctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancelRecord()
	rctx, span := w.tracer.Start(rctx, "record outcome")
	defer span.End()
	return w.record(rctx, l, a, providerID, sendErr)
}

// claim takes the row for this attempt: one conditional UPDATE that
// reads it under its row lock and takes it only if it is the task's,
// claimable (pending, or an expired lease not handed over), of a template
// this worker has, not too old, and neither blocked nor suppressed. It is
// the attempt's first and, on the way to a send, only read of the row;
// only when it takes nothing is the row read to say why.
func (w *Worker) claim(ctx context.Context, l *taskLog, a *attempt, p deliverPayload) (done bool, err error) {
	cctx, span := w.tracer.Start(ctx, "claim")
	claimed, err := w.claims.do(cctx, claimArgs{
		id: p.DeliveryID, keyHash: p.KeyHash, lease: a.lease, messageID: mail.MessageIDOfHash(p.KeyHash, w.cfg.MessageIDDomain),
		taskID: a.taskID, templates: w.templateNames, maxAge: w.cfg.MaxAge,
	})
	span.End()
	if err != nil {
		l.result = "db_error"
		w.metrics.retries.WithLabelValues("database").Inc()
		return true, fmt.Errorf("claim delivery: %w", err)
	}
	if claimed == nil {
		return true, w.notClaimable(ctx, l, p)
	}
	a.row = claimedDelivery(*claimed)
	l.set(slog.String("order_id", claimed.OrderID.String()), slog.String("template", claimed.Template),
		slog.String("from_status", claimed.FromStatus), slog.Int("attempt", int(claimed.Attempts)))
	return false, nil
}

// releaseLock caches "sent" when the attempt recorded it, then releases
// the lock, in one round trip to Redis.
func (w *Worker) releaseLock(ctx context.Context, a *attempt) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	released, err := w.lock.release(rctx, a.keyHash, a.lockToken, a.sent)
	if err != nil {
		taskLogFrom(ctx).set(slog.String("release_error", err.Error()))
	}
	if err == nil && !released && !a.lockLost {
		// The lock expired under us without the heartbeat noticing.
		w.metrics.lockExpired.Inc()
	}
}

// settled acknowledges a delivery that needs no work: sent, failed or
// held (an operator decides about those).
func (w *Worker) settled(ctx context.Context, l *taskLog, row dbsqlc.NotificationDelivery, layer string) bool {
	switch Status(row.Status) {
	case StatusSent:
		if err := w.lock.cacheSent(ctx, mail.KeyHash(row.IdempotencyKey)); err != nil {
			l.set(slog.String("cache_error", err.Error()))
		}
	case StatusFailed, StatusHeld, StatusSuppressed:
	default:
		return false
	}
	w.duplicate(l, layer)
	w.recordDuplicate(ctx, l, row, layer)
	return true
}

// recordDuplicate writes the suppressed duplicate into the delivery's
// history. Duplicates caught by the cache or the lock are only counted
// and logged: writing them down would cost the database round trip those
// layers exist to save.
func (w *Worker) recordDuplicate(ctx context.Context, l *taskLog, row dbsqlc.NotificationDelivery, layer string) {
	taskID, _ := asynq.GetTaskID(ctx)
	if err := recordEvent(ctx, dbsqlc.New(w.db), row, "duplicate_suppressed", w.cfg.WorkerID,
		map[string]string{"layer": layer, "task_id": taskID}); err != nil {
		l.set(slog.String("history_error", err.Error()))
	}
}

// claimedDelivery is the claimed row without the status it was claimed from.
func claimedDelivery(r dbsqlc.ClaimDeliveriesRow) dbsqlc.NotificationDelivery {
	return dbsqlc.NotificationDelivery{
		ID: r.ID, OrderID: r.OrderID, Template: r.Template, Recipient: r.Recipient, IdempotencyKey: r.IdempotencyKey,
		Status: r.Status, Attempts: r.Attempts, LastError: r.LastError, LeaseToken: r.LeaseToken,
		LeaseExpiresAt: r.LeaseExpiresAt, HandedOverAt: r.HandedOverAt, ProviderMessageID: r.ProviderMessageID,
		TemplateData: r.TemplateData, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, SentAt: r.SentAt,
		MessageID: r.MessageID, TryingSince: r.TryingSince, Locale: r.Locale,
	}
}

// expire gives up on a pending delivery whose tries began more than
// MaxAge ago, without another try.
func (w *Worker) expire(ctx context.Context, l *taskLog, row dbsqlc.NotificationDelivery) error {
	reason := fmt.Sprintf("expired: not sent within DELIVERY_MAX_AGE (%s)", w.cfg.MaxAge)
	if row.LastError != nil {
		reason += "; last error: " + truncate([]byte(*row.LastError), 900)
	}
	expired, err := expirePending(ctx, dbsqlc.New(w.db), row.ID, w.cfg.MaxAge, reason, w.cfg.WorkerID)
	if err != nil {
		l.result = "db_error"
		w.metrics.retries.WithLabelValues("database").Inc()
		return fmt.Errorf("expire delivery %s: %w", row.ID, err)
	}
	if !expired {
		// Claimed or retried meanwhile: let the task run again.
		l.result = "raced"
		return wait(errors.New("delivery changed while being expired"), 500*time.Millisecond, time.Second)
	}
	w.metrics.deliveries.WithLabelValues(row.Template, "failed").Inc()
	l.result = "expired"
	l.set(slog.String("to_status", string(StatusFailed)))
	return fmt.Errorf("%s: %w", reason, asynq.SkipRetry)
}

// notClaimable reads the row the claim did not take and decides what
// the task does: nothing (done, or another worker's), fail it (expired),
// hand it back (a template this worker lacks), or leave it to the
// reconciler, the suppression list or an operator's block.
func (w *Worker) notClaimable(ctx context.Context, l *taskLog, p deliverPayload) error {
	q := dbsqlc.New(w.db)
	id := p.DeliveryID
	row, err := q.GetDelivery(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		l.result = "unknown_delivery"
		return fmt.Errorf("delivery %s does not exist: %w", id, asynq.SkipRetry)
	}
	if err != nil {
		l.result = "db_error"
		w.metrics.retries.WithLabelValues("database").Inc()
		return fmt.Errorf("re-read delivery: %w", err)
	}
	if mail.KeyHash(row.IdempotencyKey) != p.KeyHash {
		l.result = "bad_payload"
		return fmt.Errorf("task key hash %s does not match delivery %s: %w", p.KeyHash, id, asynq.SkipRetry)
	}
	l.set(slog.String("order_id", row.OrderID.String()), slog.String("template", row.Template))
	if w.settled(ctx, l, row, "database") {
		return nil
	}
	expired := row.LeaseExpiresAt != nil && row.LeaseExpiresAt.Before(time.Now())
	claimable := Status(row.Status) == StatusPending ||
		(Status(row.Status) == StatusSending && row.HandedOverAt == nil && expired)
	if claimable && !w.templates.Has(row.Template) {
		// An older worker during a rolling deploy: the delivery is not
		// this worker's to fail. It waits for one that knows the template.
		l.result = "unknown_template"
		w.metrics.handedBack.WithLabelValues("unknown_template").Inc()
		return wait(errUnknownTemplate, unknownTemplateWait, 2*unknownTemplateWait)
	}
	if Status(row.Status) == StatusPending && time.Since(row.TryingSince) >= w.cfg.MaxAge {
		return w.expire(ctx, l, row)
	}
	if Status(row.Status) == StatusSending && row.HandedOverAt != nil && expired {
		// The previous attempt died after the data went out. Sending now
		// could be the second e-mail; the reconciler asks the provider.
		reason := "ambiguous: a previous attempt stopped after handing the message to the provider; left for the reconciler"
		if err := noteAmbiguous(ctx, q, id, reason, w.cfg.WorkerID); err != nil {
			l.set(slog.String("note_error", err.Error()))
		}
		l.result = "left_for_reconciler"
		w.metrics.deliveries.WithLabelValues(row.Template, "ambiguous").Inc()
		return nil
	}
	if Status(row.Status) == StatusPending {
		// Claimable but for the suppression list, or an operator's block.
		suppressed, err := suppressPending(ctx, q, id, w.cfg.WorkerID)
		if err != nil {
			l.result = "db_error"
			w.metrics.retries.WithLabelValues("database").Inc()
			return fmt.Errorf("suppress delivery: %w", err)
		}
		if suppressed {
			l.result = "suppressed"
			l.set(slog.String("to_status", string(StatusSuppressed)))
			w.metrics.deliveries.WithLabelValues(row.Template, "suppressed").Inc()
			return nil
		}
		// The temporary filter.
		// The row stays pending and the reconciler queues it again once
		// the block has expired.
		l.result = "blocked"
		w.metrics.blocked.Inc()
		taskID, _ := asynq.GetTaskID(ctx)
		if err := recordEvent(ctx, q, row, "blocked", w.cfg.WorkerID, map[string]string{
			"task_id": taskID, "reason": "an operator's block on the key or recipient holds it back",
		}); err != nil {
			l.set(slog.String("history_error", err.Error()))
		}
		return nil
	}
	// Another worker holds a live lease on it.
	w.duplicate(l, "database")
	w.recordDuplicate(ctx, l, row, "database")
	l.result = "owned_by_another_worker"
	return nil
}

func (w *Worker) duplicate(l *taskLog, layer string) {
	w.metrics.duplicates.WithLabelValues(layer).Inc()
	l.result = "duplicate_" + layer
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
	_, renderSpan := w.tracer.Start(ctx, "render", trace.WithAttributes(attribute.String("sekali.template", d.Template)))
	locale := ""
	if d.Locale != nil {
		locale = *d.Locale
	}
	r, err := w.templates.RenderLocale(d.Template, d.TemplateData, locale)
	renderSpan.End()
	if err != nil {
		return "", &renderError{err: err}
	}
	a.language = r.Language

	q := dbsqlc.New(w.db)
	hb := w.startHeartbeat(ctx, q, a)
	msg := mail.Message{
		To:             d.Recipient,
		Subject:        r.Subject,
		Text:           r.Text,
		HTML:           r.HTML,
		MessageID:      *d.MessageID, // the claim stores it when it is missing
		IdempotencyKey: d.IdempotencyKey,
	}
	lastLeaseCheck := func() error {
		if hb.lockLost() {
			return errLockLost
		}
		failpoint.Inject("before-data")
		held, err := w.handOvers.do(ctx, leased{id: d.ID, lease: a.lease})
		if err != nil {
			return err
		}
		if !held {
			return errLeaseLost
		}
		failpoint.Inject("after-handover")
		return nil
	}
	sendStart := time.Now()
	pctx, span := w.tracer.Start(ctx, "provider send", trace.WithSpanKind(trace.SpanKindClient))
	providerID, err = w.provider.Send(pctx, msg, lastLeaseCheck)
	w.metrics.sendLatency.Observe(time.Since(sendStart).Seconds())
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	hb.stop()
	if hb.lockLost() {
		a.lockLost = true
		w.metrics.lockExpired.Inc()
	}
	return providerID, err
}

func truncate(b []byte, n int) string {
	s := strings.ToValidUTF8(string(b), "?")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
