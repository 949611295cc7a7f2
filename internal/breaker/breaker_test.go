package breaker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A breaker that a probe closes and the next send reopens (a probe that
// passes while sending fails) probes ever less often, until a send
// succeeds.
func TestBreakerBacksOffWhenProbesPassButSendsFail(t *testing.T) {
	h := New(prometheus.NewGauge(prometheus.GaugeOpts{Name: "sekali_test_provider_up", Help: "The breaker under test."}))
	const interval = time.Second
	now := time.Now()
	due := func(after time.Duration) bool { return h.ProbeDue(now.Add(after), interval) }

	if due(0) {
		t.Fatal("a probe is due while the provider is up")
	}
	h.MarkDown("503")
	if !due(0) {
		t.Fatal("no probe due once the breaker opened")
	}
	for flaps, wait := range []time.Duration{2 * interval, 4 * interval, 8 * interval} {
		h.MarkUp()        // the probe passed …
		h.MarkDown("503") // … and the first send after it met the refusal again
		now = now.Add(interval)
		if due(0) {
			t.Fatalf("after %d flaps a probe came after one interval", flaps+1)
		}
		now = now.Add(wait - interval)
		if !due(0) {
			t.Fatalf("after %d flaps no probe after %v", flaps+1, wait)
		}
	}
	h.MarkUp()
	h.Sent() // a send got through: the flaps are forgotten
	h.MarkDown("503")
	now = now.Add(interval)
	if !due(0) {
		t.Error("after a successful send, the next outage is not probed every interval")
	}
	for range 20 {
		h.MarkUp()
		h.MarkDown("503")
	}
	if now = now.Add(interval << maxFlapBackoff); !due(0) {
		t.Errorf("the back-off grew past %d intervals", 1<<maxFlapBackoff)
	}
}
