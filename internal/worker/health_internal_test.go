package worker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/pace"
)

// A breaker that a probe closes and the next send reopens (a probe that
// passes while sending fails) probes ever less often, until a send
// succeeds.
func TestBreakerBacksOffWhenProbesPassButSendsFail(t *testing.T) {
	h := newHealth(prometheus.NewGauge(prometheus.GaugeOpts{Name: "sekali_test_provider_up", Help: "The breaker under test."}))
	const interval = time.Second
	now := time.Now()
	due := func(after time.Duration) bool { return h.probeDue(now.Add(after), interval) }

	if due(0) {
		t.Fatal("a probe is due while the provider is up")
	}
	h.markDown("503")
	if !due(0) {
		t.Fatal("no probe due once the breaker opened")
	}
	for flaps, wait := range []time.Duration{2 * interval, 4 * interval, 8 * interval} {
		h.markUp()        // the probe passed …
		h.markDown("503") // … and the first send after it met the refusal again
		now = now.Add(interval)
		if due(0) {
			t.Fatalf("after %d flaps a probe came after one interval", flaps+1)
		}
		now = now.Add(wait - interval)
		if !due(0) {
			t.Fatalf("after %d flaps no probe after %v", flaps+1, wait)
		}
	}
	h.markUp()
	h.sent() // a send got through: the flaps are forgotten
	h.markDown("503")
	now = now.Add(interval)
	if !due(0) {
		t.Error("after a successful send, the next outage is not probed every interval")
	}
	for range 20 {
		h.markUp()
		h.markDown("503")
	}
	if now = now.Add(interval << maxFlapBackoff); !due(0) {
		t.Errorf("the back-off grew past %d intervals", 1<<maxFlapBackoff)
	}
}

// A probe met by a refusal for pace (a relay's 421 "too many
// connections") found the provider up: only that closes the breaker
// among a probe's failures; a refusal of us, or no answer, keeps it open.
func TestAProbeAnsweredAboutPaceFoundTheProviderUp(t *testing.T) {
	throttled := &mail.SendError{Outcome: mail.OutcomeThrottled, Stage: mail.StageConnect, Throttle: mail.ThrottleConnections,
		Reply: mail.Reply{Protocol: mail.ProtocolSMTP, Code: 421, Enhanced: "4.7.0", Text: "Error: too many connections from 127.0.0.1"}}
	if se := aboutPace(fmt.Errorf("probe: %w", throttled)); se != throttled {
		t.Errorf("aboutPace(a wrapped 421 for pace) = %v, want the refusal", se)
	}
	for _, err := range []error{
		nil,
		errors.New("dial tcp 127.0.0.1:25: connect: connection refused"),
		&mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageConnect, Reply: mail.Reply{Protocol: mail.ProtocolSMTP, Code: 554}},
	} {
		if se := aboutPace(err); se != nil {
			t.Errorf("aboutPace(%v) = %v, want nil: the breaker stays open", err, se)
		}
	}
	sig := throttleSignal(throttled, time.Now())
	if sig.Pause < pace.DefaultPause {
		t.Errorf("the probe's refusal pauses the budget %v, want at least %v", sig.Pause, pace.DefaultPause)
	}
}
