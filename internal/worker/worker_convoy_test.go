package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postmark"
	"github.com/sekali-dev/sekali/internal/postmark/postmarktest"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/resend"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
)

// resendWorker is a worker sending through a Resend stand-in, with
// PROVIDER_BATCHES on, and budget (nil: unpaced).
func resendWorker(t *testing.T, e *env, rate float64) (testWorker, *resendtest.Server) {
	t.Helper()
	rs := resendtest.NewServer()
	t.Cleanup(rs.Close)
	p, err := resend.New(resend.Config{Config: httpprovider.Config{Key: rs.APIKey, From: "shop@example.com", BaseURL: rs.URL, Timeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	np := worker.NamedProvider{Name: "resend", Provider: p, Resend: resend.DedupWindow}
	if rate > 0 {
		np.Budget = e.budgetFor(t, "resend", rate)
	}
	return e.worker(t, workerOpts{providers: []worker.NamedProvider{np}, batches: true, paceWait: 5 * time.Second}), rs
}

// checkouts places n orders and returns their confirmations.
func (e *env) checkouts(t *testing.T, prefix string, n int) []notify.Delivery {
	t.Helper()
	ds := make([]notify.Delivery, n)
	for i := range ds {
		ds[i] = e.checkout(t, fmt.Sprintf("%s-%d@example.com", prefix, i))
	}
	return ds
}

// batchOf reads the batch each of ds was handed over in.
func (e *env) batchOf(t *testing.T, ds []notify.Delivery) (key string, members []uuid.UUID) {
	t.Helper()
	for _, d := range ds {
		got := e.f.Get(d.ID)
		if got.HandoverBatch == "" {
			t.Fatalf("delivery %s names no batch", d.ID)
		}
		if key != "" && got.HandoverBatch != key {
			t.Fatalf("deliveries of one request name batches %s and %s", key, got.HandoverBatch)
		}
		key = got.HandoverBatch
	}
	var provider string
	err := e.db.Pool.QueryRow(context.Background(), "SELECT provider, members FROM delivery_batches WHERE key = $1", key).Scan(&provider, &members)
	if err != nil || provider != "resend" {
		t.Fatalf("batch %s: %s, %v", key, provider, err)
	}
	return key, members
}

// A task's deliveries bound for Resend go in one request of
// /emails/batch, each e-mail as a lone send would post it, each delivery
// its own outcome (the id Resend answered for it); the batch, recorded
// with the hand-over before the request left, names its members in the
// order the request carried them. A paced provider spends one token on
// the request: a budget of one request a second sends the 12 in one
// request, and no request was refused.
func TestATasksDeliveriesGoInOneRequest(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w, rs := resendWorker(t, e, 1)
	rs.SetRateLimit(1)
	ds := e.checkouts(t, "batch", 12)
	if err := w.ProcessTask(context.Background(), queue.NewDeliveriesTask(ds)); err != nil {
		t.Fatal(err)
	}
	c := rs.Counts()
	if c.Emails != 0 || c.Batches == 0 || c.Batches > 2 || c.RateLimited != 0 {
		t.Errorf("%+v: want the 12 in one request of /emails/batch (two at most: the first may leave alone), none refused", c)
	}
	ids := map[string]bool{}
	for _, m := range rs.Messages() {
		if !m.Batched {
			t.Errorf("%s sent alone", m.To)
		}
		ids[m.ID] = true
	}
	if len(rs.Messages()) != len(ds) {
		t.Fatalf("%d e-mails for %d deliveries", len(rs.Messages()), len(ds))
	}
	for _, d := range ds {
		got := e.f.Get(d.ID)
		if got.Status != notify.StatusSent || !ids[got.ProviderMessageID] {
			t.Errorf("%s: %s, id %q, want sent with an id Resend answered", d.Recipient, got.Status, got.ProviderMessageID)
		}
		if n := rs.CountByMessageID(got.MessageID); n != 1 {
			t.Errorf("%s: %d e-mails", d.Recipient, n)
		}
	}
	if c.Batches == 1 {
		_, members := e.batchOf(t, ds)
		var order []uuid.UUID
		for _, m := range rs.Messages() {
			for _, d := range ds {
				if m.To[0] == d.Recipient {
					order = append(order, d.ID)
				}
			}
		}
		if !slices.Equal(members, order) {
			t.Errorf("the batch records %v, the request carried %v", members, order)
		}
	}
	if n := e.counter(t, "sekali_deliveries_total", "template", "order-confirmation", "outcome", "sent"); n != 12 {
		t.Errorf("%v deliveries counted sent", n)
	}
}

// A batch whose answer was lost after Resend sent it is sent again at
// once, identical, under the same key: Resend answers the first ids, and
// each customer has one e-mail. Lost before it sent, the same again is
// the one time it is sent.
func TestABatchWhoseAnswerWasLostIsSentAgainUnderItsKey(t *testing.T) {
	t.Parallel()
	for _, sent := range []bool{true, false} {
		t.Run(fmt.Sprintf("sent before the cut: %v", sent), func(t *testing.T) {
			t.Parallel()
			e := setup(t, smtpsink.Config{})
			w, rs := resendWorker(t, e, 0)
			ds := e.checkouts(t, "lost", 6)
			rs.BatchFailNext(resendtest.Fault{Cut: true, Sent: sent})
			if err := w.ProcessTask(context.Background(), queue.NewDeliveriesTask(ds)); err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				got := e.f.Get(d.ID)
				if got.Status != notify.StatusSent {
					t.Errorf("%s: %s, want sent", d.Recipient, got.Status)
				}
				if n := rs.CountByMessageID(got.MessageID); n != 1 {
					t.Errorf("%s: %d e-mails, want one", d.Recipient, n)
				}
			}
			if n := e.counter(t, "sekali_provider_batch_resent_total", "provider", "resend"); n < 1 {
				t.Errorf("%v batches sent again, want the one whose answer was lost", n)
			}
		})
	}
}

// One member refused (an address Resend will not take) fails alone; the
// others of its request are sent.
func TestABatchWithOneRefusedMember(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w, rs := resendWorker(t, e, 0)
	ds := e.checkouts(t, "refused", 5)
	rs.RefuseRecipients(ds[2].Recipient)
	_ = w.ProcessTask(context.Background(), queue.NewDeliveriesTask(ds))
	for i, d := range ds {
		got := e.f.Get(d.ID)
		want := notify.StatusSent
		if i == 2 {
			want = notify.StatusFailed
		}
		if got.Status != want {
			t.Errorf("%s: %s, want %s", d.Recipient, got.Status, want)
		}
	}
	if n := len(rs.Messages()); n != 4 {
		t.Errorf("%d e-mails, want the 4 not refused", n)
	}
}

// Postmark takes no key: a batch whose answer was lost may be at
// Postmark whole or not at all, and is not sent again by the worker. Each
// member is left for the reconciler's look-up by its Message-ID, its row
// naming its batch so that nothing sends it alone meanwhile.
func TestALostPostmarkBatchIsLeftForTheLookUp(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	pm := postmarktest.NewServer()
	t.Cleanup(pm.Close)
	p, err := postmark.New(postmark.Config{Config: httpprovider.Config{Key: pm.Token, From: "shop@example.com", BaseURL: pm.URL, Timeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	w := e.worker(t, workerOpts{providers: []worker.NamedProvider{{Name: "postmark", Provider: p}}, batches: true})
	ds := e.checkouts(t, "pm", 4)
	pm.FailNext("/email/batch", postmarktest.Fault{Cut: true, Sent: true})
	_ = w.ProcessTask(context.Background(), queue.NewDeliveriesTask(ds))
	for _, d := range ds {
		got := e.f.Get(d.ID)
		if got.Status != notify.StatusSending || got.HandedOverAt == nil || got.HandoverBatch == "" {
			t.Errorf("%s: %s, handed over %v, batch %q: want left sending for the look-up, naming its batch", d.Recipient, got.Status, got.HandedOverAt, got.HandoverBatch)
		}
	}
	if n := pm.Requests("/email/batch"); n != 1 {
		t.Errorf("%d batch requests, want the one: without a key, sending again could send twice", n)
	}
}

// A batch whose outcome stayed unknown — its first request held at Resend
// past the worker's timeout, every identical re-send refused while it
// was in flight (or cut before Resend took it) — is left for the
// reconciler, which puts each member back, pinned, to be sent again in
// its batch (batch_replay), and queues the batch's own task once all are
// back. A member's task alone leaves it to that task; the batch's task
// sends it again whole, identical, under its key: Resend answers the
// first request's ids (it did take it) or sends it the one time (it did
// not). Each customer has one e-mail, and every delivery is sent.
func TestABatchWhoseOutcomeStayedUnknownIsSentAgainWhole(t *testing.T) {
	t.Parallel()
	for _, taken := range []bool{true, false} {
		t.Run(fmt.Sprintf("taken by Resend: %v", taken), func(t *testing.T) {
			t.Parallel()
			e := setup(t, smtpsink.Config{})
			rs := resendtest.NewServer()
			t.Cleanup(rs.Close)
			p, err := resend.New(resend.Config{Config: httpprovider.Config{Key: rs.APIKey, From: "shop@example.com", BaseURL: rs.URL, Timeout: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			w := e.worker(t, workerOpts{providers: []worker.NamedProvider{{Name: "resend", Provider: p, Resend: resend.DedupWindow}},
				batches: true, lockTTL: 2 * time.Second})
			ds := e.checkouts(t, "replay", 4)
			ins := asynq.NewInspector(e.redis.Opt)
			t.Cleanup(func() { ins.Close() })

			var release func()
			if taken {
				var arrived <-chan struct{}
				arrived, release = rs.HoldNext()
				go func() { <-arrived }()
			} else {
				rs.BatchFailNext(resendtest.Fault{Cut: true}, resendtest.Fault{Cut: true}, resendtest.Fault{Cut: true})
			}
			_ = w.ProcessTask(context.Background(), queue.NewDeliveriesTask(ds))
			key, members := e.batchOf(t, ds)
			for _, d := range ds {
				if got := e.f.Get(d.ID); got.Status != notify.StatusSending {
					t.Fatalf("%s: %s after its batch's answer was lost, want left sending for the reconciler", d.Recipient, got.Status)
				}
			}
			if release != nil {
				release() // Resend finishes the first request: the e-mails are sent, the key keeps its answer
				testenv.WaitFor(t, "the first request sent", 10*time.Second, func() bool { return len(rs.Messages()) == len(ds) })
			}

			time.Sleep(2100 * time.Millisecond) // the leases expire
			if _, err := ins.DeleteAllPendingTasks(e.redis.Queue); err != nil {
				t.Fatal(err)
			}
			r := reconcile.New(e.db.Pool, e.enq, ins, reconcile.Config{PendingAfter: time.Hour, Batch: 50, DefaultPolicy: reconcile.PolicyHold,
				MessageIDDomain: mailDomain, Actor: "reconciler", Providers: []reconcile.Provider{{Name: "resend", DedupWindow: resend.DedupWindow}}},
				slog.New(slog.DiscardHandler), prometheus.NewRegistry())
			rep, err := r.RunOnce(context.Background())
			if err != nil || rep.Decisions[reconcile.DecisionBatchReplay] != len(ds) {
				t.Fatalf("reconciler: %v, %v: want %d batch_replay", rep.Decisions, err, len(ds))
			}
			// A member's own task leaves it to its batch's.
			if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(e.f.Get(members[len(members)-1]))); err != nil {
				t.Fatalf("the last member's task alone: %v", err)
			}
			// The batch's task, as the reconciler queued it, sends it whole.
			info, err := ins.GetTaskInfo(e.redis.Queue, queue.BatchTaskID(key))
			if err != nil {
				t.Fatalf("the batch's task: %v", err)
			}
			if err := w.ProcessTask(context.Background(), asynq.NewTask(info.Type, info.Payload)); err != nil {
				t.Fatalf("the batch's task: %v", err)
			}
			for _, d := range ds {
				got := e.f.Get(d.ID)
				if got.Status != notify.StatusSent || got.HandoverBatch != key {
					t.Errorf("%s: %s in batch %q, want sent in %s", d.Recipient, got.Status, got.HandoverBatch, key)
				}
				if n := rs.CountByMessageID(got.MessageID); n != 1 {
					t.Errorf("%s: %d e-mails, want one", d.Recipient, n)
				}
			}
			if !strings.Contains(e.logs.String(), `"result":"left_to_its_batch"`) {
				t.Errorf("no member left itself to its batch's first:\n%s", e.logs.String())
			}
		})
	}
}
