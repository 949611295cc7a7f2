package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/keylock"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
)

// The task is the batch. A task's deliveries (one, or up to TASK_BATCH
// under load) go through one pipeline together, each keeping its own
// lock, claim, lease, outcome and history:
//
//	tokens  the provider's tokens for the task's requests (pace.go),
//	        before anything else: waiting holds no lock, lease or claim
//	lock    every delivery's Redis lock, one pipeline
//	claim   every row, one statement (notify.ClaimAll)
//	route   each claimed delivery's provider (routeOf)
//	render  each message
//	send    per provider: one request per batch at a provider that takes
//	        batches, each hand-over in one statement before it; otherwise
//	        each message, its hand-over right before its data (send.go)
//	decide  each delivery's ending, one pure function (decide.go)
//	write   every outcome, one statement (notify.CompleteAll: complete.go)
//	unlock  every lock, one pipeline, "sent" cached with it
//
// One heartbeat renews the task's locks and leases while it sends. A
// delivery that must come back alone (a lock busy, a deferral) goes back
// on the queue in a task of its own; a batch sent again whole (its
// outcome stayed unknown) comes back whole.

// job is one delivery of a task on its way through the pipeline.
type job struct {
	p queue.Payload
	l *taskLog // its log line: the task's, or its own in a task of many
	// extra: not the task's own, but a pending delivery its request of
	// many carries beside them (carry): it is sent with them when the
	// claim takes it, and otherwise left as it is, to its own task.
	extra bool

	lockToken string      // the Redis lock's token, "" while not held
	lockLost  atomic.Bool // the heartbeat found the lock gone
	claimed   bool
	row       notify.Delivery // as claimed, or as the claim judged it
	lease     notify.Lease
	route     *route

	msg      mail.Message
	ho       notify.HandOverArgs
	language string

	// sent: the send has an outcome (providerID, or sendErr).
	sent       bool
	providerID string
	sendErr    error
	batch      string // the key of the batch at the provider it went in
	batchSize  int

	step *step // what it calls for, once decided; nil while it goes on
	// err is what asynq is told of it once its step is applied (nil:
	// done); recordedSent: "sent" was recorded, to cache with the lock's
	// release.
	err          error
	recordedSent bool
}

// decided reports whether j has a step.
func (j *job) decided() bool { return j.step != nil }

// decide gives j its step, once.
func (j *job) decide(s step) {
	if j.step == nil {
		j.step = &s
	}
}

// live reports whether j goes on: claimed and not yet decided.
func (j *job) live() bool { return j.claimed && !j.decided() }

// provider names the provider j went to, for the history; "" before one
// was chosen.
func (j *job) provider() string {
	if j.route == nil {
		return ""
	}
	return j.route.name
}

// run is a task's pipeline; l is its log line.
func (w *Worker) run(ctx context.Context, l *taskLog, t queue.Task) error {
	start := time.Now()
	sl, err := w.limit.take(ctx)
	if err != nil {
		l.result = resultShutdown
		return fmt.Errorf("wait for a concurrency slot: %w", err)
	}
	defer sl.release()
	failpoint.Inject("after-dequeue")
	jobs := w.jobsOf(l, t)
	if t.Batch != "" {
		l.set(slog.String("batch", t.Batch), slog.Bool("batch_replay", true))
	}

	// The provider's tokens before anything else (pace.go): the task's
	// deliveries it has no token for within PACE_WAIT come back later,
	// in a task of their own, having held nothing.
	paced, wait, err := w.tokens(ctx, l, jobs, t.Batch != "")
	if err != nil || wait != nil {
		return cmpErr(err, wait)
	}
	jobs = jobs[:paced.granted] // the others come back for their turn
	if r := paced.route; r != nil && r.batches && t.Batch == "" && len(jobs) < r.max && (r.budget == nil || r.budget.Config().Quota == 0) {
		// The request goes anyway: it carries, within its provider's
		// MaxBatch, what else is ready (carry). Not under a quota, which
		// counted the task's own messages.
		jobs = append(jobs, w.carry(ctx, l, r, jobs)...)
	}

	w.lockAll(ctx, jobs)
	defer w.unlockAll(ctx, jobs)
	failpoint.Inject("after-lock")
	if w.draining.Load() {
		for _, j := range jobs {
			if j.lockToken != "" {
				j.decide(decideDrainingBeforeClaim())
			}
		}
	}
	w.claimAll(ctx, jobs)
	failpoint.Inject("after-claim")
	jobs = taken(jobs)
	w.routeAll(ctx, jobs, paced.route, t.Batch)
	w.renderAll(ctx, jobs)

	// From the claim on, the attempts run to their outcomes even if asynq
	// cancels ctx (shutdown, task deadline): stopping half-way is what
	// makes outcomes ambiguous. The heartbeat goes on until they are
	// written.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.SendTimeout)
	defer cancel()
	hb := w.startHeartbeat(context.WithoutCancel(ctx), jobs)
	defer hb.stop()
	w.sendAll(sctx, jobs, t.Batch)
	now := time.Now()
	for _, j := range jobs {
		if j.sent && !j.decided() {
			dedupes := j.route != nil && j.route.resend > 0 && j.batch == "" // a batch's members went under its key, not their own
			j.decide(decideOutcome(j.row, j.providerID, j.sendErr, now, w.cfg.MaxAge, dedupes))
		}
	}
	// The outcomes are written whatever time the sends took: a message
	// the provider accepted must be recorded as sent even if SEND_TIMEOUT
	// ran out while waiting for its reply.
	rctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancelRecord()
	rctx, span := w.tracer.Start(rctx, "record outcome")
	w.complete(rctx, jobs)
	span.End()
	hb.stop()
	if l.many {
		// Each delivery says its own line; the task's is Middleware's.
		for _, j := range jobs {
			w.logLine(ctx, j.l, "delivery attempt", j.err, time.Since(start))
		}
	}
	return w.answer(ctx, l, jobs, t)
}

// cmpErr is the first of errs that is not nil.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// jobsOf makes the jobs of t: a task of one is logged on the task's line,
// each of a task of many on a line of its own.
func (w *Worker) jobsOf(l *taskLog, t queue.Task) []*job {
	jobs := make([]*job, len(t.Deliveries))
	if len(jobs) > 1 {
		l.many = true
		l.set(slog.Int("deliveries", len(jobs)))
	}
	for i, p := range t.Deliveries {
		jl := l
		if len(jobs) > 1 {
			jl = l.member(i)
		}
		jl.set(slog.String("delivery_id", p.DeliveryID.String()), slog.String("key_hash", p.KeyHash))
		jobs[i] = &job{p: p, l: jl, lease: notify.Lease{Token: uuid.New(), TTL: w.cfg.LockTTL, Actor: w.cfg.WorkerID}}
	}
	return jobs
}

// carry is the jobs of what else is ready that a request of many to r
// may carry beside the task's own jobs, up to r's MaxBatch: as River's
// producer fetches what is available, without a timer, so that a
// provider's request carries whatever became ready while the task waited
// for its turn. An urgent task carries only the queue's own (never mail
// of its later lane beside confirmations); a task of the later lane
// carries any. Their own tasks find them done.
func (w *Worker) carry(ctx context.Context, l *taskLog, r *route, own []*job) []*job {
	exclude := make([]uuid.UUID, len(own))
	for i, j := range own {
		exclude[i] = j.p.DeliveryID
	}
	ready, err := notify.ReadyToCarry(ctx, w.db, r.name, exclude, urgent(ctx, w.cfg.Queue), w.subscriptions, r.max-len(own))
	if err != nil {
		l.set(slog.String("carry_error", err.Error()))
		return nil
	}
	if len(ready) == 0 {
		return nil
	}
	if !l.many {
		l.many = true
		own[0].l = l.member(0)
	}
	l.set(slog.Int("deliveries", len(own)), slog.Int("carried", len(ready)))
	extras := make([]*job, len(ready))
	for i, d := range ready {
		p := queue.Payload{DeliveryID: d.ID, KeyHash: mail.KeyHash(d.IdempotencyKey)}
		jl := l.member(len(own) + i)
		jl.set(slog.String("delivery_id", p.DeliveryID.String()), slog.String("key_hash", p.KeyHash), slog.Bool("carried", true))
		extras[i] = &job{p: p, l: jl, extra: true, lease: notify.Lease{Token: uuid.New(), TTL: w.cfg.LockTTL, Actor: w.cfg.WorkerID}}
	}
	return extras
}

// taken is jobs without the carried ones the claim did not take: those
// are left as they are, to their own tasks.
func taken(jobs []*job) []*job {
	out := make([]*job, 0, len(jobs))
	for _, j := range jobs {
		if !j.extra || j.claimed {
			out = append(out, j)
		}
	}
	return out
}

// lockAll asks the status cache and takes the lock of every job, in one
// pipeline: a job the cache says is sent, or whose lock another worker
// holds, is decided here.
func (w *Worker) lockAll(ctx context.Context, jobs []*job) {
	calls := make([]keylock.Call, len(jobs))
	for i, j := range jobs {
		calls[i] = keylock.Call{KeyHash: j.p.KeyHash}
	}
	rs, err := w.lock.AcquireAll(ctx, calls)
	for i, j := range jobs {
		r := keylock.Result{Err: err}
		if err == nil {
			r = rs[i]
		}
		switch {
		case j.extra && (r.Err != nil || r.Got != keylock.Taken):
			continue // its own task's, as it is
		case r.Err != nil:
			j.decide(decideRedisError(r.Err))
		case r.Got == keylock.CachedSent:
			j.decide(decideCachedSent())
		case r.Got == keylock.Busy:
			w.metrics.lockFailed.Inc()
			j.l.set(slog.String("lock_key", keylock.LockKey(j.p.KeyHash)), slog.String("lock", "busy"))
			j.decide(decideLockBusy())
		default:
			w.metrics.lockAcquired.Inc()
			j.lockToken = r.Token
			j.l.set(slog.String("lock_key", keylock.LockKey(j.p.KeyHash)), slog.String("lock", "acquired"))
		}
	}
}

// claimAll claims every locked job's row in one statement: each row is
// judged under its row lock and taken only when it may go ahead
// (ClaimDeliveries says when). It is the attempt's only read of the row:
// one it did not take is decided by the claim's verdict.
func (w *Worker) claimAll(ctx context.Context, jobs []*job) {
	var cs []notify.Claim
	var claiming []*job
	usable := w.usable()
	for _, j := range jobs {
		if j.decided() || j.lockToken == "" {
			continue
		}
		taskID, _ := asynq.GetTaskID(ctx)
		cs = append(cs, notify.Claim{ID: j.p.DeliveryID, KeyHash: j.p.KeyHash, Lease: j.lease,
			MessageID: mail.MessageIDOfHash(j.p.KeyHash, w.cfg.MessageIDDomain), TaskID: taskID,
			Templates: w.templateNames, Subscriptions: w.subscriptions, Usable: usable, MaxAge: w.cfg.MaxAge})
		claiming = append(claiming, j)
	}
	if len(cs) == 0 {
		return
	}
	cctx, span := w.tracer.Start(ctx, "claim", trace.WithAttributes(attribute.Int("sekali.deliveries", len(cs))))
	judged, err := notify.ClaimAll(cctx, w.plans, cs)
	span.End()
	w.metrics.batchSize.WithLabelValues("claim").Observe(float64(len(cs)))
	now := time.Now()
	for i, j := range claiming {
		switch {
		case err != nil:
			j.decide(decideDBError(fmt.Errorf("claim delivery: %w", err)))
		case j.extra && (err != nil || judged[i] == nil || judged[i].Verdict != notify.VerdictClaimed):
			continue // left as it is, to its own task
		case judged[i] == nil:
			j.row = notify.Delivery{ID: j.p.DeliveryID}
			j.decide(decideUnclaimed(verdictMissing, j.row, j.p.KeyHash, w.cfg.MaxAge, now))
		default:
			j.row = judged[i].Delivery
			v := judged[i].Verdict
			if v == notify.VerdictPinnedElsewhere && !w.hasRoute(j.row.Provider) {
				v = verdictPinnedMissing
			}
			if v != notify.VerdictNotTask {
				j.l.set(slog.String("order_id", j.row.OrderID.String()), slog.String("template", j.row.Template))
			}
			if v != notify.VerdictClaimed {
				j.decide(decideUnclaimed(v, j.row, j.p.KeyHash, w.cfg.MaxAge, now))
				continue
			}
			j.claimed = true
			j.l.set(slog.String("from_status", string(judged[i].FromStatus)), slog.Int("attempt", j.row.Attempts))
			if w.draining.Load() {
				j.decide(decideDraining())
			}
		}
	}
}

// routeAll gives each claimed job its provider (routeOf), and holds what
// must not go now: a pinned delivery past its provider's window for a
// second message, a member of a batch whose outcome is unknown outside
// that batch's own task, a batch that cannot go whole.
func (w *Worker) routeAll(ctx context.Context, jobs []*job, paced *route, batch string) {
	now := time.Now()
	for _, j := range jobs {
		if !j.live() {
			continue
		}
		r, s := w.routeOf(ctx, j.row, paced)
		if s != nil {
			j.decide(*s)
			continue
		}
		j.route = r
		j.l.set(slog.String("provider", r.name))
		if s, past := decidePastResendWindow(j.row, r.name, r.resend, now); past {
			j.decide(s)
			continue
		}
		if b := j.row.HandoverBatch; b != "" && b != batch && j.row.ProviderPinned && j.row.Provider == r.name && r.batches {
			// Its outcome is unknown in a batch at this provider: it goes
			// again only in that batch, whole, under its key; the batch's
			// own task sends it.
			j.decide(decideLeftToBatch(b))
			w.enqueueBatch(ctx, j, b)
		}
	}
	if batch != "" {
		w.checkWhole(ctx, jobs, batch)
	}
}

// checkWhole puts a batch's task off, every member back to pending and
// pinned, unless the batch can go again whole: every member still due
// (pending or sending, still naming the batch) is in the task, claimed,
// at the batch's provider, and nothing else is.
func (w *Worker) checkWhole(ctx context.Context, jobs []*job, batch string) {
	members, err := notify.BatchMembers(ctx, w.db, batch)
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	default:
		due := map[uuid.UUID]bool{}
		for _, m := range members {
			if m.HandoverBatch == batch && (m.Status == notify.StatusPending || m.Status == notify.StatusSending) {
				due[m.ID] = true
			}
		}
		for _, j := range jobs {
			switch {
			case !due[j.p.DeliveryID] && !j.claimed:
				continue // settled since: left out (the provider answers for the whole by its key)
			case !due[j.p.DeliveryID]:
				why = "member " + j.p.DeliveryID.String() + " no longer names the batch"
			case !j.live():
				why = "member " + j.p.DeliveryID.String() + " could not be taken in hand"
			case j.row.HandoverBatch != batch || j.route == nil || !j.route.batches || j.route.name != j.row.Provider:
				why = "member " + j.p.DeliveryID.String() + " cannot go to the batch's provider now"
			}
			delete(due, j.p.DeliveryID)
		}
		for id := range due {
			why = "member " + id.String() + " is still being sent or settled"
		}
	}
	if why == "" {
		return
	}
	for _, j := range jobs {
		if j.live() {
			j.decide(decideReplayPutOff(why))
		}
	}
}

// enqueueBatch makes sure the batch of key, whose member j is, has its
// task: the task of a member alone leaves it to that one.
func (w *Worker) enqueueBatch(ctx context.Context, j *job, key string) {
	members, err := notify.BatchMembers(ctx, w.db, key)
	if err == nil {
		var due []notify.Delivery
		for _, m := range members {
			if m.HandoverBatch == key && (m.Status == notify.StatusPending || m.Status == notify.StatusSending) {
				due = append(due, m)
			}
		}
		err = queue.EnqueueBatch(context.WithoutCancel(ctx), w.requeue, w.queueOf(ctx), key, due, time.Second)
	}
	if err != nil {
		j.l.set(slog.String("batch_enqueue_error", err.Error()))
	}
}

// renderAll renders each live job's message and what its hand-over
// records of it; a template that cannot render the data holds the job.
func (w *Worker) renderAll(ctx context.Context, jobs []*job) {
	for _, j := range jobs {
		if !j.live() {
			continue
		}
		d := j.row
		if d.Test != (j.route == w.test) {
			j.sent, j.sendErr = true, &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageConnect, Err: errWrongMode}
			continue
		}
		_, span := w.tracer.Start(ctx, "render", trace.WithAttributes(attribute.String("sekali.template", d.Template)))
		r, err := w.templates.RenderLocale(d.Template, d.Data, d.Locale)
		span.End()
		if err != nil {
			j.decide(decideUnrenderable(&renderError{err: err}))
			continue
		}
		j.language = r.Language
		j.msg = mail.Message{
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
			j.msg.ListUnsubscribe = w.cfg.Unsubscribe.header(d.Recipient, r.Category, d.CreatedAt)
		}
		j.ho = notify.HandOverArgs{Leased: notify.Leased{ID: d.ID, Lease: j.lease}, Provider: j.route.name,
			Subject: r.Subject, Language: r.Language, Version: w.templates.Version(d.Template)}
	}
}

// answer is what asynq is told of the task once its jobs are done: a
// task of one, its job's answer; a batch sent again whole, the answer of
// its first member that must come back (the batch comes back whole);
// a task of many, done, its deliveries that must come back each queued
// again in a task of its own after its own wait.
func (w *Worker) answer(ctx context.Context, l *taskLog, jobs []*job, t queue.Task) error {
	own := jobs[:0:0]
	for _, j := range jobs {
		if !j.extra { // a carried one, back to pending, comes back with its own task
			own = append(own, j)
		}
	}
	jobs = own
	if len(t.Deliveries) == 1 {
		if len(jobs) == 0 { // paced back
			return nil
		}
		if l.many {
			l.result = jobs[0].l.result
		}
		return jobs[0].err
	}
	if t.Batch != "" {
		for _, j := range jobs {
			if j.err != nil && !errors.Is(j.err, asynq.SkipRetry) {
				l.result = resultReplayPutOff
				return j.err
			}
		}
		l.result = resultDone
		return nil
	}
	on := w.queueOf(ctx)
	retry, _ := asynq.GetRetryCount(ctx)
	var requeued, dropped int
	var failed []error
	for _, j := range jobs {
		switch {
		case j.err == nil:
			continue
		case errors.Is(j.err, asynq.SkipRetry):
			dropped++ // its own line said why
			continue
		}
		after := w.retryDelay(retry, j.err)
		if err := queue.Requeue(context.WithoutCancel(ctx), w.requeue, on, j.p, after); err != nil {
			failed = append(failed, err)
			continue
		}
		requeued++
	}
	l.set(slog.Int("requeued", requeued), slog.Int("skipped", dropped))
	if len(failed) > 0 {
		l.result = resultRedisError
		return fmt.Errorf("%d of %d deliveries could not come back on their own: %w", len(failed), len(jobs), errors.Join(failed...))
	}
	l.result = resultDone
	return nil
}

// queueOf is the queue the task of ctx came from.
func (w *Worker) queueOf(ctx context.Context) string {
	if on, _ := asynq.GetQueueName(ctx); on != "" {
		return on
	}
	return w.cfg.Queue
}
