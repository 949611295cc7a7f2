package queue_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/tracing"
)

// queueEnv is an Enqueuer on a queue of its own in the test Redis, with
// its inspector and metrics.
type queueEnv struct {
	redis testenv.Redis
	rdb   redis.UniversalClient
	ins   *asynq.Inspector
	enq   *queue.Enqueuer
	reg   *prometheus.Registry
	logs  *testenv.Buffer
}

func newQueueEnv(t *testing.T, rd testenv.Redis) *queueEnv {
	t.Helper()
	e := &queueEnv{redis: rd, reg: prometheus.NewRegistry(), logs: &testenv.Buffer{}}
	e.rdb = redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { e.rdb.Close() })
	e.ins = asynq.NewInspector(rd.Opt)
	t.Cleanup(func() { e.ins.Close() })
	e.enq = queue.NewEnqueuer(e.rdb, rd.Queue, slog.New(slog.NewJSONHandler(e.logs, nil)), e.reg)
	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	e.enq.Prioritize(templates) // a delivery with a time (past or future) takes the later lane
	return e
}

// delivery is a delivery as recorded, in memory: the enqueuer needs no row.
func delivery(notBefore *time.Time) notify.Delivery {
	order := uuid.New()
	return notify.Delivery{ID: uuid.New(), OrderID: order, Template: "order-confirmation",
		IdempotencyKey: "order-confirmation:" + order.String() + ":ana@example.com", NotBefore: notBefore}
}

// queuedTask is one task on a queue, as a worker would read it.
type queuedTask struct {
	id         string
	queue      string
	state      asynq.TaskState
	deliveries []uuid.UUID
	payload    string
}

// tasks lists the tasks waiting on the queue name (pending and scheduled).
func (e *queueEnv) tasks(t *testing.T, name string) []queuedTask {
	t.Helper()
	var out []queuedTask
	for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){e.ins.ListPendingTasks, e.ins.ListScheduledTasks} {
		infos, err := list(name, asynq.PageSize(10000))
		if err != nil && !strings.Contains(err.Error(), "queue not found") {
			t.Fatal(err)
		}
		for _, info := range infos {
			task, err := queue.ParseTask(info.Payload)
			if err != nil {
				t.Fatalf("task %s: %v", info.ID, err)
			}
			qt := queuedTask{id: info.ID, queue: name, state: info.State, payload: string(info.Payload)}
			for _, p := range task.Deliveries {
				qt.deliveries = append(qt.deliveries, p.DeliveryID)
			}
			out = append(out, qt)
		}
	}
	return out
}

// inTasks maps each delivery on queue to the tasks that carry it.
func inTasks(tasks []queuedTask) map[uuid.UUID][]queuedTask {
	out := map[uuid.UUID][]queuedTask{}
	for _, qt := range tasks {
		for _, id := range qt.deliveries {
			out[id] = append(out[id], qt)
		}
	}
	return out
}

// gate holds the first enqueue script the Redis client runs until
// release is closed, as a Redis that is slow for a moment: the enqueues
// that come meanwhile wait for it.
type gate struct {
	once    sync.Once
	held    chan struct{} // closed when the first script is held
	release chan struct{}
}

func newGate() *gate { return &gate{held: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			g.once.Do(func() {
				close(g.held)
				<-g.release
			})
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// together runs call(0), holds its enqueue, runs call(1) … call(n-1)
// meanwhile, and releases the first once they have all called: that many
// checkouts committing while the first one's enqueue is in flight.
func (e *queueEnv) together(t *testing.T, n int, call func(i int)) {
	t.Helper()
	g := newGate()
	e.rdb.AddHook(g)
	var wg sync.WaitGroup
	var called atomic.Int32
	wg.Go(func() { call(0) })
	<-g.held
	for i := 1; i < n; i++ {
		wg.Go(func() {
			called.Add(1)
			call(i)
		})
	}
	testenv.WaitFor(t, "every checkout to enqueue", 10*time.Second, func() bool { return int(called.Load()) == n-1 })
	close(g.release)
	wg.Wait()
}

// enqueueTogether enqueues each of ds after its commit, together.
func (e *queueEnv) enqueueTogether(t *testing.T, ds []notify.Delivery) {
	t.Helper()
	e.together(t, len(ds), func(i int) { e.enq.EnqueueAfterCommit(t.Context(), ds[i:i+1]) })
}

// After a commit, a lone delivery goes at once in a task of its own, in
// the form and under the id it always had; the deliveries committed
// while an enqueue is in flight share the next task, up to the bound,
// each in exactly one task.
func TestEnqueueAfterCommitSharesTasksUnderLoad(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, testenv.NewRedis(t))
	lone := delivery(nil)
	e.enq.EnqueueAfterCommit(t.Context(), []notify.Delivery{lone})
	info, err := e.ins.GetTaskInfo(e.redis.Queue, queue.TaskID(lone.ID))
	if err != nil {
		t.Fatalf("a lone delivery has no task of its own (TaskID): %v", err)
	}
	if p := string(info.Payload); strings.Contains(p, "deliveries") || !strings.Contains(p, lone.ID.String()) {
		t.Errorf("a lone delivery's payload %s, want {delivery_id, key_hash}", p)
	}
	if _, err := e.rdb.Get(t.Context(), queue.MarkerKey(mail.KeyHash(lone.IdempotencyKey))).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("a delivery in a task of its own has a marker: %v", err)
	}
	if _, err := e.ins.DeleteAllPendingTasks(e.redis.Queue); err != nil {
		t.Fatal(err)
	}

	const n, bound = 30, 8
	e.enq.BatchUpTo(bound)
	ds := make([]notify.Delivery, n)
	for i := range ds {
		ds[i] = delivery(nil)
	}
	e.enqueueTogether(t, ds)
	tasks := e.tasks(t, e.redis.Queue)
	// The first, alone; then the 29 that waited for it, in tasks of at
	// most 8 (a caller that reached the queue a moment late may make a
	// task more).
	if least := 1 + (n-1+bound-1)/bound; len(tasks) < least || len(tasks) >= n/2 {
		t.Errorf("%d tasks for %d deliveries, want from %d (the lone first, then the others %d a task) to fewer than %d", len(tasks), n, least, bound, n/2)
	}
	carriers := inTasks(tasks)
	for i, d := range ds {
		if got := carriers[d.ID]; len(got) != 1 {
			t.Errorf("delivery %d is in %d tasks, want 1", i, len(got))
		}
	}
	for _, qt := range tasks {
		switch {
		case len(qt.deliveries) > bound:
			t.Errorf("task %s carries %d deliveries, past the bound %d", qt.id, len(qt.deliveries), bound)
		case len(qt.deliveries) == 1 && qt.id != queue.TaskID(qt.deliveries[0]):
			t.Errorf("a task of one delivery is %s, want %s", qt.id, queue.TaskID(qt.deliveries[0]))
		case len(qt.deliveries) > 1 && qt.id != queue.TasksID(qt.deliveries[0]):
			t.Errorf("a task of many is %s, want %s", qt.id, queue.TasksID(qt.deliveries[0]))
		}
		if len(qt.deliveries) > 1 {
			for _, id := range qt.deliveries {
				var key string
				for _, d := range ds {
					if d.ID == id {
						key = d.IdempotencyKey
					}
				}
				if got := e.rdb.Get(t.Context(), queue.MarkerKey(mail.KeyHash(key))).Val(); got != qt.id {
					t.Errorf("delivery %s's marker names %q, want its task %s", id, got, qt.id)
				}
			}
		}
	}
	// Each task once in the histogram of task sizes: the lone first (1),
	// then these.
	if count, sum := histogram(t, e.reg, "sekali_enqueued_task_deliveries"); count != uint64(1+len(tasks)) || sum != 1+n {
		t.Errorf("sekali_enqueued_task_deliveries: %d tasks of %v deliveries, want %d of %d", count, sum, 1+len(tasks), 1+n)
	}
	sizes := make([]int, len(tasks))
	for i, qt := range tasks {
		sizes[i] = len(qt.deliveries)
	}
	t.Logf("%d deliveries committed together: tasks of %v", n, sizes)
}

// histogram is the count and sum of the histogram name in reg.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0, 0
}

// The later lane's deliveries share tasks among themselves, never with
// the urgent ones; a delivery scheduled for later has a task of its own,
// processed at its time, as before.
func TestLanesAndScheduledDeliveriesNeverShareATask(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, testenv.NewRedis(t))
	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	var ds []notify.Delivery
	lane := map[uuid.UUID]string{}
	for i := range 30 {
		d, kind := delivery(nil), "urgent"
		switch i % 3 {
		case 1:
			d, kind = delivery(&past), "later" // may go now, on the later lane
		case 2:
			d, kind = delivery(&future), "scheduled"
		}
		lane[d.ID] = kind
		ds = append(ds, d)
	}
	e.enqueueTogether(t, ds)

	urgent, later := e.tasks(t, e.redis.Queue), e.tasks(t, notify.LaterQueue(e.redis.Queue))
	var shared bool
	for _, qt := range urgent {
		for _, id := range qt.deliveries {
			if lane[id] != "urgent" {
				t.Errorf("task %s on the urgent lane carries a %s delivery", qt.id, lane[id])
			}
		}
		shared = shared || len(qt.deliveries) > 1
	}
	for _, qt := range later {
		for _, id := range qt.deliveries {
			switch {
			case lane[id] == "urgent":
				t.Errorf("task %s on the later lane carries an urgent delivery", qt.id)
			case lane[id] == "scheduled" && (len(qt.deliveries) != 1 || qt.id != queue.TaskID(id) || qt.state != asynq.TaskStateScheduled):
				t.Errorf("a scheduled delivery is in task %s (%s) of %d deliveries, want its own, scheduled", qt.id, qt.state, len(qt.deliveries))
			case lane[id] == "later" && qt.state != asynq.TaskStatePending:
				t.Errorf("a later delivery that may go now is in a %s task", qt.state)
			}
		}
		shared = shared || len(qt.deliveries) > 1
	}
	if !shared {
		t.Error("no task of many on either lane: the deliveries committed together did not share")
	}
	carriers := inTasks(append(urgent, later...))
	for _, d := range ds {
		if got := len(carriers[d.ID]); got != 1 {
			t.Errorf("a %s delivery is in %d tasks, want 1", lane[d.ID], got)
		}
	}
}

// The request's context ending after the commit (the client hung up)
// fails no enqueue: not its own, not those that joined its batch.
func TestEnqueueAfterCommitOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, testenv.NewRedis(t))
	ds := make([]notify.Delivery, 10)
	for i := range ds {
		ds[i] = delivery(nil)
	}
	// The clients of the first checkout, whose enqueue is held, and of
	// every other second one hang up after their commits; those of the
	// rest wait for their answers.
	ctx, cancel := context.WithCancel(t.Context())
	e.together(t, len(ds), func(i int) {
		if i == 0 {
			e.enq.EnqueueAfterCommit(ctx, ds[:1])
			return
		}
		cancel()
		if i%2 == 1 {
			e.enq.EnqueueAfterCommit(ctx, ds[i:i+1])
		} else {
			e.enq.EnqueueAfterCommit(t.Context(), ds[i:i+1])
		}
	})
	carriers := inTasks(e.tasks(t, e.redis.Queue))
	for i, d := range ds {
		if len(carriers[d.ID]) != 1 {
			t.Errorf("delivery %d: in %d tasks, want 1", i, len(carriers[d.ID]))
		}
	}
	if n := counter(t, e.reg, "sekali_enqueue_failures_total"); n != 0 {
		t.Errorf("sekali_enqueue_failures_total = %v, want 0", n)
	}
}

// With Redis gone, every delivery's enqueue fails, each counted and
// logged on its own, whether it was alone or shared a task; the caller
// is not failed, and is not kept past the enqueue's own timeout.
func TestEnqueueFailuresCountEachDelivery(t *testing.T) {
	t.Parallel()
	gone := testenv.Redis{Opt: asynq.RedisClientOpt{Addr: "127.0.0.1:1"}, Queue: "gone"}
	e := newQueueEnv(t, gone)
	var wg sync.WaitGroup
	const callers = 20
	start := time.Now()
	for range callers {
		wg.Go(func() { e.enq.EnqueueAfterCommit(t.Context(), []notify.Delivery{delivery(nil)}) })
	}
	wg.Go(func() {
		e.enq.EnqueueAfterCommit(t.Context(), []notify.Delivery{delivery(nil), delivery(nil), delivery(nil)})
	})
	wg.Wait()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the enqueues took %s", took)
	}
	if n := counter(t, e.reg, "sekali_enqueue_failures_total"); n != callers+3 {
		t.Errorf("sekali_enqueue_failures_total = %v, want %d: one per delivery", n, callers+3)
	}
	if n := strings.Count(e.logs.String(), "enqueue failed; delivery stays pending for the reconciler"); n != callers+3 {
		t.Errorf("%d log lines of a failed enqueue, want %d", n, callers+3)
	}
}

// counter is the value of the counter name in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// ensure is EnsureQueued that fails the test on an error.
func (e *queueEnv) ensure(t *testing.T, d notify.Delivery, deadAttempt bool) bool {
	t.Helper()
	created, err := e.enq.EnsureQueued(t.Context(), e.ins, d, deadAttempt)
	if err != nil {
		t.Fatalf("EnsureQueued: %v", err)
	}
	return created
}

// manyTask enqueues n+1 deliveries after their commit, together, and
// returns the task of many that carries all but the first (which went
// alone, and whose task it deletes), and its deliveries in its order.
func (e *queueEnv) manyTask(t *testing.T, n int) (string, []notify.Delivery) {
	t.Helper()
	ds := make([]notify.Delivery, n+1)
	byID := map[uuid.UUID]notify.Delivery{}
	for i := range ds {
		ds[i] = delivery(nil)
		byID[ds[i].ID] = ds[i]
	}
	e.enqueueTogether(t, ds)
	if err := e.ins.DeleteTask(e.redis.Queue, queue.TaskID(ds[0].ID)); err != nil {
		t.Fatalf("the first delivery's task: %v", err)
	}
	for _, qt := range e.tasks(t, e.redis.Queue) {
		if len(qt.deliveries) == n && byID[qt.deliveries[0]].ID != uuid.Nil {
			members := make([]notify.Delivery, n)
			for i, id := range qt.deliveries {
				members[i] = byID[id]
			}
			return qt.id, members
		}
	}
	t.Fatalf("no task of the %d deliveries that waited for the first: %+v", n, e.tasks(t, e.redis.Queue))
	return "", nil
}

// A delivery in a live task of many is queued: EnsureQueued (the
// reconciler's, an operator's retry) adds nothing for it. Once that
// task is gone — deleted, archived, or done — it does: a task of its own.
func TestEnsureQueuedFindsTheTaskOfManyThatCarriesIt(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, testenv.NewRedis(t))
	id, ds := e.manyTask(t, 5)
	before := len(e.tasks(t, e.redis.Queue))
	for i, d := range ds {
		if e.ensure(t, d, false) {
			t.Errorf("member %d of pending task %s: a second task created", i, id)
		}
	}
	if e.ensure(t, ds[0], true) {
		t.Error("a pending task of many will run its delivery whatever became of an earlier attempt, yet a task was created")
	}
	if got := len(e.tasks(t, e.redis.Queue)); got != before {
		t.Errorf("%d tasks after EnsureQueued on the members of a task of many, want %d", got, before)
	}

	// A marker is believed only for a task that carries its delivery: one
	// of an earlier task under the same id is not. (Written by hand: a
	// marker that lies, on purpose.)
	stranger := delivery(nil)
	if err := e.rdb.Set(t.Context(), queue.MarkerKey(mail.KeyHash(stranger.IdempotencyKey)), id, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if !e.ensure(t, stranger, false) {
		t.Error("a delivery whose marker names a task that does not carry it: no task created")
	}

	// Archived (it will never run again), then deleted: each member gets
	// a task of its own.
	if err := e.ins.ArchiveTask(e.redis.Queue, id); err != nil {
		t.Fatal(err)
	}
	if !e.ensure(t, ds[0], false) {
		t.Error("a member of an archived task of many: no task created")
	}
	if _, err := e.ins.GetTaskInfo(e.redis.Queue, queue.TaskID(ds[0].ID)); err != nil {
		t.Errorf("the member's own task: %v", err)
	}
	if !e.ensure(t, ds[1], false) {
		t.Error("a member of a task of many that is gone: no task created")
	}

	id, ds = e.manyTask(t, 3)
	if err := e.ins.DeleteTask(e.redis.Queue, id); err != nil {
		t.Fatal(err)
	}
	if !e.ensure(t, ds[2], false) {
		t.Error("a member of a deleted task of many: no task created")
	}
}

// A task of many a worker is running counts, as one delivery's task
// does: unless the caller knows the delivery's attempt is over
// (deadAttempt). Done, it is gone (no retention), and counts no more.
func TestEnsureQueuedOnARunningTaskOfMany(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, testenv.NewRedis(t))
	id, ds := e.manyTask(t, 4) // alone on the queue

	release := make(chan struct{})
	srv := asynq.NewServer(e.redis.Opt, asynq.Config{Concurrency: 4, Queues: map[string]int{e.redis.Queue: 1}, LogLevel: asynq.FatalLevel})
	running := make(chan string, 10)
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		tid, _ := asynq.GetTaskID(ctx)
		running <- tid
		<-release
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if got := <-running; got != id {
		t.Fatalf("the worker runs %s, want the task of many %s", got, id)
	}
	if e.ensure(t, ds[1], false) {
		t.Error("a member of a task of many a live worker is running: a second task created")
	}
	if !e.ensure(t, ds[2], true) {
		t.Error("a member whose attempt in the running task of many is over: no task created")
	}
	<-running // that member's own task, which the worker took as well
	close(release)
	testenv.WaitFor(t, "the task of many to be done", 10*time.Second, func() bool {
		_, err := e.ins.GetTaskInfo(e.redis.Queue, id)
		return err != nil
	})
	if !e.ensure(t, ds[3], false) {
		t.Error("a member of a task of many that is done: no task created")
	}
}

// On a Redis Cluster: the markers of a task of many, in slots of their
// own (each beside its delivery's lock), are written and read in one
// pipeline split by node; EnsureQueued finds the task through them.
func TestTasksOfManyOnRedisCluster(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, testenv.NewRedisCluster(t).Redis)
	id, ds := e.manyTask(t, 12)
	slots := map[int64]bool{}
	for _, d := range ds {
		key := queue.MarkerKey(mail.KeyHash(d.IdempotencyKey))
		if got := e.rdb.Get(t.Context(), key).Val(); got != id {
			t.Errorf("marker %s = %q, want %s", key, got, id)
		}
		slot, err := e.rdb.ClusterKeySlot(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) < 2 {
		t.Errorf("the markers of 12 deliveries are in %d slot(s), want several", len(slots))
	}
	for _, d := range ds {
		if e.ensure(t, d, false) {
			t.Error("a member of a live task of many: a second task created")
		}
	}
	if err := e.ins.DeleteTask(e.redis.Queue, id); err != nil {
		t.Fatal(err)
	}
	created, errs := e.enq.EnsureAllQueued(t.Context(), e.ins, ds)
	for i := range ds {
		if !created[i] || errs[i] != nil {
			t.Errorf("delivery %d after its task of many was deleted: created %v, %v", i, created[i], errs[i])
		}
	}
	if tasks := e.tasks(t, e.redis.Queue); len(tasks) != 1 || len(tasks[0].deliveries) != len(ds) {
		t.Errorf("the deliveries re-enqueued together: %d tasks, want one of %d", len(tasks), len(ds))
	}
}

// A task of many carries the trace context of its first delivery's
// request, so the worker's spans join that trace; every delivery's
// request still has its own enqueue span, naming the task it went in.
func TestATaskOfManyCarriesItsFirstDeliverysTrace(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, testenv.NewRedis(t))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	const n = 6
	ds := make([]notify.Delivery, n)
	requests := map[uuid.UUID]trace.SpanContext{}
	for i := range ds {
		ds[i] = delivery(nil)
	}
	e.together(t, n, func(i int) {
		ctx, span := tp.Tracer("test").Start(context.Background(), "POST /v1/orders")
		defer span.End()
		e.enq.EnqueueAfterCommit(ctx, ds[i:i+1])
	})

	spans := exp.GetSpans()
	enqueued := map[uuid.UUID]tracetest.SpanStub{} // each delivery's enqueue span
	for _, s := range spans {
		if s.Name == "POST /v1/orders" {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == "sekali.delivery_id" {
				enqueued[uuid.MustParse(a.Value.AsString())] = s
			}
		}
	}
	for _, s := range spans {
		if s.Name == "POST /v1/orders" {
			for id, es := range enqueued {
				if es.Parent.SpanID() == s.SpanContext.SpanID() {
					requests[id] = s.SpanContext
				}
			}
		}
	}
	var many *queuedTask
	for _, qt := range e.tasks(t, e.redis.Queue) {
		if len(qt.deliveries) > 1 {
			many = &qt
		}
	}
	if many == nil {
		t.Fatal("no task of many")
	}
	for _, id := range many.deliveries {
		s, ok := enqueued[id]
		if !ok || !requests[id].IsValid() {
			t.Errorf("delivery %s: no enqueue span under its request's", id)
			continue
		}
		var taskID string
		for _, a := range s.Attributes {
			if a.Key == "messaging.message.id" {
				taskID = a.Value.AsString()
			}
		}
		if taskID != many.id {
			t.Errorf("delivery %s's enqueue span names task %q, want %s", id, taskID, many.id)
		}
	}
	info, err := e.ins.GetTaskInfo(e.redis.Queue, many.id)
	if err != nil {
		t.Fatal(err)
	}
	carried := trace.SpanContextFromContext(tracing.Propagator.Extract(context.Background(), propagation.MapCarrier(info.Headers)))
	first := many.deliveries[0]
	if carried.TraceID() != requests[first].TraceID() || carried.SpanID() != enqueued[first].SpanContext.SpanID() {
		t.Errorf("the task carries trace %s span %s, want the first delivery's request's trace %s and its enqueue span %s",
			carried.TraceID(), carried.SpanID(), requests[first].TraceID(), enqueued[first].SpanContext.SpanID())
	}
}
