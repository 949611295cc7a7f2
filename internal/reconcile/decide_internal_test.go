package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
)

// searchable is a provider's look-up as decide sees it: something to
// ask. decide never calls it; the pass does.
type searchable struct{ name string }

func (searchable) Find(context.Context, mail.Query) (string, bool, error) {
	panic("decide asked a provider itself")
}

// want is what a step must say; a field left empty must be empty, and
// the reason must contain reason.
type want struct {
	ask        bool
	decision   string
	to         notify.Status
	at         string
	pinned     bool
	providerID string
	reason     string
}

func (w want) check(t *testing.T, name string, s step) {
	t.Helper()
	got := want{ask: s.ask != nil, decision: s.decision, to: s.to, at: s.at, pinned: s.pinned, providerID: s.providerID, reason: w.reason}
	if got != w {
		t.Errorf("%s:\n got %+v\nwant %+v", name, got, w)
	}
	if !strings.Contains(s.reason, w.reason) {
		t.Errorf("%s: reason %q, want it to say %q", name, s.reason, w.reason)
	}
	if s.ask != nil && (s.decision != "" || s.to != "") {
		t.Errorf("%s: a step that asks first decided %q (to %q)", name, s.decision, s.to)
	}
	if s.ask == nil && !slices.Contains(allDecisions, s.decision) {
		t.Errorf("%s: decision %q is not one the report counts", name, s.decision)
	}
}

// Every way a stale sending row can be settled, decided from a table:
// whether to ask its provider first, and with the answer what to write,
// where, and why. No database, no provider.
func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { at := now.Add(-d); return &at }
	mailpit := searchable{"mailpit"}
	smtp := Provider{Name: "smtp", Lookup: mailpit}
	resend := Provider{Name: "resend", DedupWindow: time.Hour}
	relay := Provider{Name: "relay"}                                        // neither a look-up nor a key
	both := Provider{Name: "both", Lookup: mailpit, DedupWindow: time.Hour} // a look-up and a key: the look-up settles
	all := []Provider{smtp, resend, relay, both}
	const messageID = "0123abcd@shop.example"

	// row is a delivery whose worker's lease expired: handed over that
	// long ago (nil: never), to provider, pinned there or not.
	row := func(provider string, handedOver *time.Time, pinned bool) notify.Delivery {
		return notify.Delivery{ID: uuid.New(), Template: "order-confirmation", IdempotencyKey: "order-confirmation:o:ana@example.com",
			Status: notify.StatusSending, CreatedAt: now.Add(-3 * time.Hour), HandedOverAt: handedOver, Provider: provider,
			ProviderPinned: pinned, MessageID: messageID}
	}
	unsettled := func(d notify.Delivery, since *time.Time) notify.Delivery { d.UnsettledSince = since; return d }
	found := &answer{providerID: "mailpit-42", found: true}
	missing := &answer{}
	failed := &answer{err: fmt.Errorf("GET /api/v1/search: 503: mailbox ana@example.com busy for %s", messageID)}
	cannotTell := &answer{err: fmt.Errorf("the send is older than the provider keeps: %w", mail.ErrCannotTell)}

	for _, tt := range []struct {
		name      string
		providers []Provider
		d         notify.Delivery
		policy    Policy
		ans       *answer
		want      want
	}{
		// Never handed over: the provider cannot have it.
		{"not handed over", all, row("smtp", nil, false), PolicyHold, nil,
			want{decision: DecisionNotHandedOver, to: notify.StatusPending, at: "smtp", reason: "before it handed the message over"}},
		{"not handed over, pinned by an earlier unknown attempt", all, row("resend", nil, true), PolicyHold, nil,
			want{decision: DecisionNotHandedOver, to: notify.StatusPending, at: "resend", pinned: true}},
		{"not handed over, to a provider not in the list", all, row("postmark", nil, false), PolicyHold, nil,
			want{decision: DecisionNotHandedOver, to: notify.StatusPending, at: "postmark"}},
		{"not handed over, no provider recorded", all, row("", nil, false), PolicyHold, nil,
			want{decision: DecisionNotHandedOver, to: notify.StatusPending, at: "smtp"}},

		// Handed over to a provider nobody here can ask: held, whatever the policy.
		{"handed over to a provider not in the list", all, row("postmark", ago(time.Minute), false), PolicyResend, nil,
			want{decision: DecisionPolicyHold, to: notify.StatusHeld, at: "postmark", reason: "not in this reconciler's PROVIDERS"}},
		{"handed over, no providers at all", nil, row("", ago(time.Minute), false), PolicyResend, nil,
			want{decision: DecisionPolicyHold, to: notify.StatusHeld, reason: "not in this reconciler's PROVIDERS"}},

		// A provider with a look-up: ask it first, then its answer decides.
		{"look-up: ask first", all, row("smtp", ago(time.Minute), false), PolicyHold, nil,
			want{ask: true, at: "smtp"}},
		{"look-up: ask the first of the list when no provider was recorded", all, row("", ago(time.Minute), false), PolicyHold, nil,
			want{ask: true, at: "smtp"}},
		{"look-up and a dedup window: the look-up settles", all, row("both", ago(time.Minute), false), PolicyHold, nil,
			want{ask: true, at: "both"}},
		{"look-up found it", all, row("smtp", ago(time.Minute), false), PolicyHold, found,
			want{decision: DecisionFound, to: notify.StatusSent, at: "smtp", providerID: "mailpit-42", reason: "holds Message-ID " + messageID}},
		{"look-up found it, pinned", all, row("smtp", ago(time.Minute), true), PolicyHold, found,
			want{decision: DecisionFound, to: notify.StatusSent, at: "smtp", providerID: "mailpit-42"}},
		{"look-up: not there", all, row("smtp", ago(time.Minute), false), PolicyHold, missing,
			want{decision: DecisionNotFound, to: notify.StatusPending, at: "smtp", reason: "no message with Message-ID " + messageID}},
		{"look-up: not there, but pinned: the pin stays", all, row("smtp", ago(time.Minute), true), PolicyHold, missing,
			want{decision: DecisionNotFound, to: notify.StatusPending, at: "smtp", pinned: true}},
		{"look-up failed: nothing decided", all, row("smtp", ago(time.Minute), false), PolicyResend, failed,
			want{decision: DecisionLookupFailed, at: "smtp", reason: "503"}},
		{"look-up cannot tell, policy hold", all, row("smtp", ago(time.Minute), false), PolicyHold, cannotTell,
			want{decision: DecisionPolicyHold, to: notify.StatusHeld, at: "smtp", reason: "look-up cannot tell"}},
		{"look-up cannot tell, policy resend", all, row("smtp", ago(time.Minute), false), PolicyResend, cannotTell,
			want{decision: DecisionPolicyResend, to: notify.StatusPending, at: "smtp", pinned: true, reason: "look-up cannot tell"}},

		// No look-up, no key: the template's policy.
		{"no look-up, policy hold", all, row("relay", ago(time.Minute), false), PolicyHold, nil,
			want{decision: DecisionPolicyHold, to: notify.StatusHeld, at: "relay", reason: "no look-up at provider relay; template policy is hold"}},
		{"no look-up, policy resend: through it alone", all, row("relay", ago(time.Minute), false), PolicyResend, nil,
			want{decision: DecisionPolicyResend, to: notify.StatusPending, at: "relay", pinned: true, reason: "template policy is resend"}},

		// A provider that refuses a second message under the key (Resend).
		{"dedupes, within its window", all, row("resend", ago(10*time.Minute), false), PolicyHold, nil,
			want{decision: DecisionDedupResend, to: notify.StatusPending, at: "resend", pinned: true, reason: "refuses a second message"}},
		{"dedupes, but it went in a batch under the batch's key: sent again in it", all, inBatch(row("resend", ago(10*time.Minute), false)), PolicyHold, nil,
			want{decision: DecisionBatchReplay, to: notify.StatusPending, at: "resend", pinned: true, reason: "in batch batch:1"}},
		{"dedupes, in a batch, past its window: the template's policy", all, inBatch(row("resend", ago(2*time.Hour), false)), PolicyHold, nil,
			want{decision: DecisionPolicyHold, to: notify.StatusHeld, at: "resend"}},
		{"dedupes, no provider recorded and it is the first of the list", []Provider{resend, smtp}, row("", ago(10*time.Minute), false), PolicyHold, nil,
			want{decision: DecisionDedupResend, to: notify.StatusPending, at: "resend", pinned: true}},
		{"dedupes, past its window, policy hold", all, row("resend", ago(2*time.Hour), false), PolicyHold, nil,
			want{decision: DecisionPolicyHold, to: notify.StatusHeld, at: "resend", reason: "no look-up at provider resend"}},
		{"dedupes, past its window, policy resend", all, row("resend", ago(2*time.Hour), false), PolicyResend, nil,
			want{decision: DecisionPolicyResend, to: notify.StatusPending, at: "resend", pinned: true}},
		{"dedupes, exactly at the end of its window", all, row("resend", ago(time.Hour), false), PolicyHold, nil,
			want{decision: DecisionPolicyHold, to: notify.StatusHeld, at: "resend"}},
		{"dedupes: the window counts from the earliest unknown attempt", all,
			unsettled(row("resend", ago(10*time.Minute), true), ago(80*time.Minute)), PolicyHold, nil,
			want{decision: DecisionPolicyHold, to: notify.StatusHeld, at: "resend"}},
		{"dedupes: an earlier unknown attempt still within the window", all,
			unsettled(row("resend", ago(10*time.Minute), true), ago(50*time.Minute)), PolicyHold, nil,
			want{decision: DecisionDedupResend, to: notify.StatusPending, at: "resend", pinned: true}},
		{"dedupes: pinned before unsettled_since was kept counts from its creation", all,
			row("resend", ago(10*time.Minute), true), PolicyHold, nil,
			want{decision: DecisionPolicyHold, to: notify.StatusHeld, at: "resend"}},
	} {
		s := decide(tt.d, tt.providers, tt.policy, messageID, tt.ans, now)
		tt.want.check(t, tt.name, s)
	}
}

// The look-up a step asks for is the provider's own, by the Message-ID
// the attempt stored and the key's hash, about the latest hand-over.
func TestDecideAsksByTheStoredMessageID(t *testing.T) {
	t.Parallel()
	now := time.Now()
	handed := now.Add(-time.Minute)
	l := searchable{"postmark"}
	d := notify.Delivery{IdempotencyKey: "order-confirmation:o:ana@example.com", HandedOverAt: &handed, Provider: "postmark",
		MessageID: "stored@old-sender.example"}
	s := decide(d, []Provider{{Name: "smtp"}, {Name: "postmark", Lookup: l}}, PolicyHold, d.MessageID, nil, now)
	want := mail.Query{MessageID: "stored@old-sender.example", KeyHash: mail.KeyHash(d.IdempotencyKey), HandedOverAt: handed}
	if s.ask != l || s.query != want {
		t.Errorf("asks %v with %+v, want postmark's look-up with %+v", s.ask, s.query, want)
	}
}

// A failed look-up's error may quote the provider's reply, and that the
// recipient's address: the reason keeps the delivery's Message-ID (which
// looks like an address) and hides the rest.
func TestDecideRedactsTheLookupError(t *testing.T) {
	t.Parallel()
	now := time.Now()
	handed := now.Add(-time.Minute)
	const messageID = "0123abcd@shop.example"
	d := notify.Delivery{HandedOverAt: &handed, Provider: "smtp", MessageID: messageID}
	ps := []Provider{{Name: "smtp", Lookup: searchable{"mailpit"}}}
	for _, err := range []error{
		errors.New("503 from search for " + messageID + ": ana.maria@example.com over quota"),
		fmt.Errorf("%w: 10000 messages to ana.maria@example.com match %s", mail.ErrCannotTell, messageID),
	} {
		s := decide(d, ps, PolicyHold, messageID, &answer{err: err}, now)
		if strings.Contains(s.reason, "ana.maria@example.com") || !strings.Contains(s.reason, messageID) {
			t.Errorf("%s: reason %q, want the address redacted and %s kept", s.decision, s.reason, messageID)
		}
	}
}

// inBatch is d handed over in a batch at its provider.
func inBatch(d notify.Delivery) notify.Delivery {
	d.HandoverBatch = "batch:1"
	return d
}

// Every way a pending row that may have been sent and is held back (too
// old, suppressed) can be settled, decided from a table: it is never
// sent again, so only its provider's answer settles it; where nothing can
// tell, an operator must look. No database, no provider.
func TestDecideHeldBack(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	since, changed := now.Add(-2*time.Hour), now.Add(-time.Minute)
	const messageID = "0123abcd@shop.example"
	at := func(provider string) notify.Delivery {
		return notify.Delivery{Status: notify.StatusPending, Provider: provider, ProviderPinned: true, UnsettledSince: &since,
			UpdatedAt: changed, IdempotencyKey: "payment-reminder:o:e:ana@example.com", MessageID: messageID}
	}
	postmark := searchable{"postmark"}
	ps := []Provider{{Name: "resend", DedupWindow: 24 * time.Hour}, {Name: "postmark", Lookup: postmark}}
	for _, tt := range []struct {
		name string
		d    notify.Delivery
		why  notify.Verdict
		ans  *answer
		want want
	}{
		{"a look-up: asked first", at("postmark"), notify.VerdictSuppressed, nil, want{ask: true, at: "postmark"}},
		{"found: sent, whatever holds it back", at("postmark"), notify.VerdictSuppressed, &answer{found: true, providerID: "pm-1"},
			want{decision: DecisionFound, to: notify.StatusSent, at: "postmark", providerID: "pm-1", reason: "suppression list"}},
		{"not there: back to pending, unpinned on that evidence", at("postmark"), notify.VerdictTooOld, &answer{},
			want{decision: DecisionNotFound, to: notify.StatusPending, at: "postmark", reason: "DELIVERY_MAX_AGE"}},
		{"the look-up failed: asked again next pass", at("postmark"), notify.VerdictSuppressed, &answer{err: errors.New("503")},
			want{decision: DecisionLookupFailed, at: "postmark", reason: "503"}},
		{"the look-up can never tell: held", at("postmark"), notify.VerdictSuppressed, &answer{err: mail.ErrCannotTell},
			want{decision: DecisionHeldBackUnknown, to: notify.StatusHeld, at: "postmark", reason: "cannot tell"}},
		// Resend refuses a second message under the key, but sending
		// again is not asking: the recipient is suppressed.
		{"no look-up, even at a provider that deduplicates: held", at("resend"), notify.VerdictSuppressed, nil,
			want{decision: DecisionHeldBackUnknown, to: notify.StatusHeld, at: "resend", reason: "no look-up"}},
		{"a provider not in the list: held", at("mailgun"), notify.VerdictUnsubscribed, nil,
			want{decision: DecisionHeldBackUnknown, to: notify.StatusHeld, at: "mailgun", reason: "not in this reconciler's PROVIDERS"}},
	} {
		s := decideHeldBack(tt.d, tt.why, ps, messageID, tt.ans)
		tt.want.check(t, tt.name, s)
		if s.to == notify.StatusPending && (s.pinned || s.evidence != notify.EvidenceLookup) {
			t.Errorf("%s: pinned %v, evidence %q; want unpinned on the look-up's evidence", tt.name, s.pinned, s.evidence)
		}
	}
	// The search covers every unknown attempt, from the earliest; a miss
	// is believed from the row's last change, after its latest attempt.
	s := decideHeldBack(at("postmark"), notify.VerdictSuppressed, ps, messageID, nil)
	if want := (mail.Query{MessageID: messageID, KeyHash: mail.KeyHash(at("postmark").IdempotencyKey), HandedOverAt: changed, Since: since}); s.ask != postmark || s.query != want {
		t.Errorf("asks %v with %+v, want postmark's look-up with %+v", s.ask, s.query, want)
	}
}
