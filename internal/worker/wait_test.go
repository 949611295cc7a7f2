package worker_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/worker"
)

// retryCap is the longest asynq's back-off may ask a failed task to wait.
const retryCap = 5 * time.Minute

// TestRetryDelayGrowsThenStopsAtTheCap: a failed task's wait doubles with
// each try (1s, 2s, 4s, ... each with jitter down to half) until it
// reaches the cap, and a late try — however late — never waits longer.
func TestRetryDelayGrowsThenStopsAtTheCap(t *testing.T) {
	t.Parallel()
	failed := errors.New("refused before the data")
	const samples = 200

	// Each try's window: [ceiling/2, ceiling], ceiling doubling from 1s
	// and stopping at the cap.
	ceiling := time.Second
	for n := 0; n <= 12; n++ {
		lo, hi := ceiling/2, ceiling
		var longest time.Duration
		for range samples {
			d := worker.RetryDelay(n, failed, nil)
			if d < lo || d > hi {
				t.Fatalf("RetryDelay(%d) = %v, want within [%v, %v]", n, d, lo, hi)
			}
			longest = max(longest, d)
		}
		if longest == lo {
			t.Errorf("RetryDelay(%d): %d samples all %v, want jitter above it", n, samples, lo)
		}
		ceiling = min(2*ceiling, retryCap)
	}

	// The shortest wait of the first tries grows: try 3 never waits less
	// than try 0 may wait at most.
	if d := worker.RetryDelay(3, failed, nil); d <= time.Second {
		t.Errorf("RetryDelay(3) = %v, want more than RetryDelay(0)'s 1s ceiling", d)
	}

	// A late try, and absurdly late ones, stay under the cap and do not
	// collapse to nothing (an overflowing shift would).
	for _, n := range []int{9, 10, 20, 25, 63, 64, 100, 1000, math.MaxInt32, math.MaxInt} {
		for range samples {
			d := worker.RetryDelay(n, failed, nil)
			if d > retryCap {
				t.Fatalf("RetryDelay(%d) = %v, want at most the cap %v", n, d, retryCap)
			}
			if d < retryCap/2 {
				t.Fatalf("RetryDelay(%d) = %v, want at least half the cap, %v", n, d, retryCap/2)
			}
		}
	}
}
