package worker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/pace"
)

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
