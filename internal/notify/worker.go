package notify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/sqlc-dev/pqtype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/tracing"
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

// Worker drives deliveries pending → sending → sent. It is the asynq
// handler for TaskTypeDeliver.
type Worker struct {
	db        *pgxpool.Pool
	lock      redisLock
	provider  Provider
	templates *Templates
	cfg       WorkerConfig
	log       *slog.Logger
	metrics   *Metrics
	limit     *limiter
	health    *health
	tracer    trace.Tracer
	draining  atomic.Bool
}

// Drain makes the worker start no new attempt: tasks that have not
// claimed their delivery yet go back to the queue, so that shutdown only
// waits for sends already under way.
func (w *Worker) Drain() { w.draining.Store(true) }

// NewWorker returns a Worker. db must be the primary: every decision is
// read from and written to the source of truth, never a replica.
func NewWorker(db *pgxpool.Pool, rdb redis.UniversalClient, provider Provider, templates *Templates, cfg WorkerConfig, log *slog.Logger, metrics *Metrics) *Worker {
	return &Worker{
		db:        db,
		lock:      redisLock{rdb: rdb, ttl: cfg.LockTTL},
		provider:  provider,
		templates: templates,
		cfg:       cfg,
		log:       log,
		metrics:   metrics,
		limit:     newLimiter(max(cfg.Concurrency, 1)),
		health:    newHealth(metrics.providerUp),
		tracer:    cmp.Or[trace.Tracer](cfg.Tracer, noop.NewTracerProvider().Tracer(tracerName)),
	}
}

// MessageID is the Message-ID a delivery's first attempt builds and
// stores; every later attempt, and the reconciler's look-up, use the
// stored one. Derived from the idempotency key, so a provider or a mailbox
// that deduplicates by Message-ID sees one message however often it arrives.
func MessageID(idempotencyKey, domain string) string {
	return KeyHash(idempotencyKey) + "@" + domain
}

var (
	// errLockBusy: another worker holds the lock; try again shortly.
	errLockBusy = errors.New("lock held by another worker")
	// errLockLost: the lock could not be renewed, so the data was not sent.
	errLockLost = errors.New("lock expired before the message was handed over")
	// errLeaseLost: the row's lease is no longer ours: another worker took over.
	errLeaseLost = errors.New("lease taken over by another worker")
	// errDraining: the worker is shutting down; another one takes the task.
	errDraining = errors.New("worker shutting down; task handed back")
	// errProviderUnavailable: the provider refuses us; the task waits.
	errProviderUnavailable = errors.New("provider refuses us; task handed back until a probe succeeds")
	// errUnknownTemplate: this worker does not know the delivery's
	// template (an older build during a rolling deploy); one that does
	// takes the task.
	errUnknownTemplate = errors.New("template unknown to this worker; task handed back")
)

// waitError asks asynq to run the task again after a delay, without
// counting a failure: the delivery is waiting, not failing, and its
// back-off does not grow.
type waitError struct {
	err   error
	after time.Duration
}

func (e *waitError) Error() string { return e.err.Error() }
func (e *waitError) Unwrap() error { return e.err }

// wait wraps err in a waitError of base plus up to spread of jitter.
func wait(err error, base, spread time.Duration) error {
	return &waitError{err: err, after: base + rand.N(spread+1)}
}

// IsFailure tells asynq which errors count as failed tasks: waiting (for
// a lock, a provider, a worker that knows the template) is not failing.
func IsFailure(err error) bool {
	var we *waitError
	return !errors.As(err, &we)
}

// RetryDelay is asynq's back-off: exponential with full jitter, from 1s up
// to 5 minutes; a task that waits comes back after its own delay.
func RetryDelay(n int, err error, _ *asynq.Task) time.Duration {
	if we := (*waitError)(nil); errors.As(err, &we) {
		return we.after
	}
	ceiling := time.Second << min(n, 9) // 1s, 2s, ... 512s
	ceiling = min(ceiling, 5*time.Minute)
	return ceiling/2 + rand.N(ceiling/2+1)
}

// providerWait is how long a task waits while the provider refuses us:
// until after the next probe, spread so that the backlog does not come
// back all at once, and never more than about half a minute.
func (w *Worker) providerWait(err error) error {
	return wait(err, w.cfg.ProbeInterval, min(5*w.cfg.ProbeInterval, 30*time.Second))
}

// unknownTemplateWait is about how long a task whose template this worker
// does not know waits before it comes back (for another worker, or this
// one after its upgrade).
const unknownTemplateWait = 5 * time.Second

// attempt collects what one run of the handler learned, for its one log line.
type attempt struct {
	taskID   string
	attrs    []slog.Attr
	result   string
	lockLost bool // the heartbeat found the lock gone
	sent     bool // "sent" was recorded: cache it when the lock is released
}

func (a *attempt) add(attrs ...slog.Attr) { a.attrs = append(a.attrs, attrs...) }

// ProcessTask handles one delivery task. It is safe to run any number of
// times, concurrently, on any number of workers: at most one of them
// hands the message to the provider per claim, and none after it is sent.
func (w *Worker) ProcessTask(ctx context.Context, task *asynq.Task) (err error) {
	start := time.Now()
	taskID, _ := asynq.GetTaskID(ctx)
	a := &attempt{taskID: taskID}
	retry, _ := asynq.GetRetryCount(ctx)
	a.add(slog.String("task_id", taskID), slog.Int("retry", retry), slog.String("worker_id", w.cfg.WorkerID))
	// Continue the trace of the request that recorded the delivery.
	ctx = tracing.Propagator.Extract(ctx, propagation.MapCarrier(task.Headers()))
	ctx, span := w.tracer.Start(ctx, "deliver notification", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.message.id", taskID), attribute.Int("sekali.retry", retry)))
	if sc := span.SpanContext(); sc.IsValid() {
		a.add(slog.String("trace_id", sc.TraceID().String()))
	}
	defer func() {
		span.SetAttributes(attribute.String("sekali.result", a.result))
		if err != nil && IsFailure(err) {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	defer func() {
		elapsed := time.Since(start)
		w.metrics.processing.Observe(elapsed.Seconds())
		level := slog.LevelInfo
		a.add(slog.String("result", a.result), slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000))
		switch {
		case errors.Is(err, errProviderUnavailable) && a.result == "provider_unavailable":
			level = slog.LevelDebug // one WARN per outage says it (providerUnavailable)
		case err != nil && IsFailure(err):
			level = slog.LevelWarn
			if errors.Is(err, asynq.SkipRetry) {
				level = slog.LevelError
			}
			a.add(slog.String("error", RedactAddresses(err.Error())))
		}
		w.log.LogAttrs(ctx, level, "delivery attempt", a.attrs...)
	}()
	if err := w.limit.acquire(ctx); err != nil {
		a.result = "shutdown"
		return fmt.Errorf("wait for a concurrency slot: %w", err)
	}
	defer w.limit.release()
	failpoint.Inject("after-dequeue")
	// While the provider refuses us, no attempt is made: the task comes
	// back after the next probe.
	if !w.health.available() {
		a.result = "provider_unavailable"
		w.metrics.handedBack.WithLabelValues("provider_unavailable").Inc()
		return w.providerWait(errProviderUnavailable)
	}

	var p deliverPayload
	if jerr := json.Unmarshal(task.Payload(), &p); jerr != nil || p.DeliveryID == uuid.Nil || p.KeyHash == "" {
		a.result = "bad_payload"
		return fmt.Errorf("malformed task payload %q: %v: %w", truncate(task.Payload(), 200), jerr, asynq.SkipRetry)
	}
	a.add(slog.String("delivery_id", p.DeliveryID.String()), slog.String("key_hash", p.KeyHash))
	span.SetAttributes(attribute.String("sekali.delivery_id", p.DeliveryID.String()), attribute.String("sekali.key_hash", p.KeyHash))

	// 1. The cache may say "sent"; only that answer is ever believed.
	if w.lock.cachedSent(ctx, p.KeyHash) {
		w.duplicate(a, "cache")
		return nil
	}

	// 2. The source of truth.
	q := dbsqlc.New(w.db)
	row, err := q.GetDelivery(ctx, p.DeliveryID)
	if errors.Is(err, pgx.ErrNoRows) {
		a.result = "unknown_delivery"
		return fmt.Errorf("delivery %s does not exist: %w", p.DeliveryID, asynq.SkipRetry)
	}
	if err != nil {
		a.result = "db_error"
		w.metrics.retries.WithLabelValues("database").Inc()
		return fmt.Errorf("read delivery: %w", err)
	}
	if KeyHash(row.IdempotencyKey) != p.KeyHash {
		a.result = "bad_payload"
		return fmt.Errorf("task key hash %s does not match delivery %s: %w", p.KeyHash, p.DeliveryID, asynq.SkipRetry)
	}
	a.add(slog.String("order_id", row.OrderID.String()), slog.String("template", row.Template))
	if done := w.settled(ctx, a, row, "database"); done {
		return nil
	}
	if Status(row.Status) == StatusPending && time.Since(row.TryingSince) >= w.cfg.MaxAge {
		return w.expire(ctx, a, q, row)
	}
	if !w.templates.Has(row.Template) {
		// An older worker during a rolling deploy: the delivery is not
		// this worker's to fail. It waits for one that knows the template.
		a.result = "unknown_template"
		w.metrics.handedBack.WithLabelValues("unknown_template").Inc()
		return wait(errUnknownTemplate, unknownTemplateWait, 2*unknownTemplateWait)
	}

	// 3. The lock keeps two workers from doing this work at once.
	a.add(slog.String("lock_key", lockKey(p.KeyHash)))
	token, ok, err := w.lock.acquire(ctx, p.KeyHash)
	if err != nil {
		a.result = "redis_error"
		w.metrics.retries.WithLabelValues("redis").Inc()
		return err
	}
	if !ok {
		w.metrics.lockFailed.Inc()
		w.metrics.retries.WithLabelValues("lock_busy").Inc()
		a.add(slog.String("lock", "busy"))
		w.duplicate(a, "lock")
		return wait(errLockBusy, 500*time.Millisecond, time.Second)
	}
	w.metrics.lockAcquired.Inc()
	a.add(slog.String("lock", "acquired"))
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		// Cache "sent" first, then release: one round trip to Redis.
		released, rerr := w.lock.release(rctx, p.KeyHash, token, a.sent)
		if rerr != nil {
			a.add(slog.String("release_error", rerr.Error()))
		}
		if rerr == nil && !released && !a.lockLost {
			// The lock expired under us without the heartbeat noticing.
			w.metrics.lockExpired.Inc()
		}
	}()
	failpoint.Inject("after-lock")

	// 4. Look again now that we hold the lock, and claim the row: the
	// claim is one conditional UPDATE that re-reads the row under its row
	// lock (pending, or an expired lease not handed over, and no block),
	// so the re-read costs no extra round trip. Only when it takes nothing
	// is the row read to say why.
	if w.draining.Load() {
		a.result = "handed_back"
		w.metrics.handedBack.WithLabelValues("shutdown").Inc()
		return wait(errDraining, 500*time.Millisecond, time.Second)
	}
	lease := uuid.New()
	cctx, claimSpan := w.tracer.Start(ctx, "claim")
	claimedRow, err := q.ClaimDelivery(cctx, dbsqlc.ClaimDeliveryParams{
		ID: row.ID, LeaseToken: lease, LeaseSeconds: w.cfg.LockTTL.Seconds(), Actor: w.cfg.WorkerID, TaskID: taskID,
		MessageID: MessageID(row.IdempotencyKey, w.cfg.MessageIDDomain),
	})
	claimSpan.End()
	if errors.Is(err, pgx.ErrNoRows) {
		return w.notClaimable(ctx, a, q, row.ID)
	}
	if err != nil {
		a.result = "db_error"
		w.metrics.retries.WithLabelValues("database").Inc()
		return fmt.Errorf("claim delivery: %w", err)
	}
	claimed := claimedDelivery(claimedRow)
	a.add(slog.String("from_status", claimedRow.FromStatus), slog.Int("attempt", int(claimed.Attempts)))
	failpoint.Inject("after-claim")

	// From the claim on, the attempt runs to its outcome even if asynq
	// cancels ctx (shutdown, task deadline): stopping half-way is what
	// makes outcomes ambiguous.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.SendTimeout)
	defer cancel()
	return w.send(sctx, a, q, claimed, lease, p.KeyHash, token)
}

// settled acknowledges a delivery that needs no work: sent, failed or
// held (an operator decides about those).
func (w *Worker) settled(ctx context.Context, a *attempt, row dbsqlc.NotificationDelivery, layer string) bool {
	switch Status(row.Status) {
	case StatusSent:
		if err := w.lock.cacheSent(ctx, KeyHash(row.IdempotencyKey)); err != nil {
			a.add(slog.String("cache_error", err.Error()))
		}
	case StatusFailed, StatusHeld:
	default:
		return false
	}
	w.duplicate(a, layer)
	w.recordDuplicate(ctx, a, row, layer)
	return true
}

// recordDuplicate writes the suppressed duplicate into the delivery's
// history. Duplicates caught by the cache or the lock are only counted
// and logged: writing them down would cost the database round trip those
// layers exist to save.
func (w *Worker) recordDuplicate(ctx context.Context, a *attempt, row dbsqlc.NotificationDelivery, layer string) {
	detail, _ := json.Marshal(map[string]string{"layer": layer, "task_id": a.taskID})
	err := dbsqlc.New(w.db).RecordEvent(ctx, dbsqlc.RecordEventParams{
		DeliveryID: row.ID, Event: "duplicate_suppressed", Status: row.Status,
		Attempt: row.Attempts, Actor: w.cfg.WorkerID, Detail: pqtype.NullRawMessage{RawMessage: detail, Valid: true},
	})
	if err != nil {
		a.add(slog.String("history_error", err.Error()))
	}
}

// claimedDelivery is the claimed row without the status it was claimed from.
func claimedDelivery(r dbsqlc.ClaimDeliveryRow) dbsqlc.NotificationDelivery {
	return dbsqlc.NotificationDelivery{
		ID: r.ID, OrderID: r.OrderID, Template: r.Template, Recipient: r.Recipient, IdempotencyKey: r.IdempotencyKey,
		Status: r.Status, Attempts: r.Attempts, LastError: r.LastError, LeaseToken: r.LeaseToken,
		LeaseExpiresAt: r.LeaseExpiresAt, HandedOverAt: r.HandedOverAt, ProviderMessageID: r.ProviderMessageID,
		TemplateData: r.TemplateData, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, SentAt: r.SentAt,
		MessageID: r.MessageID, TryingSince: r.TryingSince,
	}
}

// expire gives up on a pending delivery whose tries began more than
// MaxAge ago, without another try.
func (w *Worker) expire(ctx context.Context, a *attempt, q *dbsqlc.Queries, row dbsqlc.NotificationDelivery) error {
	reason := fmt.Sprintf("expired: not sent within DELIVERY_MAX_AGE (%s)", w.cfg.MaxAge)
	if row.LastError != nil {
		reason += "; last error: " + truncate([]byte(*row.LastError), 900)
	}
	n, err := q.ExpirePending(ctx, dbsqlc.ExpirePendingParams{ID: row.ID, LastError: reason, MaxAgeSeconds: w.cfg.MaxAge.Seconds(), Actor: w.cfg.WorkerID})
	if err != nil {
		a.result = "db_error"
		w.metrics.retries.WithLabelValues("database").Inc()
		return fmt.Errorf("expire delivery %s: %w", row.ID, err)
	}
	if n == 0 {
		// Claimed or retried meanwhile: let the task run again.
		a.result = "raced"
		return wait(errors.New("delivery changed while being expired"), 500*time.Millisecond, time.Second)
	}
	w.metrics.deliveries.WithLabelValues(row.Template, "failed").Inc()
	a.result = "expired"
	a.add(slog.String("to_status", string(StatusFailed)))
	return fmt.Errorf("%s: %w", reason, asynq.SkipRetry)
}

// notClaimable explains why the claim found nothing to take.
func (w *Worker) notClaimable(ctx context.Context, a *attempt, q *dbsqlc.Queries, id uuid.UUID) error {
	row, err := q.GetDelivery(ctx, id)
	if err != nil {
		a.result = "db_error"
		w.metrics.retries.WithLabelValues("database").Inc()
		return fmt.Errorf("re-read delivery: %w", err)
	}
	if w.settled(ctx, a, row, "database") {
		return nil
	}
	expired := row.LeaseExpiresAt != nil && row.LeaseExpiresAt.Before(time.Now())
	if Status(row.Status) == StatusSending && row.HandedOverAt != nil && expired {
		// The previous attempt died after the data went out. Sending now
		// could be the second e-mail; the reconciler asks the provider.
		reason := "ambiguous: a previous attempt stopped after handing the message to the provider; left for the reconciler"
		if _, err := q.NoteAmbiguous(ctx, dbsqlc.NoteAmbiguousParams{ID: id, LastError: reason, Actor: w.cfg.WorkerID}); err != nil {
			a.add(slog.String("note_error", err.Error()))
		}
		a.result = "left_for_reconciler"
		w.metrics.deliveries.WithLabelValues(row.Template, "ambiguous").Inc()
		return nil
	}
	if Status(row.Status) == StatusPending {
		// Claimable but for an operator's block: the temporary filter.
		// The row stays pending and the reconciler queues it again once
		// the block has expired.
		a.result = "blocked"
		w.metrics.blocked.Inc()
		return nil
	}
	// Another worker holds a live lease on it.
	w.duplicate(a, "database")
	w.recordDuplicate(ctx, a, row, "database")
	a.result = "owned_by_another_worker"
	return nil
}

func (w *Worker) duplicate(a *attempt, layer string) {
	w.metrics.duplicates.WithLabelValues(layer).Inc()
	a.result = "duplicate_" + layer
}

// send renders, hands the message to the provider under a heartbeat, and
// records the outcome with fenced updates.
func (w *Worker) send(ctx context.Context, a *attempt, q *dbsqlc.Queries, d dbsqlc.NotificationDelivery, lease uuid.UUID, keyHash, lockToken string) error {
	fence := func(rows int64, err error) error {
		if err != nil {
			return err
		}
		if rows == 0 {
			return errLeaseLost
		}
		return nil
	}

	_, renderSpan := w.tracer.Start(ctx, "render", trace.WithAttributes(attribute.String("sekali.template", d.Template)))
	r, err := w.templates.Render(d.Template, d.TemplateData)
	renderSpan.End()
	if err != nil {
		// The template is known but cannot render the stored data: an
		// operator's problem (fix the template or the data, then retry),
		// held in plain sight rather than failed.
		reason := "held: the template cannot render this delivery's data: " + err.Error()
		if ferr := fence(q.HoldUnrenderable(ctx, dbsqlc.HoldUnrenderableParams{ID: d.ID, LeaseToken: lease, LastError: reason, Actor: w.cfg.WorkerID})); ferr != nil {
			return w.recordFailed(ctx, a, d, ferr)
		}
		w.finish(a, d, StatusHeld, "held")
		return fmt.Errorf("%s: %w", reason, asynq.SkipRetry)
	}

	hb := startHeartbeat(ctx, w, q, d.ID, lease, keyHash, lockToken)
	msg := Message{
		To:             d.Recipient,
		Subject:        r.Subject,
		Text:           r.Text,
		HTML:           r.HTML,
		MessageID:      *d.MessageID, // the claim stores it when it is missing
		IdempotencyKey: d.IdempotencyKey,
	}
	handOver := func() error {
		if hb.lockLost() {
			return errLockLost
		}
		failpoint.Inject("before-data")
		_, err := q.HandOver(ctx, dbsqlc.HandOverParams{ID: d.ID, LeaseToken: lease, LeaseSeconds: w.cfg.LockTTL.Seconds(), Actor: w.cfg.WorkerID})
		if errors.Is(err, pgx.ErrNoRows) {
			return errLeaseLost
		}
		if err == nil {
			failpoint.Inject("after-handover")
		}
		return err
	}
	sendStart := time.Now()
	pctx, sendSpan := w.tracer.Start(ctx, "provider send", trace.WithSpanKind(trace.SpanKindClient))
	providerID, sendErr := w.provider.Send(pctx, msg, handOver)
	w.metrics.sendLatency.Observe(time.Since(sendStart).Seconds())
	if sendErr != nil {
		sendSpan.SetStatus(codes.Error, sendErr.Error())
	}
	sendSpan.End()
	hb.stop()
	// The outcome is written whatever time the send took: a message the
	// provider accepted must be recorded as sent even if SEND_TIMEOUT ran
	// out while waiting for its reply.
	ctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelRecord()
	ctx, recordSpan := w.tracer.Start(ctx, "record outcome")
	defer recordSpan.End()
	if hb.lockLost() {
		a.lockLost = true
		w.metrics.lockExpired.Inc()
	}

	if sendErr == nil {
		failpoint.Inject("after-accept")
		a.add(slog.String("provider_message_id", providerID))
		if err := fence(q.MarkSent(ctx, dbsqlc.MarkSentParams{ID: d.ID, LeaseToken: lease, ProviderMessageID: providerID, Actor: w.cfg.WorkerID})); err != nil {
			return w.recordFailed(ctx, a, d, err)
		}
		a.sent = true // cached as the lock is released
		w.finish(a, d, StatusSent, "sent")
		failpoint.Inject("after-sent")
		return nil
	}

	se := sendErrorOf(sendErr)
	a.add(slog.String("error_class", se.Outcome.String()), slog.String("stage", string(se.Stage)))
	if se.Code != 0 {
		a.add(slog.Int("smtp_code", se.Code))
	}
	if se.Enhanced != "" {
		a.add(slog.String("smtp_enhanced", se.Enhanced))
	}
	reason := truncate([]byte(sendErr.Error()), 1000)
	release := func(refund bool) error {
		return fence(q.ReleaseForRetry(ctx, dbsqlc.ReleaseForRetryParams{ID: d.ID, LeaseToken: lease, LastError: reason, Actor: w.cfg.WorkerID, RefundAttempt: refund}))
	}
	switch se.Outcome {
	case OutcomeAborted:
		if errors.Is(sendErr, errLeaseLost) {
			return w.recordFailed(ctx, a, d, errLeaseLost)
		}
		// The lock was lost before the data went out: nothing was sent,
		// so the attempt is given back, and the delivery tried again later.
		if err := release(true); err != nil {
			return w.recordFailed(ctx, a, d, err)
		}
		w.metrics.retries.WithLabelValues("lock_expired").Inc()
		w.finish(a, d, StatusPending, "retried")
		return sendErr

	case OutcomeUnavailable:
		// The provider refuses us, not this message: the delivery waits,
		// using up nothing, and this worker stops sending until a probe
		// gets through.
		if err := release(true); err != nil {
			return w.recordFailed(ctx, a, d, err)
		}
		w.providerUnavailable(ctx, se)
		w.metrics.retries.WithLabelValues("provider_unavailable").Inc()
		w.finish(a, d, StatusPending, "retried")
		return w.providerWait(fmt.Errorf("%w: %s", errProviderUnavailable, RedactAddresses(reason)))

	case OutcomeTemporary:
		if age := time.Since(d.TryingSince); age >= w.cfg.MaxAge {
			reason = fmt.Sprintf("gave up after %s of tries (DELIVERY_MAX_AGE %s): %s", age.Round(time.Second), w.cfg.MaxAge, reason)
			if err := fence(q.MarkFailed(ctx, dbsqlc.MarkFailedParams{ID: d.ID, LeaseToken: lease, LastError: reason, Actor: w.cfg.WorkerID})); err != nil {
				return w.recordFailed(ctx, a, d, err)
			}
			w.finish(a, d, StatusFailed, "failed")
			return fmt.Errorf("%s: %w", reason, asynq.SkipRetry)
		}
		// An attempt the provider refused before it accepted the
		// recipient does not count.
		if err := release(!se.reachedRecipient()); err != nil {
			return w.recordFailed(ctx, a, d, err)
		}
		w.metrics.retries.WithLabelValues(fmt.Sprintf("smtp_%dxx", max(se.Code/100, 4))).Inc()
		w.finish(a, d, StatusPending, "retried")
		return sendErr

	case OutcomePermanent:
		if err := fence(q.MarkFailed(ctx, dbsqlc.MarkFailedParams{ID: d.ID, LeaseToken: lease, LastError: reason, Actor: w.cfg.WorkerID})); err != nil {
			return w.recordFailed(ctx, a, d, err)
		}
		w.finish(a, d, StatusFailed, "failed")
		return fmt.Errorf("%s: %w", reason, asynq.SkipRetry)

	default: // OutcomeAmbiguous
		reason = "ambiguous: " + reason
		if err := fence(q.MarkAmbiguous(ctx, dbsqlc.MarkAmbiguousParams{ID: d.ID, LeaseToken: lease, LastError: reason, Actor: w.cfg.WorkerID, LeaseSeconds: w.cfg.LockTTL.Seconds()})); err != nil {
			return w.recordFailed(ctx, a, d, err)
		}
		w.metrics.deliveries.WithLabelValues(d.Template, "ambiguous").Inc()
		a.result = "left_for_reconciler"
		return nil
	}
}

// finish records a transition that happened.
func (w *Worker) finish(a *attempt, d dbsqlc.NotificationDelivery, to Status, outcome string) {
	w.metrics.deliveries.WithLabelValues(d.Template, outcome).Inc()
	a.result = outcome
	a.add(slog.String("to_status", string(to)))
}

// recordFailed handles a fenced update that did not apply: another worker
// owns the row now, and this one must write nothing more. A database
// error is retried: the row's lease will expire and the claim decides.
func (w *Worker) recordFailed(ctx context.Context, a *attempt, d dbsqlc.NotificationDelivery, err error) error {
	if errors.Is(err, errLeaseLost) {
		w.duplicate(a, "fencing")
		w.recordDuplicate(ctx, a, d, "fencing")
		a.result = "fenced_out"
		return nil
	}
	a.result = "db_error"
	w.metrics.retries.WithLabelValues("database").Inc()
	return fmt.Errorf("record outcome of delivery %s: %w", d.ID, err)
}

// heartbeat renews the Redis lock and the row's lease while a send runs.
type heartbeat struct {
	lost   atomic.Bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startHeartbeat(ctx context.Context, w *Worker, q *dbsqlc.Queries, id, lease uuid.UUID, keyHash, token string) *heartbeat {
	ctx, cancel := context.WithCancel(ctx)
	hb := &heartbeat{cancel: cancel}
	hb.wg.Add(1)
	go func() {
		defer hb.wg.Done()
		t := time.NewTicker(w.cfg.LockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ok, err := w.lock.extend(ctx, keyHash, token)
			if ctx.Err() != nil {
				return
			}
			if err != nil || !ok {
				hb.lost.Store(true)
			}
			// The lease is renewed even when the lock is gone: while the
			// row's lease is ours, no other worker can claim it.
			_, _ = q.ExtendLease(ctx, dbsqlc.ExtendLeaseParams{ID: id, LeaseToken: lease, LeaseSeconds: w.cfg.LockTTL.Seconds()})
		}
	}()
	return hb
}

func (h *heartbeat) lockLost() bool { return h.lost.Load() }

func (h *heartbeat) stop() {
	h.cancel()
	h.wg.Wait()
}

func truncate(b []byte, n int) string {
	s := strings.ToValidUTF8(string(b), "?")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
