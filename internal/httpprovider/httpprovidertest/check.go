package httpprovidertest

import (
	"context"
	"errors"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// T is the part of *testing.T the checks use.
type T interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// SendError returns err as the *mail.SendError every provider's error
// is, and fails the test if it is not one.
func SendError(t T, err error) *mail.SendError {
	t.Helper()
	var se *mail.SendError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a *mail.SendError", err, err)
	}
	return se
}

// RefusedHandOverSendsNothing checks that p, asked to send m with a
// hand-over that is refused (the worker lost its lease), is aborted, not
// handed over, with the refusal wrapped, and that no request reached the
// provider: sent counts the send requests its fake received.
func RefusedHandOverSendsNothing(t T, p mail.Provider, m mail.Message, sent func() int) {
	t.Helper()
	lost := errors.New("lease lost")
	_, err := p.Send(context.Background(), m, func() error { return lost })
	if se := SendError(t, err); se.Outcome != mail.OutcomeAborted || se.HandedOver || !errors.Is(err, lost) {
		t.Errorf("refused hand-over: %v, want aborted, not handed over, wrapping the refusal", err)
	}
	if n := sent(); n != 0 {
		t.Errorf("%d requests reached the provider, want 0", n)
	}
}

// StallAfterHandOverSendsNothing checks that p, asked to send m with a
// hand-over that returns only after stall, longer than p's request
// timeout (the worker stalled after its last lease check), sends
// nothing: the request's deadline counts from before the hand-over. The
// send is unavailable (nothing went out) and handed over; sent counts
// the send requests the provider's fake received.
func StallAfterHandOverSendsNothing(t T, p mail.Provider, m mail.Message, stall time.Duration, sent func() int) {
	t.Helper()
	_, err := p.Send(context.Background(), m, func() error { time.Sleep(stall); return nil })
	if se := SendError(t, err); se.Outcome != mail.OutcomeUnavailable || !se.HandedOver {
		t.Errorf("stalled past the deadline: %v, want unavailable (nothing sent), handed over", err)
	}
	if n := sent(); n != 0 {
		t.Errorf("%d requests reached the provider, want 0", n)
	}
}
