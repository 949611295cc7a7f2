package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/metric"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/smartbatch"
	"github.com/sekali-dev/sekali/internal/tracing"
)

// tracerName names this package's spans.
const tracerName = "github.com/sekali-dev/sekali/internal/queue"

// TaskTypeDeliver is the asynq task type that asks a worker to drive one
// delivery to the provider.
const TaskTypeDeliver = "notification:deliver"

// Payload is all a task carries: the delivery id and the hash of its
// idempotency key (so the worker can ask the status cache before
// PostgreSQL); no address, no template data. The truth about a delivery
// lives in PostgreSQL, not in Redis.
type Payload struct {
	DeliveryID uuid.UUID `json:"delivery_id"`
	KeyHash    string    `json:"key_hash"`
}

// A task carries one delivery ({"delivery_id":…,"key_hash":…}, what
// every task carried before) or, under load, many: {"deliveries":[{…},
// …]}, at most MaxTaskDeliveries, each kept whole (its own claim, lease,
// lock and history), so that the per-task costs (asynq's scripts, the
// task's round trips) are paid once for them all.
type taskPayload struct {
	Payload
	Deliveries []Payload `json:"deliveries,omitempty"`
	// Batch: the deliveries are the members, in order, of a batch handed
	// to a provider whose outcome stayed unknown (its key,
	// notify.BatchMembers): they go again only together, as that batch.
	Batch string `json:"batch,omitempty"`
}

// Task is what a task carries: its deliveries, in order, and, for a
// batch sent again whole, the batch's key.
type Task struct {
	Deliveries []Payload
	Batch      string
}

// MaxTaskDeliveries bounds the deliveries of one task: a batch at
// Resend (100 e-mails a request), and a payload of about 8 KiB.
const MaxTaskDeliveries = 100

// ParseTask reads a task's payload: its deliveries, in order, one or
// many. Each needs both fields, and the key hash must look like
// mail.KeyHash's (a value the claim's statement could not take, a NUL,
// would fail every claim batched with it); a task names a delivery once,
// and holds one form or the other, not both.
func ParseTask(b []byte) (Task, error) {
	var t taskPayload
	if err := json.Unmarshal(b, &t); err != nil {
		return Task{}, err
	}
	ps := t.Deliveries
	switch {
	case len(ps) > 0 && (t.DeliveryID != uuid.Nil || t.KeyHash != ""):
		return Task{}, errors.New("a task carries delivery_id and key_hash, or deliveries, not both")
	case len(ps) > MaxTaskDeliveries:
		return Task{}, fmt.Errorf("%d deliveries, at most %d a task", len(ps), MaxTaskDeliveries)
	case len(ps) == 0:
		ps = []Payload{t.Payload}
	case len(t.Batch) > 200:
		return Task{}, errors.New("a batch key of over 200 bytes")
	}
	seen := make(map[uuid.UUID]bool, len(ps))
	for i, p := range ps {
		if p.DeliveryID == uuid.Nil || p.KeyHash == "" {
			return Task{}, fmt.Errorf("%sdelivery_id and key_hash are required", member(i, len(ps)))
		}
		if !isKeyHash(p.KeyHash) {
			return Task{}, fmt.Errorf("%skey_hash is not 32 lowercase hexadecimal digits", member(i, len(ps)))
		}
		if seen[p.DeliveryID] {
			return Task{}, fmt.Errorf("%sdelivery %s is named twice", member(i, len(ps)), p.DeliveryID)
		}
		seen[p.DeliveryID] = true
	}
	return Task{Deliveries: ps, Batch: t.Batch}, nil
}

// member names the i-th of n deliveries in an error, when there are many.
func member(i, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf("deliveries[%d]: ", i)
}

// isKeyHash reports whether s has mail.KeyHash's form.
func isKeyHash(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// maxTaskRetries bounds asynq's own retries of one task. A delivery gives
// up by age (DELIVERY_MAX_AGE), not by count, and waiting (for a lock, a
// provider that refuses us, a worker that knows the template) does not
// count at all, so this only has to outlast the age: with the back-off
// capped at 5 minutes, 10,000 failures take about 34 days. A task that
// runs out anyway is archived; its row stays pending and the reconciler
// re-queues it.
const maxTaskRetries = 10000

// TaskID is the asynq task id of a delivery. Derived from the delivery, it
// makes a second enqueue of the same delivery a conflict instead of a twin.
func TaskID(deliveryID uuid.UUID) string {
	return "delivery:" + deliveryID.String()
}

// TasksID is the asynq task id of a task of many deliveries: the first's,
// in its own namespace, so that it never takes the id a task of that
// delivery alone would have (TaskID).
func TasksID(first uuid.UUID) string {
	return "deliveries:" + first.String()
}

// NewDeliverTask builds the task for one delivery.
func NewDeliverTask(d notify.Delivery) *asynq.Task {
	return newDeliverTask(context.Background(), d)
}

// NewDeliveriesTask builds the task for ds, in their order: one delivery's
// payload for one, {"deliveries":[…]} for many (at most
// MaxTaskDeliveries; the caller splits).
func NewDeliveriesTask(ds []notify.Delivery) *asynq.Task {
	return newTask(context.Background(), ds)
}

// newDeliverTask builds the task and carries the trace context of ctx in
// its headers, so the worker's spans join the trace of the request that
// caused the delivery.
func newDeliverTask(ctx context.Context, d notify.Delivery) *asynq.Task {
	return newTask(ctx, []notify.Delivery{d})
}

func newTask(ctx context.Context, ds []notify.Delivery) *asynq.Task {
	ps := make([]Payload, len(ds))
	for i, d := range ds {
		ps[i] = Payload{DeliveryID: d.ID, KeyHash: mail.KeyHash(d.IdempotencyKey)}
	}
	var payload []byte
	if len(ps) == 1 {
		payload, _ = json.Marshal(ps[0]) // cannot fail
	} else {
		payload, _ = json.Marshal(struct {
			Deliveries []Payload `json:"deliveries"`
		}{ps})
	}
	headers := propagation.MapCarrier{}
	tracing.Propagator.Inject(ctx, headers)
	if len(headers) == 0 {
		return asynq.NewTask(TaskTypeDeliver, payload)
	}
	return asynq.NewTaskWithHeaders(TaskTypeDeliver, payload, headers)
}

// Requeue puts one delivery of a task of many back on queue, in a task
// of its own (TaskID) that runs after after: the others of its task are
// done, and it waits as it alone must (a lock, a pause, a back-off). A
// task of that id already there will do: it is queued.
func Requeue(ctx context.Context, client *asynq.Client, queue string, p Payload, after time.Duration) error {
	payload, _ := json.Marshal(p) // cannot fail
	headers := propagation.MapCarrier{}
	tracing.Propagator.Inject(ctx, headers)
	_, err := client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(TaskTypeDeliver, payload, headers),
		asynq.TaskID(TaskID(p.DeliveryID)), asynq.Queue(queue), asynq.MaxRetry(maxTaskRetries), asynq.ProcessIn(after))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("requeue delivery %s: %w", p.DeliveryID, err)
	}
	return nil
}

// BatchTaskID is the asynq task id of a batch sent again whole: one
// task for the batch, however many of its members ask for it.
func BatchTaskID(key string) string { return "batch-replay:" + key }

// EnqueueBatch puts on queue the task that sends the batch of key
// again whole: its members ms, in the batch's order (notify.BatchMembers),
// after after. A task of that batch already there will do.
func EnqueueBatch(ctx context.Context, client *asynq.Client, queue, key string, ms []notify.Delivery, after time.Duration) error {
	ps := make([]Payload, len(ms))
	for i, d := range ms {
		ps[i] = Payload{DeliveryID: d.ID, KeyHash: mail.KeyHash(d.IdempotencyKey)}
	}
	payload, _ := json.Marshal(taskPayload{Deliveries: ps, Batch: key}) // cannot fail
	headers := propagation.MapCarrier{}
	tracing.Propagator.Inject(ctx, headers)
	_, err := client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(TaskTypeDeliver, payload, headers),
		asynq.TaskID(BatchTaskID(key)), asynq.Queue(queue), asynq.MaxRetry(maxTaskRetries), asynq.ProcessIn(after))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("enqueue batch %s again: %w", key, err)
	}
	return nil
}

// EnqueueBatch puts on the queue the task that sends the batch of key
// again whole, with its members due (notify.BatchMembers' pending and
// sending ones that still name it), in the batch's order. A task of that
// batch already there will do.
func (e *Enqueuer) EnqueueBatch(ctx context.Context, key string, ms []notify.Delivery) error {
	if len(ms) == 0 {
		return nil
	}
	return EnqueueBatch(ctx, e.client, e.queueFor(ms[0]), key, ms, 0)
}

// Enqueuer hands recorded deliveries to the queue.
type Enqueuer struct {
	client   *asynq.Client
	rdb      redis.UniversalClient // the markers of tasks of many (manytasks.go)
	queue    string
	log      *slog.Logger
	failures prometheus.Counter
	sizes    prometheus.Histogram
	// later says a delivery may wait for the urgent ones: it goes on
	// LaterQueue (Prioritize). nil: every delivery goes on queue.
	later func(notify.Delivery) bool
	// bound is the most deliveries a task of many carries (BatchUpTo);
	// 1: every delivery has a task of its own.
	bound int
	// fresh shares a task among the deliveries committed while the
	// previous enqueue after a commit was in flight (EnqueueAfterCommit).
	fresh *smartbatch.Batch[freshCall, []error]
}

// Prioritize sends to LaterQueue the deliveries that may wait behind the
// urgent ones: those of templates' subscription templates, and those
// scheduled for later (a reminder: transactional, but not urgent; its
// time is when it may go, not when it must).
func (e *Enqueuer) Prioritize(templates *mailtemplate.Templates) {
	subs := templates.Subscriptions()
	e.later = func(d notify.Delivery) bool { return d.NotBefore != nil || slices.Contains(subs, d.Template) }
}

// BatchUpTo bounds the deliveries one task carries, from 1 (each its own
// task, as before tasks of many) to MaxTaskDeliveries, the default
// (TASK_BATCH). Like Prioritize, it is called before the Enqueuer is used.
func (e *Enqueuer) BatchUpTo(n int) {
	e.bound = min(max(n, 1), MaxTaskDeliveries)
	e.fresh.Max = e.bound
}

// queueFor is the queue d's task travels on.
func (e *Enqueuer) queueFor(d notify.Delivery) string {
	if e.later != nil && e.later(d) {
		return notify.LaterQueue(e.queue)
	}
	return e.queue
}

// NewEnqueuer returns an Enqueuer on queue, in the Redis of rdb, that
// counts its failures in reg.
func NewEnqueuer(rdb redis.UniversalClient, queue string, log *slog.Logger, reg prometheus.Registerer) *Enqueuer {
	e := &Enqueuer{
		client: asynq.NewClientFromRedisClient(rdb), rdb: rdb, queue: queue, log: log, bound: MaxTaskDeliveries,
		failures: metric.Counter(reg, "sekali_enqueue_failures_total",
			"Deliveries recorded in PostgreSQL whose task could not be enqueued; they stay pending until the reconciler re-enqueues them."),
		sizes: metric.Histogram(reg, "sekali_enqueued_task_deliveries",
			"Deliveries per task enqueued (after a commit, by the reconciler, on an operator's retry): those that were ready together, up to TASK_BATCH.",
			[]float64{1, 2, 5, 10, 20, 50, 100}),
	}
	e.fresh = &smartbatch.Batch[freshCall, []error]{Max: e.bound, Run: e.runFresh}
	return e
}

// Enqueue puts the delivery's task on the queue. A task that exists
// already (same TaskID) is not an error: the delivery is queued.
func (e *Enqueuer) Enqueue(ctx context.Context, d notify.Delivery) error {
	if err := e.enqueue(ctx, d); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("enqueue delivery %s: %w", d.ID, err)
	}
	return nil
}

func (e *Enqueuer) enqueue(ctx context.Context, d notify.Delivery) error {
	return e.enqueueAs(ctx, d, TaskID(d.ID))
}

// startSpan starts d's enqueue span, from the caller's tracer provider
// (none: a no-op); the caller ends it.
func startSpan(ctx context.Context, d notify.Delivery) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, "enqueue delivery", //nolint:spancheck // the caller ends it
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("sekali.delivery_id", d.ID.String()), attribute.String("sekali.template", d.Template)))
}

// taskOptions are the options of a task under taskID on queue.
func taskOptions(taskID, queue string) []asynq.Option {
	return []asynq.Option{
		asynq.TaskID(taskID),
		asynq.Queue(queue),
		// No retention: a finished task is deleted at once. Its id would
		// only refuse a second enqueue of a delivery that is done, and a
		// second task for it costs one look at the status cache or the
		// row, not an e-mail; kept, every order would leave a task in
		// Redis for as long as the retention lasted.
		asynq.MaxRetry(maxTaskRetries),
	}
}

// scheduled reports whether d may not go yet: its task is one of its own,
// processed at its time.
func scheduled(d notify.Delivery) bool { return d.NotBefore != nil && d.NotBefore.After(time.Now()) }

func (e *Enqueuer) enqueueAs(ctx context.Context, d notify.Delivery, taskID string) error {
	ctx, span := startSpan(ctx, d)
	defer span.End()
	opts := taskOptions(taskID, e.queueFor(d))
	if scheduled(d) {
		// Punctual, not the guard: the claim refuses the row before its
		// time whatever runs the task.
		opts = append(opts, asynq.ProcessAt(*d.NotBefore))
	}
	_, err := e.client.EnqueueContext(ctx, newDeliverTask(ctx, d), opts...)
	if err == nil {
		e.sizes.Observe(1)
	} else if !errors.Is(err, asynq.ErrTaskIDConflict) {
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// EnsureQueued makes sure a live task exists for a pending delivery. A
// task under the same id that is pending, scheduled, retrying or running
// will do the work: nothing to add; so will a task of many that carries
// the delivery (its marker names it, manytasks.go). One that completed
// or was archived will never run again, yet its id still blocks a new
// enqueue for the retention period: it is deleted and the delivery
// enqueued afresh. created reports whether a new task was put on the
// queue.
//
// An active task is normally left alone; but when its worker has died
// (asynq reports it orphaned), or when the caller knows the attempt behind
// it is over (deadAttempt: the reconciler took the row back after its
// lease expired; an operator's retry put the row back, which a running
// task may have read before), a recovery task is queued at once rather
// than after asynq's own recovery, which takes up to a minute and a half.
func (e *Enqueuer) EnsureQueued(ctx context.Context, ins *asynq.Inspector, d notify.Delivery, deadAttempt bool) (created bool, err error) {
	markers, err := e.readMarkers(ctx, []notify.Delivery{d})
	if err != nil {
		return false, err
	}
	if markers[0] != "" {
		t, err := inspectMany(ins, e.queueFor(d), markers[0])
		if err != nil || t.runs(d, deadAttempt) {
			return false, err
		}
	}
	return e.ensureAlone(ctx, ins, d, deadAttempt)
}

// ensureAlone is EnsureQueued without a task of many: d's own task.
func (e *Enqueuer) ensureAlone(ctx context.Context, ins *asynq.Inspector, d notify.Delivery, deadAttempt bool) (created bool, err error) {
	created, active, err := e.enqueueOrReplace(ctx, ins, d, TaskID(d.ID))
	if err != nil || created || active == nil {
		return created, err
	}
	if !deadAttempt && !orphaned(ins, e.queueFor(d), active.ID) {
		return false, nil // a live worker has it
	}
	// An active task cannot be deleted, so a second task under a recovery
	// id is queued; whichever runs second finds the delivery done and is
	// acknowledged as a duplicate. A worker that was only frozen and wakes
	// up is fenced out. The id changes every minute, so a later recovery
	// is never blocked by an earlier one for long.
	recovery := fmt.Sprintf("%s:recovered:%d", TaskID(d.ID), time.Now().Unix()/60)
	created, _, err = e.enqueueOrReplace(ctx, ins, d, recovery)
	return created, err
}

// enqueueOrReplace enqueues d's task under taskID. A finished task
// (completed or archived) holding the id is deleted and replaced; an
// active one is returned, and any other live one is left to run.
func (e *Enqueuer) enqueueOrReplace(ctx context.Context, ins *asynq.Inspector, d notify.Delivery, taskID string) (created bool, active *asynq.TaskInfo, err error) {
	err = e.enqueueAs(ctx, d, taskID)
	if err == nil {
		return true, nil, nil
	}
	if !errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, nil, fmt.Errorf("enqueue delivery %s: %w", d.ID, err)
	}
	switch info, err := standing(ins, e.queueFor(d), taskID); {
	case err != nil:
		return false, nil, err
	case info == nil:
		// Gone between the two calls, or finished and deleted: enqueue
		// once more.
	case info.State == asynq.TaskStateActive:
		return false, info, nil
	default:
		return false, nil, nil // pending, scheduled or retrying: it will run
	}
	if err := e.enqueueAs(ctx, d, taskID); err != nil {
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			return false, nil, nil // another reconciler was quicker
		}
		return false, nil, fmt.Errorf("enqueue delivery %s: %w", d.ID, err)
	}
	return true, nil, nil
}

// standing is the task under taskID on queue that may still run: nil
// when there is none, or when the one there had finished (completed or
// archived: it will never run again, yet its id would refuse a new task
// for the retention period), which is deleted.
func standing(ins *asynq.Inspector, queue, taskID string) (*asynq.TaskInfo, error) {
	info, err := ins.GetTaskInfo(queue, taskID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("inspect task %s: %w", taskID, err)
	case info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived:
		if err := ins.DeleteTask(queue, info.ID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return nil, fmt.Errorf("delete finished task %s: %w", taskID, err)
		}
		return nil, nil
	}
	return info, nil
}

// orphaned reports whether an active task's worker stopped renewing its
// lease. asynq computes that only when listing active tasks; there are at
// most as many as all workers' concurrency together.
func orphaned(ins *asynq.Inspector, queue, taskID string) bool {
	active, err := ins.ListActiveTasks(queue, asynq.PageSize(10000))
	if err != nil {
		return false
	}
	for _, t := range active {
		if t.ID == taskID {
			return t.IsOrphaned
		}
	}
	return false
}

// Queue is the name of the queue this Enqueuer uses (and, for the
// deliveries that may wait, its LaterQueue).
func (e *Enqueuer) Queue() string { return e.queue }

// enqueueTimeout bounds an enqueue after a commit, from the commit.
const enqueueTimeout = 5 * time.Second

// EnqueueAfterCommit enqueues freshly committed deliveries. It never fails
// the caller: the intent is already durable, so a failed enqueue is
// logged and counted, per delivery, and the row stays pending for the
// reconciler. It keeps going when ctx is cancelled (the client hung up
// after the commit), bounded by its own timeout.
//
// The deliveries of the checkouts committed while the previous enqueue
// was in flight share a task (smart batching, manytasks.go): a lone
// checkout's goes at once, in the task of one delivery it always had,
// and under load tasks grow up to BatchUpTo's bound.
func (e *Enqueuer) EnqueueAfterCommit(ctx context.Context, deliveries []notify.Delivery) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), enqueueTimeout)
	defer cancel()
	for i, err := range e.enqueueFresh(ctx, deliveries) {
		if err == nil {
			continue
		}
		d := deliveries[i]
		e.failures.Inc()
		e.log.LogAttrs(ctx, slog.LevelWarn, "enqueue failed; delivery stays pending for the reconciler",
			slog.String("delivery_id", d.ID.String()),
			slog.String("order_id", d.OrderID.String()),
			slog.String("template", d.Template),
			slog.String("error", err.Error()),
		)
	}
}
