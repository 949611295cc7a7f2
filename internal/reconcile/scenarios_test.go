package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postmark"
	"github.com/sekali-dev/sekali/internal/postmark/postmarktest"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The API died between its commit and its enqueue: the intent exists, no
// task does. After PENDING_REENQUEUE_AFTER the reconciler queues it and
// it is sent once.
func TestPendingWithoutTaskIsSentOnceAfterTheThreshold(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	e.startWorker(t)
	d := e.pending(t, "orphan@example.com")
	rec := e.reconciler(t, recOpts{})
	ctx := context.Background()

	// Younger than the threshold: left alone.
	rep, err := rec.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionRequeued] != 0 {
		t.Fatalf("a fresh pending row was requeued: %v", rep)
	}
	e.age(t)
	if rep, err = rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionRequeued] != 1 {
		t.Fatalf("report %v, want one requeued", rep)
	}
	testenv.WaitFor(t, "the orphan to be sent", 30*time.Second, e.allSent(t, d))
	e.exactlyOnce(t, d)

	// Once sent, later passes find nothing to do.
	e.age(t)
	if rep, err = rec.RunOnce(ctx); err != nil || rep.Decisions[reconcile.DecisionRequeued] != 0 {
		t.Errorf("pass after sending: %v %v", rep, err)
	}
}

// A delivery to be sent later is not missing its task before its time:
// the reconciler requeues it only once it is due and still pending past
// the threshold, as it does any other.
func TestScheduledIsRequeuedOnlyAfterItsTime(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	d := e.pending(t, "later@example.com")
	scheduled := e.f.Scheduled(d.OrderID, "order-shipped", d.Recipient, map[string]string{"order_id": d.OrderID.String()}, time.Now().Add(time.Hour))
	rec := e.reconciler(t, recOpts{})
	e.age(t) // untouched for two minutes, both
	rep, err := rec.RunOnce(context.Background())
	if err != nil || rep.Decisions[reconcile.DecisionRequeued] != 1 {
		t.Fatalf("report %v, %v; want only the confirmation requeued", rep, err)
	}
	if got := e.get(t, scheduled.ID); got.UpdatedAt.After(time.Now().Add(-time.Minute)) {
		t.Errorf("the scheduled delivery was touched: updated %v", got.UpdatedAt)
	}
	e.f.Aged(scheduled, time.Hour+2*time.Minute) // due two minutes ago, untouched since
	if rep, err = rec.RunOnce(context.Background()); err != nil || rep.Decisions[reconcile.DecisionRequeued] != 1 {
		t.Fatalf("report %v, %v; want the scheduled delivery requeued once due", rep, err)
	}
}

// A task that completed (or was archived) while its row is pending still
// blocks its id for the retention period; the reconciler replaces it.
func TestFinishedTaskDoesNotBlockTheRequeue(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	d := e.pending(t, "stuck@example.com")
	if err := e.enq.Enqueue(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if err := e.inspector.ArchiveTask(e.redis.Queue, queue.TaskID(d.ID)); err != nil {
		t.Fatal(err)
	}
	e.age(t)
	rep, err := e.reconciler(t, recOpts{}).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.inspector.GetTaskInfo(e.redis.Queue, queue.TaskID(d.ID))
	if err != nil || info.State != asynq.TaskStatePending || rep.Decisions[reconcile.DecisionRequeued] != 1 {
		t.Errorf("task after the pass: %+v %v, report %v", info, err, rep)
	}
}

// Redis loses everything (FLUSHALL) while deliveries are pending and in
// flight: every one is still sent, exactly once.
func TestFlushAllLosesNothingAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedisServer(t).Redis
	inData := make(chan struct{}, 100)
	e := setup(t, rd, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration {
		select {
		case inData <- struct{}{}:
		default:
		}
		return 300 * time.Millisecond
	}})
	ctx := context.Background()
	var ds []notify.Delivery
	for _, email := range []string{"f1@example.com", "f2@example.com", "f3@example.com", "f4@example.com", "f5@example.com", "f6@example.com"} {
		d := e.pending(t, email)
		if err := e.enq.Enqueue(ctx, d); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	e.startWorker(t)
	<-inData // at least one send is in flight
	rdb := redisconn.NewClient(rd.Opt)
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// PENDING_REENQUEUE_AFTER short enough for the wait: the tasks Redis
	// lost are given again within a pass or two.
	rec := e.reconciler(t, recOpts{lookup: e.lookup(t, smtp.APIMailpit), pendingAfter: 500 * time.Millisecond})
	testenv.WaitFor(t, "every delivery to be sent", 30*time.Second, func() bool {
		if _, err := rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return e.allSent(t, ds...)()
	})
	e.exactlyOnce(t, ds...)
}

// A sending row whose worker died after handing the message over: the
// provider look-up decides. Found → sent, no second e-mail. Not found →
// sent once.
func TestStaleSendingIsSettledByTheProviderLookup(t *testing.T) {
	t.Parallel()
	for _, api := range []string{smtp.APIMailpit, smtp.APIMailHog} {
		t.Run(api, func(t *testing.T) {
			t.Parallel()
			e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
			e.startWorker(t)
			accepted := e.pending(t, "accepted@example.com")
			lost := e.pending(t, "lost@example.com")
			e.deliverToSink(t, accepted)
			e.strand(t, accepted, true)
			e.strand(t, lost, true)

			rep, err := e.reconciler(t, recOpts{lookup: e.lookup(t, api)}).RunOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rep.Stale != 2 || rep.Decisions[reconcile.DecisionFound] != 1 || rep.Decisions[reconcile.DecisionNotFound] != 1 {
				t.Fatalf("report %v", rep)
			}
			got := e.get(t, accepted.ID)
			if got.Status != notify.StatusSent || got.ProviderMessageID != e.sink.ByRecipient("accepted@example.com")[0].QueueID {
				t.Errorf("accepted row: %+v", got)
			}
			testenv.WaitFor(t, "the lost one to be sent", 30*time.Second, e.allSent(t, lost))
			e.exactlyOnce(t, accepted, lost)
			if evs := events(t, e, accepted, "reconciled"); len(evs) != 1 || !strings.Contains(string(evs[0].Detail), reconcile.DecisionFound) {
				t.Errorf("history of the accepted row: %+v", evs)
			}
		})
	}
}

// A worker that died before handing the message over left nothing
// ambiguous: the row goes back to pending and is sent.
func TestStaleSendingNotHandedOverIsSent(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	e.startWorker(t)
	d := e.pending(t, "early@example.com")
	e.strand(t, d, false)
	rep, err := e.reconciler(t, recOpts{}).RunOnce(context.Background())
	if err != nil || rep.Decisions[reconcile.DecisionNotHandedOver] != 1 {
		t.Fatalf("report %v %v", rep, err)
	}
	testenv.WaitFor(t, "the row to be sent", 30*time.Second, e.allSent(t, d))
	e.exactlyOnce(t, d)
}

// Without a look-up the template's policy decides; failed rows are never
// touched; a look-up that fails decides nothing.
func TestPoliciesAndWhatIsNeverTouched(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx := context.Background()
	held := e.pending(t, "held@example.com")
	e.strand(t, held, true)
	failed := e.pending(t, "failed@example.com")
	e.f.Aged(e.f.Failed(failed, "550"), 24*time.Hour)
	e.f.Aged(held, 24*time.Hour)

	rep, err := e.reconciler(t, recOpts{policy: reconcile.PolicyHold}).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionPolicyHold] != 1 || rep.Held != 1 {
		t.Errorf("report %v", rep)
	}
	if got := e.get(t, held.ID); got.Status != notify.StatusHeld || !strings.Contains(got.LastError, "policy is hold") {
		t.Errorf("held row: %+v", got)
	}
	if got := e.get(t, failed.ID); got.Status != notify.StatusFailed || got.LastError != "550" {
		t.Errorf("the failed row was touched: %+v", got)
	}

	// The resend policy, per template, sends again.
	resend := e.pending(t, "resend@example.com")
	e.strand(t, resend, true)
	rep, err = e.reconciler(t, recOpts{policy: reconcile.PolicyHold,
		policies: map[string]reconcile.Policy{"order-confirmation": reconcile.PolicyResend}}).RunOnce(ctx)
	if err != nil || rep.Decisions[reconcile.DecisionPolicyResend] != 1 {
		t.Fatalf("report %v %v", rep, err)
	}
	if got := e.get(t, resend.ID); got.Status != notify.StatusPending {
		t.Errorf("resend row: %+v", got)
	}
	if _, err := e.inspector.GetTaskInfo(e.redis.Queue, queue.TaskID(resend.ID)); err != nil {
		t.Errorf("resend row has no task: %v", err)
	}

	// A look-up that cannot answer changes nothing.
	unsure := e.pending(t, "unsure@example.com")
	e.strand(t, unsure, true)
	broken := brokenLookup(t)
	rep, err = e.reconciler(t, recOpts{lookup: broken}).RunOnce(ctx)
	if err != nil || rep.Decisions[reconcile.DecisionLookupFailed] != 1 {
		t.Fatalf("report %v %v", rep, err)
	}
	if got := e.get(t, unsure.ID); got.Status != notify.StatusSending {
		t.Errorf("row after a failed look-up: %+v", got)
	}
}

// Two reconcilers at once on the same debris: every row is handled by
// exactly one of them.
func TestTwoReconcilersHandleEachRowOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	lookup := e.lookup(t, smtp.APIMailpit)
	var stranded []notify.Delivery
	for i := range 20 {
		d := e.pending(t, "debris"+string(rune('a'+i))+"@example.com")
		if i%2 == 0 {
			e.deliverToSink(t, d)
		}
		e.strand(t, d, i%3 != 0)
		stranded = append(stranded, d)
	}
	var orphans []notify.Delivery
	for i := range 10 {
		orphans = append(orphans, e.pending(t, "orphan"+string(rune('a'+i))+"@example.com"))
	}
	e.age(t)

	recs := []*reconcile.Reconciler{e.reconciler(t, recOpts{lookup: lookup}), e.reconciler(t, recOpts{lookup: lookup})}
	reports := make([]reconcile.Report, 2)
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			reports[i], err = r.RunOnce(context.Background())
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()

	for _, d := range stranded {
		if evs := events(t, e, d, "reconciled"); len(evs) != 1 {
			t.Errorf("stranded row %s reconciled %d times", d.Recipient, len(evs))
		}
	}
	decided := 0
	for _, rep := range reports {
		decided += rep.Decisions[reconcile.DecisionFound] + rep.Decisions[reconcile.DecisionNotFound] + rep.Decisions[reconcile.DecisionNotHandedOver]
	}
	if decided != len(stranded) {
		t.Errorf("%d decisions for %d stranded rows: %v", decided, len(stranded), reports)
	}
	// Every pending row (the orphans and the stranded ones reset) has one
	// task: of its own, or a task of many.
	carriers := e.carriers(t)
	for _, d := range append(orphans, stranded...) {
		if got := e.get(t, d.ID); got.Status == notify.StatusPending && carriers[d.ID] != 1 {
			t.Errorf("pending %s is in %d tasks, want 1", d.Recipient, carriers[d.ID])
		}
	}
	t.Logf("reports: %v | %v", reports[0], reports[1])
}

// A look-up that keeps failing for one row does not stop the pass from
// settling the others.
func TestFailedLookupDoesNotBlockTheOtherRows(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	unsure := e.pending(t, "unsure@example.com")
	e.strand(t, unsure, true)
	e.f.Aged(unsure, time.Hour) // its lease expired first: picked first
	early := e.pending(t, "early@example.com")
	e.strand(t, early, false)
	broken := brokenLookup(t)
	rep, err := e.reconciler(t, recOpts{lookup: broken}).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionLookupFailed] != 1 || rep.Decisions[reconcile.DecisionNotHandedOver] != 1 {
		t.Errorf("report %v", rep)
	}
	if got := e.get(t, early.ID); got.Status != notify.StatusPending {
		t.Errorf("the row that needed no look-up: %s", got.Status)
	}
}

// The retention clean-up: expired Idempotency-Key records go; finished
// deliveries older than DELIVERY_RETENTION go with their history; nothing
// unfinished ever goes, and without a retention no delivery does.
func TestCleanUp(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx := context.Background()
	e.exec(t, `INSERT INTO idempotency_keys (scope, key, request_hash, response_body, expires_at) VALUES
		('POST /v1/orders', 'old', '\x00', '{}', now() - interval '1 minute'),
		('POST /v1/orders', 'live', '\x00', '{}', now() + interval '1 hour')`)
	oldSent := e.pending(t, "old-sent@example.com")
	oldFailed := e.pending(t, "old-failed@example.com")
	oldHeld := e.pending(t, "old-held@example.com")
	oldPending := e.pending(t, "old-pending@example.com")
	fresh := e.pending(t, "fresh-sent@example.com")
	e.f.Sent(fresh, "fresh")
	for _, d := range []notify.Delivery{e.f.Sent(oldSent, "old"), e.f.Failed(oldFailed, "550"), e.f.Held(oldHeld, "unrenderable"), oldPending} {
		e.f.Aged(d, 100*24*time.Hour)
	}
	// Keep the old pending one away from the orphan scan's touch.
	e.exec(t, "INSERT INTO delivery_blocks (kind, value, reason, expires_at) VALUES ('recipient', 'old-pending@example.com', 'test', now() + interval '1 hour')")

	exists := func(d notify.Delivery) bool {
		_, err := notify.Get(ctx, e.db.Pool, d.ID)
		return err == nil
	}
	rep, err := e.reconciler(t, recOpts{}).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CleanedKeys != 1 || rep.CleanedDeliveries != 0 || !exists(oldSent) {
		t.Errorf("without a retention: %v; the old sent delivery exists: %v", rep, exists(oldSent))
	}
	var keys []string
	rows, _ := e.db.Pool.Query(ctx, "SELECT key FROM idempotency_keys")
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		keys = append(keys, k)
	}
	rows.Close()
	if len(keys) != 1 || keys[0] != "live" {
		t.Errorf("idempotency keys left: %v, want only the live one", keys)
	}

	rep, err = e.reconciler(t, recOpts{retention: 90 * 24 * time.Hour}).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CleanedDeliveries != 2 {
		t.Errorf("report %v, want the old sent and old failed deliveries deleted", rep)
	}
	for _, c := range []struct {
		d    notify.Delivery
		want bool
	}{{oldSent, false}, {oldFailed, false}, {oldHeld, true}, {oldPending, true}, {fresh, true}} {
		if got := exists(c.d); got != c.want {
			t.Errorf("%s exists = %v, want %v", c.d.Recipient, got, c.want)
		}
	}
	var events int
	if err := e.db.Pool.QueryRow(ctx, "SELECT count(*) FROM delivery_events WHERE delivery_id = $1", oldSent.ID).Scan(&events); err != nil || events != 0 {
		t.Errorf("%d history rows left for a deleted delivery (%v)", events, err)
	}
}

// brokenLookup is a Mailpit that answers its info endpoint (so the
// reconciler accepts it at start) and then cannot search: 503, as a
// provider's API answers when it is overloaded.
func brokenLookup(t *testing.T) mail.Lookup {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/info" {
			fmt.Fprint(w, `{"Version":"v1.33.1"}`)
			return
		}
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	l, err := smtp.NewLookup(context.Background(), smtp.APIMailpit, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A look-up that can never answer for a send (it is older than the
// provider keeps what it searches) settles it as a provider without a
// look-up does, by the template's policy, instead of leaving it sending,
// asked again at every pass, where no operator's action reaches it. The
// look-up is Postmark's, against its test server, keeping an hour.
func TestLookupThatCannotTellFollowsThePolicy(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx := context.Background()
	srv := postmarktest.NewServer()
	t.Cleanup(srv.Close)
	l, err := postmark.NewLookup(postmark.LookupConfig{ServerToken: srv.Token, BaseURL: srv.URL, Timeout: 5 * time.Second,
		Window: httpprovider.Window{Retention: time.Hour, Settle: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	old, recent := e.pending(t, "old-unknown@example.com"), e.pending(t, "recent-unknown@example.com")
	e.strand(t, old, true)
	e.f.Aged(old, 2*time.Hour)
	e.strand(t, recent, true)
	srv.FailNext("/messages/outbound", postmarktest.Fault{Status: 503, Message: "Service Unavailable"}) // the recent one's search fails for now

	rep, err := e.reconciler(t, recOpts{lookup: l, policy: reconcile.PolicyHold}).RunOnce(ctx)
	if err != nil || rep.Decisions[reconcile.DecisionPolicyHold] != 1 || rep.Decisions[reconcile.DecisionLookupFailed] != 1 {
		t.Fatalf("report %v %v, want one held by policy, one look-up failed", rep, err)
	}
	if got := e.get(t, old.ID); got.Status != notify.StatusHeld || !strings.Contains(got.LastError, "cannot tell") {
		t.Errorf("the send older than the provider keeps: %s, %q; want held, saying the look-up cannot tell", got.Status, got.LastError)
	}
	if got := e.get(t, recent.ID); got.Status != notify.StatusSending {
		t.Errorf("the send whose search failed for now: %s, want still sending, asked again next pass", got.Status)
	}
}

// Thirty orphans of one pass are queued in tasks of many, at most the
// enqueuer's bound a task, each delivery in one task and decided (and
// counted) on its own; the next pass finds each in its task of many and
// queues nothing more; a worker sends each once.
func TestOrphansAreRequeuedInTasksOfMany(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	const n, bound = 30, 8
	e.enq.BatchUpTo(bound)
	ds := make([]notify.Delivery, n)
	for i := range ds {
		ds[i] = e.pending(t, fmt.Sprintf("orphan%d@example.com", i))
	}
	e.age(t)
	rec := e.reconciler(t, recOpts{})
	ctx := context.Background()
	rep, err := rec.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionRequeued] != n || rep.Decisions[reconcile.DecisionEnqueueFailed] != 0 {
		t.Fatalf("report %v, want %d requeued", rep, n)
	}
	tasks, err := e.inspector.ListPendingTasks(e.redis.Queue, asynq.PageSize(1000))
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) > 1+n/bound {
		t.Errorf("%d tasks for %d orphans, want at most %d", len(tasks), n, 1+n/bound)
	}
	for _, info := range tasks {
		if task, err := queue.ParseTask(info.Payload); err != nil || len(task.Deliveries) > bound {
			t.Errorf("task %s carries %d deliveries (%v), past the bound %d", info.ID, len(task.Deliveries), err, bound)
		}
	}
	carriers := e.carriers(t)
	for i, d := range ds {
		if carriers[d.ID] != 1 {
			t.Errorf("orphan %d is in %d tasks, want 1", i, carriers[d.ID])
		}
	}
	if got := strings.Count(e.logs.String(), `"decision":"requeued_pending"`); got != n {
		t.Errorf("%d log lines of a requeued delivery, want %d", got, n)
	}

	// Still waiting in their tasks of many: already queued, nothing added.
	e.age(t)
	if rep, err = rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionAlreadyQueued] != n || rep.Decisions[reconcile.DecisionRequeued] != 0 {
		t.Errorf("the next pass: %v, want all %d already queued", rep, n)
	}
	if again, _ := e.inspector.ListPendingTasks(e.redis.Queue, asynq.PageSize(1000)); len(again) != len(tasks) {
		t.Errorf("%d tasks after the next pass, want %d", len(again), len(tasks))
	}

	e.startWorker(t)
	testenv.WaitFor(t, "the orphans to be sent", 30*time.Second, e.allSent(t, ds...))
	e.exactlyOnce(t, ds...)
}

// carriers counts, for each delivery, the tasks waiting on the queue
// (pending, scheduled, retrying) that carry it.
func (e *env) carriers(t *testing.T) map[uuid.UUID]int {
	t.Helper()
	out := map[uuid.UUID]int{}
	for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		e.inspector.ListPendingTasks, e.inspector.ListScheduledTasks, e.inspector.ListRetryTasks,
	} {
		infos, err := list(e.redis.Queue, asynq.PageSize(10000))
		if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			t.Fatal(err)
		}
		for _, info := range infos {
			task, err := queue.ParseTask(info.Payload)
			ps := task.Deliveries
			if err != nil {
				t.Fatalf("task %s: %v", info.ID, err)
			}
			for _, p := range ps {
				out[p.DeliveryID]++
			}
		}
	}
	return out
}
