package pace

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// grants records the order in which takers had their tokens.
type grants struct {
	mu  sync.Mutex
	got []string
}

// take takes a token of b for who, as a task does (Wait, up to within):
// handed back, it comes back after the turn's wait and asks again; it
// records the token when it went.
func (g *grants) take(t *testing.T, b *Budget, lane Lane, within time.Duration, who string) {
	for {
		turn, err := b.Wait(context.Background(), lane, 1, within)
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

func (g *grants) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.got)
}

// A request of the later lane waiting for its token yields to an urgent
// one that asks after it: the urgent one has the next token; the later
// one, then held back for it, is handed back, and has its token when it
// comes back. In one process, the budget alone keeps that order.
func TestALaterRequestYieldsToAnUrgentOneThatCameAfterIt(t *testing.T) {
	t.Parallel()
	b := setup(t).budget("resend", Config{Rate: 2})
	var g grants
	g.take(t, b, Urgent, 10*time.Second, "first") // the budget's token now; the next is half a second off
	var wg sync.WaitGroup
	wg.Go(func() { g.take(t, b, Later, 10*time.Second, "newsletter") })
	time.Sleep(100 * time.Millisecond) // the newsletter waits for its token
	wg.Go(func() { g.take(t, b, Urgent, 10*time.Second, "confirmation") })
	wg.Wait()
	if want := []string{"first", "confirmation", "newsletter"}; !slices.Equal(g.got, want) {
		t.Errorf("tokens went to %v, want %v", g.got, want)
	}
}

// Two processes: one's tasks are all newsletters, the other's
// confirmations that arrive while the newsletters go. Once a
// confirmation waits for its token, the budget gives the newsletters
// none until the confirmations have had theirs (they are handed back,
// and come back): at most the one a newsletter was taking as the first
// confirmation asked goes between them. Without the budget's lanes the
// two processes would share the pace, a newsletter for every
// confirmation.
func TestNewslettersInAnotherProcessWaitForTheConfirmations(t *testing.T) {
	t.Parallel()
	s := setup(t)
	news, shop := s.budget("resend", Config{Rate: 10}), s.budget("resend", Config{Rate: 10})
	var g grants
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { g.take(t, news, Later, 20*time.Second, "n") })
	}
	testenv.WaitFor(t, "the newsletters to be going", 5*time.Second, func() bool { return g.count() >= 2 })
	for range 8 {
		wg.Go(func() { g.take(t, shop, Urgent, 20*time.Second, "c") })
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
