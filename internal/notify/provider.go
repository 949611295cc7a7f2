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
	// Probe checks, without sending anything, that the provider would
	// take a message from us now: for SMTP, connect, TLS, AUTH and a
	// MAIL FROM that is then reset. The worker probes while the provider
	// is refusing us, and starts sending again once a probe succeeds.
	Probe(ctx context.Context) error
}

// Outcome classifies why a send did not succeed, which decides what the
// worker may do next.
type Outcome int

const (
	// OutcomeTemporary: this message was not accepted now and trying
	// later may work (a 4xx about the recipient or the message, such as
	// greylisting). The delivery is retried with a growing back-off.
	OutcomeTemporary Outcome = iota + 1
	// OutcomePermanent: the provider refused this recipient for good
	// (550 5.1.1 at RCPT, say). Retrying cannot help.
	OutcomePermanent
	// OutcomeAmbiguous: the data went out but no answer came back; the
	// provider may have accepted the message. Never retried blindly.
	OutcomeAmbiguous
	// OutcomeAborted: handOver refused, so no data went out.
	OutcomeAborted
	// OutcomeUnavailable: the provider refuses us, not this message:
	// it cannot be reached, TLS or AUTH fails, it refuses our sender,
	// throttles us, closes the session (421), or objects to our syntax
	// (5.5.x) or our set-up (5.7.x). Every delivery would meet the same
	// answer, so the delivery waits without using up anything, and the
	// worker stops sending until a probe succeeds.
	OutcomeUnavailable
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
	case OutcomeUnavailable:
		return "unavailable"
	default:
		return "unknown"
	}
}

// Stage is how far an exchange with the provider got when it failed. A
// failure before StageData never reached the provider's acceptance of the
// recipient, so it does not count as an attempt.
type Stage string

const (
	StageConnect   Stage = "connect"   // dial, TLS, greeting, EHLO
	StageAuth      Stage = "auth"      // credentials
	StageSender    Stage = "sender"    // MAIL FROM
	StageRecipient Stage = "recipient" // RCPT TO
	StageData      Stage = "data"      // DATA, the message, and the reply to it
)

// SendError is a classified provider failure.
type SendError struct {
	Outcome  Outcome
	Stage    Stage
	Code     int    // SMTP reply code when the provider gave one
	Enhanced string // RFC 3463 enhanced status code when it gave one, e.g. "5.1.1"
	Err      error

	// HandedOver: the last lease check passed, so the data may have
	// gone out; a provider never retries such a send by itself.
	HandedOver bool
}

func (e *SendError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("%s send failure at %s (%d): %v", e.Outcome, e.Stage, e.Code, e.Err)
	}
	return fmt.Sprintf("%s send failure at %s: %v", e.Outcome, e.Stage, e.Err)
}

func (e *SendError) Unwrap() error { return e.Err }

// ReachedRecipient reports whether the provider had accepted the
// recipient when the attempt failed; an attempt that had not does not
// count against the delivery.
func (e *SendError) ReachedRecipient() bool { return e.Stage == StageData }

// sendErrorOf returns the classification of err, treating an unclassified
// error as ambiguous: when in doubt, do not send again.
func sendErrorOf(err error) *SendError {
	var se *SendError
	if errors.As(err, &se) {
		return se
	}
	return &SendError{Outcome: OutcomeAmbiguous, Stage: StageData, Err: err}
}
