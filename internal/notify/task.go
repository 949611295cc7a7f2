package notify

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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/tracing"
)

// tracerName names this package's spans.
const tracerName = "github.com/sekali-dev/sekali/internal/notify"

// TaskTypeDeliver is the asynq task type that asks a worker to drive one
// delivery to the provider.
const TaskTypeDeliver = "notification:deliver"

// DefaultQueue is the asynq queue deliveries travel on unless configured.
const DefaultQueue = "notifications"

// taskRetention keeps a finished task's id in Redis for this long, so that
// enqueuing the same delivery again within it is refused by asynq itself.
const taskRetention = 24 * time.Hour

// deliverPayload is all a task carries: the delivery id and the hash of
// its idempotency key (so the worker can ask the status cache before
// PostgreSQL); no address, no template data. The truth about a delivery
// lives in PostgreSQL, not in Redis.
type deliverPayload struct {
	DeliveryID uuid.UUID `json:"delivery_id"`
	KeyHash    string    `json:"key_hash"`
}

// maxTaskRetries bounds asynq's own retries of one task. The worker gives
// up on a delivery after MAX_ATTEMPTS sends, well before this; the bound
// stops a task whose database or Redis errors never end. (Waiting for a
// busy lock is not a failure to asynq and does not count.) A task that
// runs out is archived; its row stays pending and the reconciler
// re-queues it.
const maxTaskRetries = 30

// TaskID is the asynq task id of a delivery. Derived from the delivery, it
// makes a second enqueue of the same delivery a conflict instead of a twin.
func TaskID(deliveryID uuid.UUID) string {
	return "delivery:" + deliveryID.String()
}

// NewDeliverTask builds the task for one delivery.
func NewDeliverTask(d Delivery) *asynq.Task {
	return newDeliverTask(context.Background(), d)
}

// newDeliverTask builds the task and carries the trace context of ctx in
// its headers, so the worker's spans join the trace of the request that
// caused the delivery.
func newDeliverTask(ctx context.Context, d Delivery) *asynq.Task {
	payload, _ := json.Marshal(deliverPayload{DeliveryID: d.ID, KeyHash: KeyHash(d.IdempotencyKey)}) // cannot fail
	headers := propagation.MapCarrier{}
	tracing.Propagator.Inject(ctx, headers)
	if len(headers) == 0 {
		return asynq.NewTask(TaskTypeDeliver, payload)
	}
	return asynq.NewTaskWithHeaders(TaskTypeDeliver, payload, headers)
}

// Enqueuer hands recorded deliveries to the queue.
type Enqueuer struct {
	client   *asynq.Client
	queue    string
	log      *slog.Logger
	failures prometheus.Counter
}

// NewEnqueuer returns an Enqueuer on queue that counts its failures in reg.
func NewEnqueuer(client *asynq.Client, queue string, log *slog.Logger, reg prometheus.Registerer) *Enqueuer {
	failures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sekali_enqueue_failures_total",
		Help: "Deliveries recorded in PostgreSQL whose task could not be enqueued; they stay pending until the reconciler re-enqueues them.",
	})
	reg.MustRegister(failures)
	return &Enqueuer{client: client, queue: queue, log: log, failures: failures}
}

// Enqueue puts the delivery's task on the queue. A task that exists
// already (same TaskID) is not an error: the delivery is queued.
func (e *Enqueuer) Enqueue(ctx context.Context, d Delivery) error {
	if err := e.enqueue(ctx, d); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("enqueue delivery %s: %w", d.ID, err)
	}
	return nil
}

func (e *Enqueuer) enqueue(ctx context.Context, d Delivery) error {
	// The span comes from the caller's tracer provider (none: a no-op).
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, "enqueue delivery",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("sekali.delivery_id", d.ID.String()), attribute.String("sekali.template", d.Template)))
	defer span.End()
	_, err := e.client.EnqueueContext(ctx, newDeliverTask(ctx, d),
		asynq.TaskID(TaskID(d.ID)),
		asynq.Queue(e.queue),
		asynq.Retention(taskRetention),
		asynq.MaxRetry(maxTaskRetries),
	)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// EnsureQueued makes sure a live task exists for a pending delivery. A
// task under the same id that is pending, scheduled, retrying or running
// will do the work: nothing to add. One that completed or was archived
// will never run again, yet its id still blocks a new enqueue for the
// retention period: it is deleted and the delivery enqueued afresh.
// created reports whether a new task was put on the queue.
//
// An active task is normally left alone; but when its worker has died
// (asynq reports it orphaned), or when the caller knows the attempt behind
// it is over (deadAttempt: the reconciler took the row back after its
// lease expired), a recovery task is queued at once rather than after
// asynq's own recovery, which takes up to a minute and a half.
func (e *Enqueuer) EnsureQueued(ctx context.Context, ins *asynq.Inspector, d Delivery, deadAttempt bool) (created bool, err error) {
	err = e.enqueue(ctx, d)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, fmt.Errorf("enqueue delivery %s: %w", d.ID, err)
	}
	info, err := ins.GetTaskInfo(e.queue, TaskID(d.ID))
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound):
		// Gone between the two calls: enqueue once more.
	case err != nil:
		return false, fmt.Errorf("inspect task of delivery %s: %w", d.ID, err)
	case info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived:
		if err := ins.DeleteTask(e.queue, info.ID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return false, fmt.Errorf("delete finished task of delivery %s: %w", d.ID, err)
		}
	case info.State == asynq.TaskStateActive && (deadAttempt || orphaned(ins, e.queue, info.ID)):
		// An active task cannot be deleted, so a second task under a
		// recovery id is queued; whichever runs second finds the delivery
		// done and is acknowledged as a duplicate. A worker that was only
		// frozen and wakes up is fenced out.
		recovery := fmt.Sprintf("%s:recovered:%d", TaskID(d.ID), time.Now().Unix()/60)
		_, err := e.client.EnqueueContext(ctx, newDeliverTask(ctx, d), asynq.TaskID(recovery), asynq.Queue(e.queue),
			asynq.Retention(taskRetention), asynq.MaxRetry(maxTaskRetries))
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("enqueue recovery task of delivery %s: %w", d.ID, err)
		}
		return true, nil
	default:
		return false, nil
	}
	if err := e.enqueue(ctx, d); err != nil {
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			return false, nil // another reconciler was quicker
		}
		return false, fmt.Errorf("enqueue delivery %s: %w", d.ID, err)
	}
	return true, nil
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

// Queue is the name of the queue this Enqueuer uses.
func (e *Enqueuer) Queue() string { return e.queue }

// EnqueueAfterCommit enqueues freshly committed deliveries. It never fails
// the caller: the intent is already durable, so a failed enqueue is
// logged and counted and the row stays pending for the reconciler. It
// keeps going when ctx is cancelled (the client hung up after the
// commit), bounded by its own timeout.
func (e *Enqueuer) EnqueueAfterCommit(ctx context.Context, deliveries []Delivery) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, d := range deliveries {
		if err := e.Enqueue(ctx, d); err != nil {
			e.failures.Inc()
			e.log.LogAttrs(ctx, slog.LevelWarn, "enqueue failed; delivery stays pending for the reconciler",
				slog.String("delivery_id", d.ID.String()),
				slog.String("order_id", d.OrderID.String()),
				slog.String("template", d.Template),
				slog.String("error", err.Error()),
			)
		}
	}
}

// QueueInfo returns asynq's statistics for queue; a queue that has never
// held a task does not exist in Redis yet and reads as empty.
func QueueInfo(ins *asynq.Inspector, queue string) (*asynq.QueueInfo, error) {
	queues, err := ins.Queues()
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	if !slices.Contains(queues, queue) {
		return &asynq.QueueInfo{Queue: queue}, nil
	}
	info, err := ins.GetQueueInfo(queue)
	if err != nil {
		return nil, fmt.Errorf("inspect queue %s: %w", queue, err)
	}
	return info, nil
}
