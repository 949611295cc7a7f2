package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// lines are n worker processes' lines for one provider's budget of rate
// requests a second, each over a Redis client of its own.
func lines(t *testing.T, n int, rate float64, maxWait time.Duration) []*line {
	t.Helper()
	rd := testenv.NewRedis(t)
	var ls []*line
	for range n {
		rdb := redisconn.NewClient(rd.Opt)
		t.Cleanup(func() { rdb.Close() })
		b, err := pace.New(rdb, rd.Queue, "resend", pace.Config{Rate: rate})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, &line{budget: b, maxWait: maxWait})
	}
	return ls
}

// grants records the order in which takers had their tokens.
type grants struct {
	mu  sync.Mutex
	got []string
}

// take takes a token in l for who, as a task does: handed back, it
// comes back after the turn's wait and takes its place in line again;
// it records the token when it went.
func (g *grants) take(t *testing.T, l *line, urgent bool, who string) {
	for {
		turn, err := l.take(context.Background(), urgent)
		if err != nil {
			t.Error(err)
			return
		}
		if turn.Go() {
			g.mu.Lock()
			g.got = append(g.got, who)
			g.mu.Unlock()
			return
		}
		time.Sleep(turn.Wait)
	}
}

// A task of the later lane asking for its token steps aside when an
// urgent one joins its line: the urgent one has the next token, though
// the later one was waiting for it first; the later one, then held back
// for the urgent one, is handed back, and has its token when it comes
// back.
func TestALaterAskerStepsAsideForAnUrgentTask(t *testing.T) {
	t.Parallel()
	l := lines(t, 1, 2, 10*time.Second)[0]
	var g grants
	g.take(t, l, true, "first") // the budget's token now; the next is half a second off
	var wg sync.WaitGroup
	wg.Go(func() { g.take(t, l, false, "newsletter") })
	testenv.WaitFor(t, "the newsletter to ask", time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.asker != nil && !l.asker.urgent
	})
	wg.Go(func() { g.take(t, l, true, "confirmation") })
	wg.Wait()
	if want := []string{"first", "confirmation", "newsletter"}; !slices.Equal(g.got, want) {
		t.Errorf("tokens went to %v, want %v", g.got, want)
	}
}

// Two processes: one's line holds only newsletters, the other's
// confirmations that arrive while the newsletters go. Once a
// confirmation waits for its token, the budget gives the newsletters
// none until the confirmations have had theirs (they are handed back,
// and come back): at most the one a newsletter was taking as the first
// confirmation asked goes between them. Without the budget's lanes the
// two processes would share the pace, a newsletter for every
// confirmation.
func TestNewslettersInAnotherProcessWaitForTheConfirmations(t *testing.T) {
	t.Parallel()
	ls := lines(t, 2, 10, 20*time.Second)
	news, shop := ls[0], ls[1]
	var g grants
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { g.take(t, news, false, "n") })
	}
	testenv.WaitFor(t, "the newsletters to be going", 5*time.Second, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.got) >= 2
	})
	for range 8 {
		wg.Go(func() { g.take(t, shop, true, "c") })
	}
	wg.Wait()
	first, last := -1, -1
	for i, who := range g.got {
		if who == "c" {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	between := 0
	for _, who := range g.got[first : last+1] {
		if who == "n" {
			between++
		}
	}
	if len(g.got) != 24 || between > 1 {
		t.Errorf("tokens went %v: %d newsletters between the first confirmation and the last, want at most 1", g.got, between)
	}
}

// A convoy's request carries whoever waits for it: led by a newsletter,
// it asks in the urgent lane when confirmations ride with it, so that
// the later lane's hold (another process's confirmations waiting) does
// not send the confirmations back with the newsletter.
func TestAConvoyCarryingConfirmationsAsksAsUrgent(t *testing.T) {
	t.Parallel()
	ls := lines(t, 2, 5, 5*time.Second)
	other, mine := ls[0], ls[1]
	var g grants
	g.take(t, other, true, "elsewhere")
	if turn, err := other.budget.Take(context.Background(), pace.Urgent, 1); err != nil || turn.Go() {
		t.Fatalf("another process's second confirmation: %+v %v, want it to wait", turn, err)
	} // it waits: the later lane is held
	c := &convoy{w: &Worker{metrics: NewMetrics(prometheus.NewRegistry())}, route: &route{name: "resend", budget: mine.budget, line: mine}}
	newsletter := &rider{ctx: context.Background()}
	c.queue = []*rider{newsletter}
	if _, ok := errors.AsType[*pacedSend](c.token(newsletter)); !ok {
		t.Fatal("a convoy of a newsletter alone, while confirmations wait elsewhere: want it handed back for its turn")
	}
	c.queue = []*rider{newsletter, {ctx: context.Background(), urgent: true}}
	if err := c.token(newsletter); err != nil {
		t.Errorf("a convoy led by a newsletter with a confirmation aboard: %v, want its token", err)
	}
}
