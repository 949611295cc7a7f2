package httpprovidertest

import (
	"context"
	"errors"
	"fmt"
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

// UnreachableIsUnavailable checks p and l (nil for a provider without a
// look-up), both pointed at an address nothing listens on: the send is
// unavailable at connect, with the hand-over run (the request was about
// to go out) but nothing sent, so the worker waits for a probe and may
// move the delivery; the probe fails; and the look-up answers "don't
// know", never "not found" (which would let the reconciler send again).
func UnreachableIsUnavailable(t T, p mail.Provider, l mail.Lookup, m mail.Message) {
	t.Helper()
	_, err := p.Send(context.Background(), m, Pass)
	if se := SendError(t, err); se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageConnect || !se.HandedOver || se.MayHaveAccepted() {
		t.Errorf("connection refused: %v, want unavailable at connect (handed over, nothing sent)", err)
	}
	if err := p.Probe(context.Background()); err == nil {
		t.Errorf("probe of a closed server passed")
	}
	if l == nil {
		return
	}
	if _, found, err := l.Find(context.Background(), Query(m, time.Now().Add(-time.Hour))); err == nil {
		t.Errorf("look-up on a closed server answered (found %v), want an error", found)
	}
}

// Pass is a hand-over that lets the data go out.
func Pass() error { return nil }

// Message is the n-th delivery of a test, to budi@example.com, with its
// key, Message-ID and both bodies.
func Message(n int) mail.Message {
	key := fmt.Sprintf("order-confirmation:0190f3c2-7d4e-7a1b-9c3d-5e6f7a8b9c%02d:budi@example.com", n)
	return mail.Message{To: "budi@example.com", Subject: "Pesanan", Text: "Terima kasih", HTML: "<p>Terima kasih</p>",
		MessageID: mail.MessageID(key, "shop.example"), IdempotencyKey: key}
}

// Query is what the reconciler asks a look-up about m, handed over at
// handedOver.
func Query(m mail.Message, handedOver time.Time) mail.Query {
	return mail.Query{MessageID: m.MessageID, KeyHash: mail.KeyHash(m.IdempotencyKey), HandedOverAt: handedOver}
}

// RefusedBatchHandOverSendsNothing is RefusedHandOverSendsNothing for a
// batch: p, asked to send b with a refused hand-over, is aborted and
// not handed over, with no results, and no request reached the
// provider.
func RefusedBatchHandOverSendsNothing(t T, p mail.Batcher, b mail.Batch, sent func() int) {
	t.Helper()
	lost := errors.New("lease lost")
	results, err := p.SendBatch(context.Background(), b, func() error { return lost })
	if se := SendError(t, err); se.Outcome != mail.OutcomeAborted || se.HandedOver || !errors.Is(err, lost) || results != nil {
		t.Errorf("refused hand-over: %v, %v; want aborted, not handed over, wrapping the refusal, no results", results, err)
	}
	if n := sent(); n != 0 {
		t.Errorf("%d requests reached the provider, want 0", n)
	}
}

// StallAfterBatchHandOverSendsNothing is StallAfterHandOverSendsNothing
// for a batch: a hand-over that returns after stall, longer than p's
// request timeout, sends nothing; the batch is unavailable and handed
// over.
func StallAfterBatchHandOverSendsNothing(t T, p mail.Batcher, b mail.Batch, stall time.Duration, sent func() int) {
	t.Helper()
	_, err := p.SendBatch(context.Background(), b, func() error { time.Sleep(stall); return nil })
	if se := SendError(t, err); se.Outcome != mail.OutcomeUnavailable || !se.HandedOver {
		t.Errorf("stalled past the deadline: %v, want unavailable (nothing sent), handed over", err)
	}
	if n := sent(); n != 0 {
		t.Errorf("%d requests reached the provider, want 0", n)
	}
}
