// Package testmail is test mode's provider (docs/testmode.md): it takes
// the messages of test keys' notifications as a provider would, with an
// id of its own for each, and sends them nowhere: it opens no
// connection. The worker routes every test delivery to it and nothing
// else; no configuration names it, so none can route a test delivery
// elsewhere. What a magic recipient at mail.TestDomain asks for
// (FeedbackOf) the reconciler reports afterwards through the feedback
// path the providers' webhooks take.
package testmail

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// kept bounds the messages a Provider remembers (Taken), the newest.
const kept = 1000

// Provider is the test provider: a mail.Provider without a network.
type Provider struct {
	mu    sync.Mutex
	taken []mail.Message
}

// New returns a test provider.
func New() *Provider { return &Provider{} }

// Send takes m after its hand-over (the worker's last lease check, as
// for any provider) and answers with the message's id: "test_" and our
// Message-ID's local part, the same for every attempt at one delivery.
func (p *Provider) Send(_ context.Context, m mail.Message, handOver func() error) (string, error) {
	if err := handOver(); err != nil {
		return "", &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageData, Err: err}
	}
	p.mu.Lock()
	if len(p.taken) == kept {
		p.taken = p.taken[1:]
	}
	p.taken = append(p.taken, m)
	p.mu.Unlock()
	return ProviderID(m.MessageID), nil
}

// Probe succeeds: the test provider is always up.
func (p *Provider) Probe(context.Context) error { return nil }

// Taken returns the messages this process's test provider took, oldest
// first (at most the last 1000).
func (p *Provider) Taken() []mail.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]mail.Message(nil), p.taken...)
}

// ProviderID is the test provider's id for the message of Message-ID
// messageID.
func ProviderID(messageID string) string {
	local, _, _ := strings.Cut(messageID, "@")
	return "test_" + local
}

// The magic recipients' local parts (before any +label): what each makes
// the test provider report.
var magic = map[string]struct {
	kind   mail.FeedbackKind
	detail string
}{
	"delivered":    {mail.FeedbackDelivered, "test mode: delivered"},
	"bounced":      {mail.FeedbackBounced, "test mode: 550 5.1.1 the mailbox does not exist (a hard bounce)"},
	"complained":   {mail.FeedbackComplained, "test mode: the recipient marked the message as spam"},
	"delayed":      {mail.FeedbackDeferred, "test mode: 451 4.7.1 try again later (the provider keeps trying)"},
	"unsubscribed": {mail.FeedbackUnsubscribed, "test mode: the recipient unsubscribed"},
}

// MagicLocalParts are the local parts of the magic recipients (magic's
// keys, sorted).
var MagicLocalParts = slices.Sorted(maps.Keys(magic))

// EventPrefix starts the id of every event the test provider reports:
// its id is EventPrefix and the delivery's id, one event per delivery.
const EventPrefix = "test:"

// FeedbackOf is the event the test provider reports about the test
// delivery deliveryID to recipient, whose message had our Message-ID
// messageID and the test provider's id providerMessageID, as a
// provider's webhook would (bounced@sekali.test: a hard bounce); false
// for a recipient that asks for none: any other address, at the test
// domain or not, is taken and nothing more.
func FeedbackOf(deliveryID, recipient, messageID, providerMessageID string, at time.Time) (mail.Feedback, bool) {
	local, domain, ok := strings.Cut(recipient, "@")
	if !ok || domain != mail.TestDomain {
		return mail.Feedback{}, false
	}
	local, _, _ = strings.Cut(local, "+")
	m, ok := magic[local]
	if !ok {
		return mail.Feedback{}, false
	}
	return mail.Feedback{
		Provider: mail.TestProvider, EventID: EventPrefix + deliveryID, Kind: m.kind,
		ProviderMessageID: providerMessageID, MessageID: messageID, Recipient: recipient, At: at, Detail: m.detail,
	}, true
}

// Lookup is the reconciler's look-up at the test provider, for a test
// delivery whose worker stopped after its hand-over: the test provider
// keeps nothing another process can search, so the message is not
// there, and the delivery goes to the test provider again, which mails
// nobody whatever it is given.
type Lookup struct{}

// Find answers not found.
func (Lookup) Find(context.Context, mail.Query) (string, bool, error) { return "", false, nil }
