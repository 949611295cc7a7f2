// Package mail is the contract between the service and the mail
// providers, and nothing else: the message a provider is handed, the
// Provider interface, how a send can fail (Outcome, Stage, SendError and
// the Reply it carries), what a provider reports afterwards (Feedback),
// how the reconciler asks it about a message (Lookup), and the rules
// every side of that exchange shares: addresses, the key hash, the
// provider key, the Message-ID, redaction. Each provider is a package
// that imports this one, not the service's domain (notify), as River
// keeps rivertype apart from its client; a provider describes itself in
// one Descriptor, and internal/roster lists them.
package mail

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Message is an e-mail ready for a provider.
type Message struct {
	To             string
	Subject        string
	Text           string
	HTML           string
	MessageID      string // without angle brackets; the same on every attempt
	IdempotencyKey string
	// FromName replaces MAIL_FROM's display name (the template's, in the
	// recipient's language); "" keeps it.
	FromName string
	// ReplyTo is where the recipient's answers go (the template's); ""
	// for none: to the From address.
	ReplyTo string
	// ListUnsubscribe is the List-Unsubscribe header of a subscription
	// template's message ("<https://…>", with ", <mailto:…>" if set); ""
	// for a transactional one. With it goes List-Unsubscribe-Post:
	// ListUnsubscribePost.
	ListUnsubscribe string
}

// AutoSubmitted is the Auto-Submitted header every message carries (RFC
// 3834): auto-replies and vacation notices do not answer it.
const AutoSubmitted = "auto-generated"

// Provider hands messages to a mail provider: an SMTP relay, or an HTTP
// API with an idempotency header of its own.
type Provider interface {
	// Send delivers m. handOver is called once the provider is ready to
	// take the message data and right before that data goes out; when it
	// returns an error nothing is sent and Send returns an
	// OutcomeAborted error. On success Send returns the provider's id for
	// the message. Every error is a *SendError.
	Send(ctx context.Context, m Message, handOver func() error) (providerID string, err error)
	// Probe checks, without sending anything, that the provider would
	// take a message from us now: for SMTP, a kept session that still
	// answers, or connect, TLS and AUTH (a MAIL FROM, which a relay
	// counts as a message, only after a refusal of MAIL FROM itself); for
	// an HTTP API, a request that sends nothing. The worker probes while the provider is refusing
	// us, and starts sending again once a probe succeeds.
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
	// OutcomeThrottled: the provider refused the request for pace — an
	// HTTP 429, SES's throttling or quota errors, an SMTP reply about
	// rate or connections (internal/smtp's table) — so nothing was taken. An outside limit is
	// a pace, not a failure: the delivery waits its turn, counting no
	// attempt, opening no breaker and pinning nothing, and the provider's
	// budget (internal/pace) is paused for every worker by what the
	// answer said (SendError.Header, Reply.Text, Pause).
	OutcomeThrottled
	// OutcomeKeyInFlight: a provider that deduplicates by our key
	// (Resend) is still working on an earlier request under this key: it
	// may take that one. Asking again later gets its answer.
	OutcomeKeyInFlight
	// OutcomeKeyTaken: a provider that deduplicates by our key holds an
	// earlier request under this key, with another body: it took that one
	// (a key is only ever ours, for this delivery or this batch), so what
	// it names was sent, though no id says so.
	OutcomeKeyTaken
)

// Throttle is which of a provider's limits a refusal for pace
// (OutcomeThrottled) met, as the provider's answer says: what a shared
// pace learns from it. The provider's own classification says it (each
// provider package's table of its answers).
type Throttle string

const (
	// ThrottleUnsaid: a refusal for pace that does not say which limit
	// (an HTTP 429, "Server busy, try again later").
	ThrottleUnsaid Throttle = ""
	// ThrottleConnections: connections at once, or new connections per
	// time, from us (Postfix's "421 4.7.0 … too many connections",
	// Microsoft 365's "432 4.3.2 Concurrent connections limit exceeded"):
	// fewer connections, not fewer messages, is the cure.
	ThrottleConnections Throttle = "connections"
	// ThrottleMessages: messages (or recipients, one a message here) per
	// time (Postfix's "450 4.7.1 … too much mail", SES's "Maximum sending
	// rate exceeded", Mailgun's "recipient limit exceeded").
	ThrottleMessages Throttle = "messages"
	// ThrottleQuota: a daily or rolling quota (SES's "Daily message quota
	// exceeded", Google's "Daily user sending limit exceeded"): room comes
	// back in hours, not seconds; SendError.Pause says how long.
	ThrottleQuota Throttle = "quota"
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
	case OutcomeThrottled:
		return "throttled"
	case OutcomeKeyInFlight:
		return "key_in_flight"
	case OutcomeKeyTaken:
		return "key_taken"
	default:
		return "unknown"
	}
}

// Stage is how far an exchange with the provider got when it failed, in
// SMTP's terms, which every provider maps onto. A failure before
// StageData never reached the provider's acceptance of the recipient, so
// it does not count as an attempt.
type Stage string

const (
	StageConnect   Stage = "connect"   // dial, TLS, greeting, EHLO; an HTTP request that never got an answer
	StageAuth      Stage = "auth"      // credentials
	StageSender    Stage = "sender"    // MAIL FROM; an HTTP provider refusing our sender or domain
	StageRecipient Stage = "recipient" // RCPT TO; an HTTP provider refusing the address
	StageData      Stage = "data"      // DATA, the message, and the reply to it
)

// Protocol is the protocol a Reply came in.
type Protocol string

const (
	ProtocolSMTP Protocol = "smtp"
	ProtocolHTTP Protocol = "http"
)

// Reply is what the provider answered, in its own protocol's terms: an
// SMTP reply code with the enhanced status code it gave, or an HTTP
// status. The zero Reply is no answer at all.
type Reply struct {
	Protocol Protocol
	Code     int    // the SMTP reply code (451, 550) or the HTTP status (429, 503)
	Enhanced string // the RFC 3463 enhanced status code of an SMTP reply, e.g. "5.1.1"
	// Text is an SMTP reply's text ("Rate limit exceeded, try again
	// later"), which tells a rate reply from others; "" for HTTP.
	Text string
}

// SMTPReply is an SMTP server's reply code and enhanced status code.
func SMTPReply(code int, enhanced string) Reply {
	return Reply{Protocol: ProtocolSMTP, Code: code, Enhanced: enhanced}
}

// HTTPStatus is an HTTP API's status code.
func HTTPStatus(code int) Reply { return Reply{Protocol: ProtocolHTTP, Code: code} }

// String is "smtp 550 5.1.1", "http 429", or "" for no answer.
func (r Reply) String() string {
	if r.Code == 0 {
		return ""
	}
	s := string(r.Protocol) + " " + strconv.Itoa(r.Code)
	if r.Enhanced != "" {
		s += " " + r.Enhanced
	}
	return s
}

// SendError is a classified provider failure.
type SendError struct {
	Outcome Outcome
	Stage   Stage
	Reply   Reply // the provider's answer, when it gave one
	Err     error

	// HandedOver: the last lease check passed, so the data may have
	// gone out; a provider never retries such a send by itself.
	HandedOver bool

	// Header is an HTTP answer's header fields: a throttled request's
	// pace (retry-after, ratelimit-*), read by internal/pace.
	Header http.Header
	// Pause is how long the provider said, other than in its headers, to
	// wait before the next request (a quota named in its body: Resend's
	// daily_quota_exceeded; a date in an SMTP reply's text); 0 when it
	// said nothing.
	Pause time.Duration
	// Throttle is which limit a refusal for pace met (OutcomeThrottled
	// only).
	Throttle Throttle
}

func (e *SendError) Error() string {
	if e.Reply.Code != 0 {
		return fmt.Sprintf("%s send failure at %s (%d): %v", e.Outcome, e.Stage, e.Reply.Code, e.Err)
	}
	return fmt.Sprintf("%s send failure at %s: %v", e.Outcome, e.Stage, e.Err)
}

func (e *SendError) Unwrap() error { return e.Err }

// MayHaveAccepted reports whether the provider may have taken the
// message despite the error: an ambiguous send, or an HTTP server error
// (5xx) answered after the request went out, which says nothing certain
// about what the provider did with it (Resend's, classified unavailable
// because a retry under our key at Resend cannot send twice). Such a
// delivery stays with this provider: failover never moves it to another,
// which would deliver a second copy. Any other refusal says the message
// was not taken.
func (e *SendError) MayHaveAccepted() bool {
	return e.Outcome == OutcomeAmbiguous || e.Outcome == OutcomeKeyInFlight ||
		(e.HandedOver && e.Reply.Protocol == ProtocolHTTP && e.Reply.Code >= 500)
}

// A Batch is messages handed to a provider in one request, in order,
// under one key: the provider's idempotency key for the whole request
// where it takes one (Resend: the same key and the same messages answer
// the first request's ids), so that a batch whose answer was lost is
// sent again identical.
type Batch struct {
	Key      string
	Messages []Message
}

// BatchResult is what the provider said of one message of a batch: its
// id for the message, taken, or its refusal of that message alone.
type BatchResult struct {
	ID  string
	Err *SendError
}

// A Batcher is a provider that takes many messages in one request
// (Resend's /emails/batch, Postmark's /email/batch).
type Batcher interface {
	Provider
	// MaxBatch is the most messages one request takes.
	MaxBatch() int
	// SendBatch hands b over in one request. handOver is called right
	// before the request goes out (the last lease check of every
	// member): when it fails, nothing is sent and the error is an
	// OutcomeAborted *SendError. When the request is answered, results
	// has one entry per message, in b's order, err nil; a *SendError is
	// what befell the whole request: refused, throttled, or ambiguous
	// (no answer after it was written: every message may have been
	// taken).
	SendBatch(ctx context.Context, b Batch, handOver func() error) (results []BatchResult, err error)
}

// An AnswerObserver is told the status and header fields of each answer
// an HTTP provider gets to a request that carries messages, a success's
// included: a provider announces its pace on every answer (Resend's
// ratelimit-limit, a ratelimit-remaining of 0 before the 429 it spares),
// and SendError.Header carries only an error's.
type AnswerObserver func(status int, header http.Header)

type answerObserverKey struct{}

// WithAnswerObserver returns a context whose sends (Send, SendBatch) tell
// observe their answers, as httptrace's ClientTrace rides a request's
// context: it is per attempt, and a provider without answers of that
// kind (SMTP) never calls it. observe must be quick and safe for
// concurrent use.
func WithAnswerObserver(ctx context.Context, observe AnswerObserver) context.Context {
	return context.WithValue(ctx, answerObserverKey{}, observe)
}

// ObserveAnswer tells ctx's AnswerObserver, if any, of an answer; the
// HTTP providers' client calls it.
func ObserveAnswer(ctx context.Context, status int, header http.Header) {
	if observe, ok := ctx.Value(answerObserverKey{}).(AnswerObserver); ok && observe != nil {
		observe(status, header)
	}
}

// Limits are what a provider's account may send, as the provider itself
// reports them (SES: GetAccount's SendQuota), for the worker to set the
// provider's budget (internal/pace: Rate, Quota) from the account rather
// than from configuration alone.
type Limits struct {
	// Rate is the messages per second the account may send; 0 when the
	// provider does not say.
	Rate float64
	// Daily is how many messages it may send in a rolling 24 hours; 0
	// for no such quota, or none said.
	Daily int
	// SentDaily is how many it sent in the last 24 hours, as the
	// provider counts them (a quota's count to start from).
	SentDaily int
}

// A LimitsReporter is a provider that can say its account's Limits.
// The call sends nothing; the credentials may not allow it (an error
// then, and the configured pace stands).
type LimitsReporter interface {
	Limits(ctx context.Context) (Limits, error)
}

// ReachedRecipient reports whether the provider had accepted the
// recipient when the attempt failed; an attempt that had not does not
// count against the delivery.
func (e *SendError) ReachedRecipient() bool { return e.Stage == StageData }
