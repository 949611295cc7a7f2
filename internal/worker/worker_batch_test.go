package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A batch is many rows, each on its own conditions, as it would be alone:
// in one claim, pending rows are taken, a row another worker holds is
// not, a row with the wrong key hash is not, a row that does not exist
// is not answered. The hand-over and sent that follow pass each row only
// under the lease that took it. (A row asked for twice in one batch is
// claimAll's business: TestClaimAllJudgesARowAskedForTwiceOnce.)
func TestBatchedStatementsDecideEachRowOnItsOwn(t *testing.T) {
	e := setup(t, smtpsink.Config{})
	ctx := context.Background()
	q := dbsqlc.New(postgres.GenericPlans{DB: e.db.Pool})
	free, other, wrongHash := e.checkout(t, "free@example.com"), e.checkout(t, "other@example.com"), e.checkout(t, "hash@example.com")
	held := e.f.Claimed(e.checkout(t, "held@example.com"), time.Minute) // another worker's, lease live

	type claim struct {
		d       notify.Delivery
		token   uuid.UUID
		keyHash string
	}
	claims := []claim{
		{free, uuid.New(), mail.KeyHash(free.IdempotencyKey)},
		{held.Delivery, uuid.New(), mail.KeyHash(held.IdempotencyKey)},
		{other, uuid.New(), mail.KeyHash(other.IdempotencyKey)},
		{wrongHash, uuid.New(), mail.KeyHash("another key")},
		{notify.Delivery{ID: uuid.New(), IdempotencyKey: "no such delivery"}, uuid.New(), mail.KeyHash("no such delivery")},
	}
	p := dbsqlc.ClaimDeliveriesParams{LeaseSeconds: 60, Templates: []string{"order-confirmation"}, MaxAgeSeconds: 3600, Actor: "batch-test"}
	for _, c := range claims {
		p.Ids, p.LeaseTokens, p.KeyHashes = append(p.Ids, c.d.ID), append(p.LeaseTokens, c.token), append(p.KeyHashes, c.keyHash)
		p.MessageIds, p.TaskIds = append(p.MessageIds, mail.MessageID(c.d.IdempotencyKey, mailDomain)), append(p.TaskIds, queue.TaskID(c.d.ID))
	}
	rows, err := q.ClaimDeliveries(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	verdicts := map[uuid.UUID]string{} // delivery -> the claim's verdict
	got := map[uuid.UUID]uuid.UUID{}   // delivery -> the lease that took it
	for _, r := range rows {
		verdicts[r.ID] = r.Verdict
		if r.Verdict != "claimed" {
			continue
		}
		if _, dup := got[r.ID]; dup {
			t.Fatalf("delivery %s claimed twice in one statement", r.ID)
		}
		got[r.ID] = *r.LeaseToken
	}
	if len(got) != 2 || got[free.ID] != claims[0].token || got[other.ID] != claims[2].token {
		t.Fatalf("claimed %v; want %s under %s and %s under %s", got, free.ID, claims[0].token, other.ID, claims[2].token)
	}
	loser := uuid.New() // a lease that never took it
	for id, want := range map[uuid.UUID]string{held.ID: "leased", wrongHash.ID: "not_task"} {
		if verdicts[id] != want {
			t.Errorf("verdict for delivery %s = %q, want %q", id, verdicts[id], want)
		}
	}
	if v, ok := verdicts[claims[4].d.ID]; ok || len(rows) != len(claims)-1 {
		t.Errorf("a delivery that does not exist was answered (%q), or rows are missing: %d rows for %d claims", v, len(rows), len(claims))
	}
	if now := e.f.Get(held.ID); now.Attempts != 1 {
		t.Errorf("the held row was claimed again: %d attempts", now.Attempts)
	}
	if now := e.f.Get(wrongHash.ID); now.Status != notify.StatusPending {
		t.Errorf("the row with the wrong key hash is %s, want pending", now.Status)
	}

	ho, err := q.HandOverDeliveries(ctx, dbsqlc.HandOverDeliveriesParams{
		Ids:          []uuid.UUID{free.ID, other.ID, other.ID, held.ID},
		LeaseTokens:  []uuid.UUID{got[free.ID], loser, got[other.ID], uuid.New()},
		LeaseSeconds: 60, Actor: "batch-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	if handed := leasesOf(ho); len(handed) != 2 || !handed[got[free.ID]] || !handed[got[other.ID]] {
		t.Fatalf("handed over under leases %v; want exactly %s and %s", handed, got[free.ID], got[other.ID])
	}

	sent, err := q.CompleteDeliveries(ctx, dbsqlc.CompleteDeliveriesParams{
		Ids:         []uuid.UUID{free.ID, other.ID, held.ID},
		LeaseTokens: []uuid.UUID{got[free.ID], loser, uuid.New()},
		Outcomes:    []string{"sent", "sent", "sent"}, Reasons: []string{"", "", ""}, Refunds: []bool{false, false, false}, Pins: []bool{false, false, false},
		ProviderMessageIds: []string{"p-free", "p-other", "p-held"}, Languages: []string{"id", "id", "id"}, Providers: []string{"", "", ""},
		Async: true, LeaseSeconds: 60, Actor: "batch-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0] != free.ID {
		t.Fatalf("marked sent %v; want only %s (the others are fenced out)", sent, free.ID)
	}
	for d, want := range map[uuid.UUID]notify.Status{free.ID: notify.StatusSent, other.ID: notify.StatusSending, held.ID: notify.StatusSending} {
		if now := e.f.Get(d); now.Status != want {
			t.Errorf("delivery %s is %s, want %s", d, now.Status, want)
		}
	}
	if now := e.f.Get(free.ID); now.ProviderMessageID != "p-free" {
		t.Errorf("provider message id of the sent row = %v, want p-free (its own, not another row's)", now.ProviderMessageID)
	}
	// The history has one event per row that moved, and none for the rows
	// that did not.
	for d, want := range map[uuid.UUID]string{free.ID: "received claimed handed_over sent", other.ID: "received claimed handed_over", wrongHash.ID: "received"} {
		events, err := notify.History(ctx, e.db.Pool, d)
		if err != nil {
			t.Fatal(err)
		}
		var names string
		for i, ev := range events {
			if i > 0 {
				names += " "
			}
			names += ev.Event
		}
		if names != want {
			t.Errorf("history of %s = %q, want %q", d, names, want)
		}
	}
}

// leasesOf is the set of lease tokens a batch statement returned.
func leasesOf(rows []dbsqlc.HandOverDeliveriesRow) map[uuid.UUID]bool {
	m := map[uuid.UUID]bool{}
	for _, r := range rows {
		if t := (struct {
			ID         uuid.UUID
			LeaseToken *uuid.UUID
		})(r).LeaseToken; t != nil {
			m[*t] = true
		}
	}
	return m
}

// A task's deliveries share the worker's statements and each is still
// recorded once: a task of sixteen is claimed in one statement and its
// outcomes written in one, while each message is handed over right
// before its own data (SMTP: one message a request); two such tasks at
// once, each its own statements.
func TestATasksDeliveriesShareStatementsAndEachIsSentOnce(t *testing.T) {
	e := setup(t, smtpsink.Config{})
	const n = 16
	w := e.worker(t, workerOpts{})
	var tasks [2][]notify.Delivery
	for i := range 2 * n {
		tasks[i%2] = append(tasks[i%2], e.checkout(t, fmt.Sprintf("buyer%d@example.com", i)))
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, ds := range tasks {
		wg.Go(func() { errs[i] = w.ProcessTask(context.Background(), queue.NewDeliveriesTask(ds)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("task %d: %v", i, err)
		}
	}
	for _, ds := range tasks {
		for _, d := range ds {
			if now := e.f.Get(d.ID); now.Status != notify.StatusSent || now.Attempts != 1 {
				t.Errorf("delivery %s: %s after %d attempts, want sent after 1", d.ID, now.Status, now.Attempts)
			}
		}
	}
	e.emails(t, 2*n, "one e-mail per delivery")
	for statement, want := range map[string][2]float64{"claim": {2, 2 * n}, "complete": {2, 2 * n}, "hand_over": {2 * n, 2 * n}} {
		statements, served := batchTotals(t, e, statement)
		if statements != want[0] || served != want[1] {
			t.Errorf("%s: %v deliveries in %v statements, want %v in %v", statement, served, statements, want[1], want[0])
		}
	}
}

// batchTotals reads sekali_statement_batch_size for statement: how many
// statements ran and how many attempts they served.
func batchTotals(t *testing.T, e *env, statement string) (statements, attempts float64) {
	t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sekali_statement_batch_size" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "statement" && l.GetValue() == statement {
					return float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("no sekali_statement_batch_size{statement=%q}", statement)
	return 0, 0
}

// An accepted message whose sent write waits (its batch queued behind a
// statement that hangs) keeps its lease until the write is done: the
// heartbeat runs until the outcome is written, not only until the
// provider answered. Otherwise the lease could run out under a write
// that is on its way, and the reconciler judge a send this worker knows
// the outcome of.
func TestLeaseIsKeptWhileTheOutcomeIsWritten(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, second := e.checkout(t, "first@example.com"), e.checkout(t, "second@example.com")
	// The first's row is locked once the provider took its message, so
	// its sent statement hangs; the second's queues behind it.
	locked := make(chan pgx.Tx, 1)
	hook := afterSend{Provider: e.smtp(t), after: func(m mail.Message) {
		if m.To != first.Recipient {
			return
		}
		tx, err := e.db.Pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := tx.Exec(ctx, "SELECT 1 FROM notification_deliveries WHERE id = $1 FOR UPDATE", first.ID); err != nil {
			t.Error(err)
		}
		locked <- tx
	}}
	const ttl = 3 * time.Second
	w := e.worker(t, workerOpts{provider: hook, lockTTL: ttl})
	done := make(chan error, 2)
	go func() { done <- process(ctx, w, first) }()
	tx := <-locked
	defer tx.Rollback(context.Background()) //nolint:errcheck // committed below; this only runs on failure
	testenv.WaitFor(t, "the first's sent statement to wait on its row", 10*time.Second, func() bool {
		return testenv.LockWaiters(t, e.db.Pool, "") >= 1 // the first's heartbeat may queue on the row too
	})
	go func() { done <- process(ctx, w, second) }()
	testenv.WaitFor(t, "the second to be accepted", 10*time.Second, func() bool { return e.sink.Count() == 2 })
	// Two lease lengths: without the heartbeat the second's lease would
	// have run out.
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := e.f.Get(second.ID); got.Status == notify.StatusSending && (got.LeaseExpiresAt == nil || got.LeaseExpiresAt.Before(time.Now())) {
			t.Fatalf("the second's lease ran out at %v while its sent write waited", got.LeaseExpiresAt)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	for _, d := range []notify.Delivery{first, second} {
		if got := e.f.Get(d.ID); got.Status != notify.StatusSent {
			t.Errorf("%s: %s, want sent", d.Recipient, got.Status)
		}
	}
}

// afterSend sends through its provider, then calls after.
type afterSend struct {
	mail.Provider
	after func(mail.Message)
}

func (p afterSend) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	id, err := p.Provider.Send(ctx, m, handOver)
	if err == nil {
		p.after(m)
	}
	return id, err
}
