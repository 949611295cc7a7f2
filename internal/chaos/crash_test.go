package chaos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// A worker is killed (SIGKILL) at each named point of an attempt. Another
// worker and the reconciler take over; every order still gets exactly one
// e-mail.
func TestWorkerKilledAtEachPoint(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"after-dequeue", "after-lock", "after-claim", "before-data", "after-accept", "after-sent"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, smtpsink.Config{})
			c.startAPI()
			victim := c.startWorker("SEKALI_FAILPOINTS", point+"=kill")
			c.placeOrders("kill-"+point, 3)
			select {
			case <-victim.Done():
				if err := victim.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("worker exited with %v, want killed at %s", err, point)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("the worker never reached %s", point)
			}
			c.startWorker()
			c.startReconciler()
			c.settled(120 * time.Second)
			c.verdict("worker SIGKILL "+point, nil)
		})
	}
}
