package worker_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/redisconn"
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
	// them a little earlier or later than granted, so a second may hold
	// one more.
	if most > int(rate)+1 {
		t.Errorf("%d e-mails within one second, want at most the pace of %v a second (and one of jitter)", most, rate)
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
	if failed := e.counter(t, "sekali_deliveries_total", "order-confirmation", "failed"); failed != 0 {
		t.Errorf("%v deliveries failed", failed)
	}
	t.Logf("%d e-mails in %v, at most %d in one second; %v tasks handed back for their turn", n, span.Round(time.Millisecond), most,
		e.counter(t, "sekali_tasks_handed_back_total", "paced"))
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
				_ = w.ProcessTask(t.Context(), notify.NewDeliverTask(d))
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
