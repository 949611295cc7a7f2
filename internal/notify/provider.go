package notify

import (
	"context"
	"errors"
	"fmt"
)

// Message is an e-mail ready for a provider.
type Message struct {
	To             string
	Subject        string
	Text           string
	HTML           string
	MessageID      string // without angle brackets; the same on every attempt
	IdempotencyKey string
}

// Provider hands messages to a mail provider. SMTP is the one in use; an
// HTTP provider (with its own idempotency header) would be the second.
type Provider interface {
	// Send delivers m. handOver is called once the provider is ready to
	// take the message data and right before that data goes out; when it
	// returns an error nothing is sent and Send returns an
	// OutcomeAborted error. On success Send returns the provider's id for
	// the message. Every error is a *SendError.
	Send(ctx context.Context, m Message, handOver func() error) (providerID string, err error)
}

// Outcome classifies why a send did not succeed, which decides what the
// worker may do next.
type Outcome int

const (
	// OutcomeTemporary: nothing was accepted and trying later may work
	// (SMTP 4xx, connection refused, a timeout before the data).
	OutcomeTemporary Outcome = iota + 1
	// OutcomePermanent: the provider refused the message for good (SMTP
	// 5xx, unknown recipient). Retrying cannot help.
	OutcomePermanent
	// OutcomeAmbiguous: the data went out but no answer came back; the
	// provider may have accepted the message. Never retried blindly.
	OutcomeAmbiguous
	// OutcomeAborted: handOver refused, so no data went out.
	OutcomeAborted
)

func (o Outcome) String() string {
	switch o {
	case OutcomeTemporary:
		return "temporary"
	case OutcomePermanent:
		return "permanent"
	case OutcomeAmbiguous:
		return "ambiguous"
	case OutcomeAborted:
		return "aborted"
	default:
		return "unknown"
	}
}

// SendError is a classified provider failure.
type SendError struct {
	Outcome Outcome
	Code    int // SMTP reply code when the provider gave one
	Err     error

	handedOver bool // the lease check passed; never retried inside Send
}

func (e *SendError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("%s send failure (%d): %v", e.Outcome, e.Code, e.Err)
	}
	return fmt.Sprintf("%s send failure: %v", e.Outcome, e.Err)
}

func (e *SendError) Unwrap() error { return e.Err }

// outcomeOf returns the classification of err, treating an unclassified
// error as ambiguous: when in doubt, do not send again.
func outcomeOf(err error) (Outcome, int) {
	var se *SendError
	if errors.As(err, &se) {
		return se.Outcome, se.Code
	}
	return OutcomeAmbiguous, 0
}
