package httpprovidertest_test

import (
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
)

// At most N in any window, wherever the window starts: two requests at
// the end of one second and two at the start of the next are four in
// one second, and the fourth is refused.
func TestRateLimitIsASlidingWindow(t *testing.T) {
	t.Parallel()
	var l httpprovidertest.RateLimit
	t0 := time.Unix(1000, 0)
	if v := l.Take(t0); !v.OK || v.Limited {
		t.Fatalf("no limit set: %+v, want admitted, unlimited", v)
	}
	l.Set(3, time.Second)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		ms        int
		ok        bool
		remaining int
		reset     time.Duration
	}{
		{900, true, 2, time.Second},
		{950, true, 1, 950 * time.Millisecond},
		{1100, true, 0, 800 * time.Millisecond},
		{1200, false, 0, 700 * time.Millisecond}, // four within 900..1900
		{1900, true, 0, 50 * time.Millisecond},   // the one at 900 has left
		{1920, false, 0, 30 * time.Millisecond},
	} {
		v := l.Take(at(c.ms))
		if v.OK != c.ok || v.Remaining != c.remaining || v.Reset != c.reset || v.Limit != 3 || !v.Limited {
			t.Errorf("at %d ms: %+v, want ok %v, remaining %d, reset %s", c.ms, v, c.ok, c.remaining, c.reset)
		}
	}
	if n := l.Refused(); n != 2 {
		t.Errorf("%d refused, want 2", n)
	}
	if s := httpprovidertest.Seconds(30 * time.Millisecond); s != 1 {
		t.Errorf("Seconds(30ms) = %d, want 1: a retry-after says not before", s)
	}
}
