package mail

import (
	"context"
	"errors"
	"time"
)

// FeedbackKind is what a provider reports about a message after it
// accepted it, through its webhooks.
type FeedbackKind string

const (
	FeedbackDelivered  FeedbackKind = "delivered"  // the receiving server took it
	FeedbackDeferred   FeedbackKind = "deferred"   // a temporary failure; the provider keeps trying
	FeedbackBounced    FeedbackKind = "bounced"    // a permanent failure (hard bounce): the address is dead
	FeedbackComplained FeedbackKind = "complained" // the recipient marked it as spam
	// FeedbackUnsubscribed: the recipient left the sender's subscription
	// mail, as our own one-click link does (only test mode's provider
	// reports it so far: unsubscribed@ mail.TestDomain).
	FeedbackUnsubscribed FeedbackKind = "unsubscribed"
)

// Feedback is one provider event, its signature or credentials verified,
// in the same shape whichever provider sent it.
type Feedback struct {
	Provider          string // "resend", "postmark", "mailgun", "ses"
	EventID           string // the provider's id of this event; the same event twice has the same id
	Kind              FeedbackKind
	ProviderMessageID string // the provider's id of the message, when it gives one
	MessageID         string // our Message-ID (without angle brackets), when it echoes it
	KeyHash           string // KeyHash of the idempotency key, from the metadata we attached, when echoed
	Recipient         string // normalized (NormalizeAddress), when given
	At                time.Time
	Detail            string // the provider's reason, e.g. a bounce's diagnostic
}

// Lookup asks the mail provider whether it accepted a message: how the
// reconciler settles a send whose answer was lost.
type Lookup interface {
	// Find reports whether the provider holds the message q describes,
	// and the provider's id for it. A provider that cannot answer for
	// certain (rate limited, a 5xx, q older than it keeps messages)
	// returns an error: found=false means "not there", never "don't know".
	// An error that will stay whenever it is asked again wraps
	// ErrCannotTell.
	Find(ctx context.Context, q Query) (providerID string, found bool, err error)
}

// ErrCannotTell is wrapped by a look-up's errors that asking again will
// not clear: the send is older than the provider keeps what it
// searches, or more messages match than its search can page through.
// The reconciler then settles the send as it does for a provider without
// a look-up (the template's policy), instead of leaving it sending,
// asked again at every pass, where no operator's action reaches it.
var ErrCannotTell = errors.New("the provider's search cannot tell")

// Query describes the message of one ambiguous send.
type Query struct {
	MessageID string // the delivery's stored Message-ID, without angle brackets
	KeyHash   string // KeyHash of its idempotency key, as sent in provider metadata
	// HandedOverAt is when the data went to the provider, the latest
	// attempt's (or a time no earlier): a miss is believed only once it
	// is old enough to be searchable.
	HandedOverAt time.Time
	// Since is when the earliest attempt whose outcome is unknown was
	// handed over (zero: HandedOverAt): the search covers from there, so
	// that a miss speaks for every unknown attempt.
	Since time.Time
}

// From is the earliest hand-over a search for q must cover.
func (q Query) From() time.Time {
	if q.Since.IsZero() || q.Since.After(q.HandedOverAt) {
		return q.HandedOverAt
	}
	return q.Since
}
