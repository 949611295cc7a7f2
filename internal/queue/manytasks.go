package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
)

// Tasks of many, on the enqueuer's side. The deliveries that become
// ready together share a task, so that asynq's per-task costs are paid
// once for them all: after a commit, those committed while the previous
// enqueue was in flight (smart batching, no timer: a lone checkout's
// delivery goes at once, in the task of one it always had); in the
// reconciler, the orphans of one pass that need a task. A task never
// mixes queues (the later lane's deliveries wait behind the urgent
// ones), and a delivery scheduled for later keeps a task of its own,
// processed at its time.
//
// A task of many has no TaskID for each of its deliveries, which is how
// EnsureQueued finds a delivery's task; so before it is enqueued, each
// delivery gets a marker naming it (MarkerKey), in one round trip for
// them all. EnsureQueued believes a marker only when its task is there
// and carries the delivery: a marker of a task that finished, or that
// could not be enqueued, is ignored.

// MarkerKey names the Redis key that says which task of many carries the
// delivery whose idempotency key hashes to keyHash. It has the hash tag
// of the worker's lock and status cache for it, sekali:{<keyhash>}:…, so
// that on a Redis Cluster they share a slot.
func MarkerKey(keyHash string) string { return "sekali:{" + keyHash + "}:task" }

// markerTTL is how long a marker outlives the enqueue of its task: its
// task's life in a plausible backlog (a day of orders waiting for a
// provider that is down, or paced). Past it, the reconciler may queue a
// task of its own for a delivery still waiting in the task of many:
// twice the work for it, never a second e-mail (the lock and the claim).
const markerTTL = 24 * time.Hour

// taskMember is one delivery of a task being enqueued, with its span.
type taskMember struct {
	d    notify.Delivery
	span trace.Span
}

// freshCall is one EnqueueAfterCommit's deliveries that may share a task:
// none scheduled, each with its span, all due by deadline.
type freshCall struct {
	ms       []taskMember
	deadline time.Time
}

// enqueueFresh enqueues ds after their commit: the scheduled ones each in
// a task of its own at once, the others with whatever else is being
// committed (e.fresh). It returns one error per delivery.
func (e *Enqueuer) enqueueFresh(ctx context.Context, ds []notify.Delivery) []error {
	errs := make([]error, len(ds))
	var call freshCall
	var at []int
	for i, d := range ds {
		if e.bound <= 1 || scheduled(d) {
			errs[i] = e.Enqueue(ctx, d)
			continue
		}
		_, span := startSpan(ctx, d)
		call.ms = append(call.ms, taskMember{d: d, span: span})
		at = append(at, i)
	}
	if len(call.ms) == 0 {
		return errs
	}
	call.deadline, _ = ctx.Deadline()
	out, _ := e.fresh.Do(ctx, call) // runFresh fails no call whole
	for j, i := range at {
		errs[i] = out[j]
	}
	return errs
}

// runFresh enqueues the deliveries of calls, in tasks of many where they
// share a queue. It runs on a context no caller can cancel
// (smartbatch), bounded by the earliest deadline among calls: no caller
// waits past its own, and a call whose time ran out while it waited
// fails at once, touching nothing.
func (e *Enqueuer) runFresh(ctx context.Context, calls []freshCall) ([][]error, error) {
	deadline := calls[0].deadline
	var ms []taskMember
	for _, c := range calls {
		if !c.deadline.IsZero() && (deadline.IsZero() || c.deadline.Before(deadline)) {
			deadline = c.deadline
		}
		ms = append(ms, c.ms...)
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	results := e.enqueueMembers(ctx, ms, func(d notify.Delivery) (bool, error) { return true, e.Enqueue(ctx, d) })
	out := make([][]error, len(calls))
	k := 0
	for i, c := range calls {
		out[i] = make([]error, len(c.ms))
		for j := range c.ms {
			out[i][j] = results[k].err
			k++
		}
	}
	return out, nil
}

// result is what enqueueMembers did for one delivery.
type result struct {
	created bool // a task carrying it was put on the queue
	err     error
}

// enqueueMembers puts ms (none scheduled) on their queues, in tasks of at
// most bound deliveries of one queue each, in their order, and ends
// their spans. A group of one is enqueued as one delivery's task (TaskID;
// one there already: it is queued, nothing created). When a task of
// many's id is taken (TasksID of its first delivery: a task of many
// enqueued for it before, or by another reconciler at the same time),
// each of its deliveries goes through alone instead. A delivery given
// twice is enqueued once.
func (e *Enqueuer) enqueueMembers(ctx context.Context, ms []taskMember, alone func(notify.Delivery) (bool, error)) []result {
	results := make([]result, len(ms))
	byQueue := map[string][]int{}
	var queues []string
	first := map[uuid.UUID]int{} // a task names a delivery once (ParseTask)
	var twice []int
	for i, m := range ms {
		if _, ok := first[m.d.ID]; ok {
			twice = append(twice, i)
			continue
		}
		first[m.d.ID] = i
		q := e.queueFor(m.d)
		if _, ok := byQueue[q]; !ok {
			queues = append(queues, q)
		}
		byQueue[q] = append(byQueue[q], i)
	}
	for _, q := range queues {
		for group := range slices.Chunk(byQueue[q], max(e.bound, 1)) {
			task := make([]taskMember, len(group))
			for j, i := range group {
				task[j] = ms[i]
			}
			err := e.enqueueTask(ctx, q, task)
			for _, i := range group {
				switch {
				case err == nil:
					results[i] = result{created: true}
				case !errors.Is(err, asynq.ErrTaskIDConflict):
					results[i] = result{err: fmt.Errorf("enqueue delivery %s: %w", ms[i].d.ID, err)}
				case len(group) > 1:
					created, err := alone(ms[i].d)
					results[i] = result{created: created, err: err}
				}
			}
		}
	}
	for _, i := range twice {
		results[i] = result{err: results[first[ms[i].d.ID]].err}
		ms[i].span.End()
	}
	return results
}

// enqueueTask enqueues one task on queue for ms, in their order, and
// ends their spans: one delivery's task (TaskID) for one, a task of many
// (TasksID of the first) for several, their markers written first. The
// task carries the first's trace context.
func (e *Enqueuer) enqueueTask(ctx context.Context, queue string, ms []taskMember) error {
	ds := make([]notify.Delivery, len(ms))
	for i, m := range ms {
		ds[i] = m.d
	}
	taskID := TaskID(ds[0].ID)
	var marked error
	if len(ds) > 1 {
		taskID = TasksID(ds[0].ID)
		marked = e.mark(ctx, ds, taskID)
	}
	tctx := trace.ContextWithSpan(ctx, ms[0].span)
	_, err := e.client.EnqueueContext(tctx, newTask(tctx, ds), taskOptions(taskID, queue)...)
	for _, m := range ms {
		m.span.SetAttributes(attribute.String("messaging.message.id", taskID), attribute.Int("sekali.task_deliveries", len(ms)))
		if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
			m.span.SetStatus(codes.Error, err.Error())
		}
		m.span.End()
	}
	if err != nil {
		return err
	}
	e.sizes.Observe(float64(len(ds)))
	if marked != nil {
		// Queued, unmarked: the reconciler may give its deliveries tasks
		// of their own while it waits (work twice, not an e-mail).
		e.log.LogAttrs(ctx, slog.LevelWarn, "task of many queued without its markers",
			slog.String("task_id", taskID), slog.Int("deliveries", len(ds)), slog.String("error", marked.Error()))
	}
	return nil
}

// mark writes the markers of ds, naming taskID, in one round trip (on a
// Redis Cluster, one for each node that holds some).
func (e *Enqueuer) mark(ctx context.Context, ds []notify.Delivery, taskID string) error {
	_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range ds {
			p.Set(ctx, MarkerKey(mail.KeyHash(d.IdempotencyKey)), taskID, markerTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark the deliveries of task %s: %w", taskID, err)
	}
	return nil
}

// readMarkers reads the markers of ds in one round trip: the task of
// many each names, or "".
func (e *Enqueuer) readMarkers(ctx context.Context, ds []notify.Delivery) ([]string, error) {
	cmds := make([]*redis.StringCmd, len(ds))
	_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range ds {
			cmds[i] = p.Get(ctx, MarkerKey(mail.KeyHash(d.IdempotencyKey)))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the task markers of %d deliveries: %w", len(ds), err)
	}
	out := make([]string, len(ds))
	for i, c := range cmds {
		out[i] = c.Val() // "" for a missing key
	}
	return out, nil
}

// taskOfMany is a task of many as inspected: no info when there is none
// that may still run (standing).
type taskOfMany struct {
	info     *asynq.TaskInfo
	members  []Payload
	orphaned bool // active, on a worker that stopped renewing its lease
}

// inspectMany inspects the task of many taskID on queue.
func inspectMany(ins *asynq.Inspector, queue, taskID string) (taskOfMany, error) {
	info, err := standing(ins, queue, taskID)
	if err != nil || info == nil {
		return taskOfMany{}, err
	}
	task, err := ParseTask(info.Payload)
	if err != nil {
		return taskOfMany{}, nil //nolint:nilerr // a payload no worker can read carries no delivery
	}
	t := taskOfMany{info: info, members: task.Deliveries}
	if info.State == asynq.TaskStateActive {
		t.orphaned = orphaned(ins, queue, info.ID)
	}
	return t, nil
}

// runs reports whether t will run d: it carries d (a marker may be of an
// earlier task under the same id), and it is pending, scheduled or
// retrying, or active on a worker that is alive — unless deadAttempt,
// which says d's attempt in it is over (EnsureQueued).
func (t taskOfMany) runs(d notify.Delivery, deadAttempt bool) bool {
	if t.info == nil || !slices.ContainsFunc(t.members, func(p Payload) bool { return p.DeliveryID == d.ID }) {
		return false
	}
	return t.info.State != asynq.TaskStateActive || (!deadAttempt && !t.orphaned)
}

// EnsureAllQueued is EnsureQueued for each of ds (pending rows, none of
// them taken back from a dead attempt), in tasks of many where it can:
// those that need a task and may go now share them, by queue, up to
// BatchUpTo's bound; one scheduled for later gets one of its own, at its
// time. It answers for each delivery as EnsureQueued would.
func (e *Enqueuer) EnsureAllQueued(ctx context.Context, ins *asynq.Inspector, ds []notify.Delivery) (created []bool, errs []error) {
	created, errs = make([]bool, len(ds)), make([]error, len(ds))
	markers, err := e.readMarkers(ctx, ds)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return created, errs
	}
	type key struct{ queue, taskID string }
	inspected := map[key]taskOfMany{} // a task of many carries many of ds
	var batch []taskMember
	var at []int
	for i, d := range ds {
		queue := e.queueFor(d)
		if id := markers[i]; id != "" {
			t, ok := inspected[key{queue, id}]
			if !ok {
				if t, err = inspectMany(ins, queue, id); err != nil {
					errs[i] = err
					continue
				}
				inspected[key{queue, id}] = t
			}
			if t.runs(d, false) {
				continue
			}
		}
		info, err := standing(ins, queue, TaskID(d.ID))
		switch {
		case err != nil:
			errs[i] = err
		case info != nil && info.State == asynq.TaskStateActive:
			created[i], errs[i] = e.ensureAlone(ctx, ins, d, false) // a recovery task if its worker died
		case info != nil:
			// Its own task will run it.
		case scheduled(d):
			created[i], errs[i] = e.ensureAlone(ctx, ins, d, false)
		default:
			_, span := startSpan(ctx, d)
			batch = append(batch, taskMember{d: d, span: span})
			at = append(at, i)
		}
	}
	results := e.enqueueMembers(ctx, batch, func(d notify.Delivery) (bool, error) { return e.EnsureQueued(ctx, ins, d, false) })
	for j, i := range at {
		created[i], errs[i] = results[j].created, results[j].err
	}
	return created, errs
}
