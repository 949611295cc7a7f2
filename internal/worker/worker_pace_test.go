package worker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/resend"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

// budgetFor is a budget of rate requests a second for provider, over a
// Redis client of its own: what one worker process holds.
func (e *env) budgetFor(t *testing.T, provider string, rate float64) *pace.Budget {
	t.Helper()
	rdb := redisconn.NewClient(e.redis.Opt)
	t.Cleanup(func() { rdb.Close() })
	b, err := pace.New(rdb, e.redis.Queue, provider, pace.Config{Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Two workers that share one provider's budget of 8 requests a second,
// each over its own Redis client as two processes would, send 40
// confirmations placed at once no faster than that — in no second more
// than the rate (and a token of jitter) — and at about that pace, each
// once. A task that met no token waited for it, or came back for its
// turn; none failed.
func TestTwoWorkersKeepTheProvidersPace(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	const rate, n = 8.0, 40
	for range 2 {
		w := e.worker(t, workerOpts{providers: []worker.NamedProvider{{Name: "smtp", Provider: e.smtp(t), Budget: e.budgetFor(t, "smtp", rate)}},
			paceWait: 300 * time.Millisecond})
		workertest.Serve(t, w.Worker, worker.ServerConfig{Redis: e.redis.Opt, DelayedTaskCheckInterval: 50 * time.Millisecond})
	}
	for i := range n {
		e.checkout(t, fmt.Sprintf("pace-%d@example.com", i))
	}
	testenv.WaitFor(t, "every confirmation sent", 60*time.Second, func() bool { return e.sink.Count() >= n })

	var at []time.Time
	seen := map[string]int{}
	for _, m := range e.sink.Messages() {
		at = append(at, m.ReceivedAt)
		seen[m.MessageID]++
	}
	slices.SortFunc(at, time.Time.Compare)
	most := 0
	for i := range at {
		j := i
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		most = max(most, j-i)
	}
	// The budget grants one request every 1/rate; the mail server sees
	// them a little earlier or later than granted (an SMTP session of its
	// own each, under the race detector and beside the rest of the
	// suite), so a second may hold one or two more: a session delayed by
	// a token's interval lands beside the next one's.
	if most > int(rate)+2 {
		t.Errorf("%d e-mails within one second, want at most the pace of %v a second (and two of jitter)", most, rate)
	}
	span := at[len(at)-1].Sub(at[0])
	if least := time.Duration(float64(n-2) / rate * float64(time.Second)); span < least {
		t.Errorf("%d e-mails in %v, want at least %v at %v a second", n, span, least, rate)
	}
	if most := time.Duration(2 * float64(n) / rate * float64(time.Second)); span > most {
		t.Errorf("%d e-mails in %v: the pace of %v a second was not reached (at most %v)", n, span, rate, most)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s: %d e-mails", id, k)
		}
	}
	if failed := e.counter(t, "sekali_deliveries_total", "template", "order-confirmation", "outcome", "failed"); failed != 0 {
		t.Errorf("%v deliveries failed", failed)
	}
	t.Logf("%d e-mails in %v, at most %d in one second; %v tasks handed back for their turn", n, span.Round(time.Millisecond), most,
		e.counter(t, "sekali_tasks_handed_back_total", "reason", "paced"))
}

// With PACE_SPILL_AFTER, a delivery that its first provider's pace
// would keep waiting longer than that goes to the next provider of
// PROVIDERS, which has a request to spare: nothing was handed over
// anywhere, so nothing can be sent twice. Without it (the default),
// every delivery waits for the first.
func TestSpillToTheNextProviderPastAWait(t *testing.T) {
	t.Parallel()
	for _, spill := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprintf("spill after %v", spill), func(t *testing.T) {
			t.Parallel()
			e := setup(t, smtpsink.Config{})
			w := e.worker(t, workerOpts{providers: []worker.NamedProvider{
				{Name: "relay-a", Provider: e.smtp(t), Budget: e.budgetFor(t, "relay-a", 0.2)}, // a request every 5 s
				{Name: "relay-b", Provider: e.smtp(t)},
			}, paceWait: 100 * time.Millisecond, spillAfter: spill})
			var ds []notify.Delivery
			for i := range 3 {
				d := e.checkout(t, fmt.Sprintf("spill-%d@example.com", i))
				// Sent at once, spilled, or handed back for its turn: one try.
				_ = w.ProcessTask(t.Context(), queue.NewDeliverTask(d))
				ds = append(ds, d)
			}
			byProvider := map[string]int{}
			for _, d := range ds {
				if d := e.f.Get(d.ID); d.Status == notify.StatusSent {
					byProvider[d.Provider]++
				}
			}
			switch {
			case spill == 0 && (byProvider["relay-a"] != 1 || byProvider["relay-b"] != 0):
				t.Errorf("without spilling: sent %v, want one through relay-a and the others waiting for it", byProvider)
			case spill > 0 && (byProvider["relay-a"] != 1 || byProvider["relay-b"] != 2):
				t.Errorf("spilling after %v: sent %v, want one through relay-a and two spilled to relay-b", spill, byProvider)
			}
			if n := e.sink.Count(); n != byProvider["relay-a"]+byProvider["relay-b"] {
				t.Errorf("%d e-mails for %v sent", n, byProvider)
			}
		})
	}
}

// Confirmations first: when the provider's pace is scarce and mail that
// may wait (here, reminders scheduled a moment ago, due now) is queued
// before a flash sale's confirmations, the workers take the
// confirmations first: the later lane is served only while the queue
// has none, and a worker's tasks waiting for a token take it in line,
// urgent ones first, whichever came into a slot first.
func TestConfirmationsGoBeforeMailThatMayWait(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	e.enq.Prioritize(e.templates)
	const later, confirmations = 12, 8
	first := e.checkout(t, "now-0@example.com") // its confirmation, and the order the reminders are about
	for i := range later {
		e.schedule(t, first, fmt.Sprintf("reminder-%d", i), time.Now().Add(300*time.Millisecond))
	}
	time.Sleep(time.Second) // the reminders are due, in the later lane
	for i := 1; i < confirmations; i++ {
		e.checkout(t, fmt.Sprintf("now-%d@example.com", i))
	}
	w := e.worker(t, workerOpts{providers: []worker.NamedProvider{{Name: "smtp", Provider: e.smtp(t), Budget: e.budgetFor(t, "smtp", 10)}}})
	workertest.Serve(t, w.Worker, worker.ServerConfig{Redis: e.redis.Opt, DelayedTaskCheckInterval: 50 * time.Millisecond})
	testenv.WaitFor(t, "every e-mail sent", 60*time.Second, func() bool { return e.sink.Count() >= later+confirmations })
	if e.sink.Count() != later+confirmations {
		t.Fatalf("%d e-mails, want %d", e.sink.Count(), later+confirmations)
	}

	msgs := e.sink.Messages()
	slices.SortFunc(msgs, func(a, b smtpsink.Message) int { return a.ReceivedAt.Compare(b.ReceivedAt) })
	last, n := 0, 0
	for i, m := range msgs {
		if strings.HasPrefix(m.Header.Get("Idempotency-Key"), "order-confirmation:") {
			n++
			last = i + 1
		}
	}
	// A task of the later lane asking for its token when confirmations
	// arrive goes first; any other waits behind them in the worker's
	// line, however many slots they hold.
	if n != confirmations || last > confirmations+1 {
		t.Errorf("the last of %d confirmations was e-mail %d of %d, want %d among the first %d", n, last, len(msgs), confirmations, confirmations+1)
	}
	t.Logf("the %d confirmations were among the first %d of %d e-mails", confirmations, last, len(msgs))
}

// An account allowed less than the configured rate is paced at its own
// from its first successful answer: Resend states its limit on every
// answer (ratelimit-limit), and the worker lowers the shared budget to it
// before any request is refused. Once the account says it allows the
// configured rate again, the budget goes back to it.
func TestASuccessfulAnswerStatesTheAccountsRate(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	rs := resendtest.NewServer()
	t.Cleanup(rs.Close)
	rs.SetRateLimit(2)
	p, err := resend.New(resend.Config{Config: httpprovider.Config{Key: rs.APIKey, From: "shop@example.com", BaseURL: rs.URL}})
	if err != nil {
		t.Fatal(err)
	}
	budget := e.budgetFor(t, "resend", 8)
	w := e.worker(t, workerOpts{providers: []worker.NamedProvider{{Name: "resend", Provider: p, Budget: budget, Resend: resend.DedupWindow}},
		paceWait: time.Second})

	d := e.checkout(t, "lower@example.com")
	if err := w.ProcessTask(t.Context(), queue.NewDeliverTask(d)); err != nil {
		t.Fatal(err)
	}
	s, err := budget.State(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.Rate != 2 || s.LearnedUntil.IsZero() {
		t.Errorf("after an answer saying ratelimit-limit: 2, the budget paces at %v/s (learned until %v), want 2", s.Rate, s.LearnedUntil)
	}
	if got := rs.Counts().RateLimited; got != 0 {
		t.Errorf("%d requests refused for pace, want none", got)
	}

	rs.SetRateLimit(8)
	d = e.checkout(t, "again@example.com")
	if err := w.ProcessTask(t.Context(), queue.NewDeliverTask(d)); err != nil {
		t.Fatal(err)
	}
	if s, err = budget.State(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.Rate != 8 || !s.LearnedUntil.IsZero() {
		t.Errorf("after an answer saying ratelimit-limit: 8, the budget paces at %v/s (learned until %v), want the configured 8", s.Rate, s.LearnedUntil)
	}
	if e.f.Get(d.ID).Status != notify.StatusSent {
		t.Errorf("second delivery %s, want sent", e.f.Get(d.ID).Status)
	}
}

// A task of many at a paced provider that takes one message a request
// takes its first request's token alone: the others wait for theirs
// each in a task of its own, holding nothing, so that requests leave as
// their tokens were taken and an urgent one asking meanwhile finds the
// budget free for it.
func TestATaskOfManyAtAPacedProviderTakesOneTokenAtATime(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{providers: []worker.NamedProvider{{Name: "smtp", Provider: e.smtp(t), Budget: e.budgetFor(t, "smtp", 1)}},
		paceWait: 2 * time.Second})
	ds := make([]notify.Delivery, 3)
	for i := range ds {
		ds[i] = e.checkout(t, fmt.Sprintf("one-token-%d@example.com", i))
	}
	ins := asynq.NewInspector(e.redis.Opt)
	t.Cleanup(func() { ins.Close() })
	if _, err := ins.DeleteAllPendingTasks(e.redis.Queue); err != nil {
		t.Fatal(err)
	}
	if err := w.ProcessTask(context.Background(), queue.NewDeliveriesTask(ds)); err != nil {
		t.Fatalf("the task of many: %v, want done", err)
	}
	e.emails(t, 1, "after the task of many")
	if got := e.f.Get(ds[0].ID).Status; got != notify.StatusSent {
		t.Errorf("its first delivery is %s, want sent", got)
	}
	for _, d := range ds[1:] {
		if got := e.f.Get(d.ID).Status; got != notify.StatusPending {
			t.Errorf("delivery %s is %s, want pending, never claimed", d.ID, got)
		}
		if _, err := ins.GetTaskInfo(e.redis.Queue, queue.TaskID(d.ID)); err != nil {
			t.Errorf("delivery %s has no task of its own to wait for its token in: %v", d.ID, err)
		}
	}
	if logs := e.logs.String(); !strings.Contains(logs, `"paced_later":2`) {
		t.Errorf("the task's line does not say two wait for their turn:\n%s", logs)
	}
}
