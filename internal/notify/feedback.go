package notify

import "time"

// FeedbackKind is what a provider reports about a message after it
// accepted it, through its webhooks.
type FeedbackKind string

const (
	FeedbackDelivered  FeedbackKind = "delivered"  // the receiving server took it
	FeedbackDeferred   FeedbackKind = "deferred"   // a temporary failure; the provider keeps trying
	FeedbackBounced    FeedbackKind = "bounced"    // a permanent failure (hard bounce): the address is dead
	FeedbackComplained FeedbackKind = "complained" // the recipient marked it as spam
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
