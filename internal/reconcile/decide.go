package reconcile

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
)

// What a sending row whose lease expired, or a pending one that may have
// been sent and is held back, calls for, decided without I/O: the pass
// reads the row, decide (decideHeldBack) says whether to ask its
// provider first and, with the answer, what to write; apply
// (reconcile.go) writes it, fenced on the row as read. Each is called
// once without an answer and, when its step asks, once more with it.

// answer is what a provider's look-up said about one message.
type answer struct {
	providerID string // the provider's id for the message, when found
	found      bool
	err        error // the look-up failed; mail.ErrCannotTell when asking again will not help
}

// step is what one stale row calls for: a look-up to make first (ask),
// or a decision — counted, logged and, with a transition (to), written.
type step struct {
	// ask, when set, is the look-up to run with query before deciding:
	// decision and to are empty.
	ask   mail.Lookup
	query mail.Query

	decision   string          // one of the Decision constants
	to         notify.Status   // pending, sent or held; "" writes nothing (lookup_failed)
	at         string          // the provider the row is judged at, for the row and its history
	pinned     bool            // to pending: the next attempts go to at alone
	evidence   notify.Evidence // to pending unpinned: what says an unknown attempt was not taken
	providerID string          // to sent: the provider's id for the message
	reason     string          // the log line's, and (pending, held) last_error and the history's
}

// decide turns a stale sending row, as read, into a step. providers are
// the workers' (PROVIDERS), policy the row's template's, messageID the
// one its attempt sent under (the stored one, or as built), ans the
// look-up's answer (nil: not asked yet) and now the time it is judged at.
func decide(d notify.Delivery, providers []Provider, policy Policy, messageID string, ans *answer, now time.Time) step {
	p, known := providerOf(providers, d)
	if d.HandedOverAt == nil {
		// The provider cannot have it: sent again wherever the row's pin
		// (from an earlier unknown attempt) allows.
		return toPending(p, DecisionNotHandedOver, d.ProviderPinned,
			"the worker's lease expired before it handed the message over; safe to send")
	}
	if !known {
		// Handed to a provider this reconciler was not given (taken out
		// of PROVIDERS, or the lists differ): nobody can ask it, and no
		// policy may send again what it may hold.
		return held(p, "outcome unknown at provider "+p.Name+", which is not in this reconciler's PROVIDERS: check with it, then retry or mark sent")
	}
	if p.Lookup == nil {
		// Counted from the earliest attempt whose outcome is unknown: it,
		// not the latest, may be the one the provider took.
		earliest, _ := d.UnknownSince()
		if p.DedupWindow > 0 && now.Sub(earliest) < p.DedupWindow {
			if d.HandoverBatch != "" {
				// Its key at the provider was its batch's: the worker sends
				// it again only in that batch, identical, under that key
				// (internal/worker's replay), never alone under its own.
				return toPending(p, DecisionBatchReplay, true,
					"outcome unknown; handed over to provider "+p.Name+" in batch "+d.HandoverBatch+
						", which it refuses a second time under the batch's key: sent again in its batch, identical")
			}
			return toPending(p, DecisionDedupResend, true,
				"outcome unknown; provider "+p.Name+" refuses a second message under this delivery's key, so sending again through it is safe")
		}
		return byPolicy(p, policy, "no look-up at provider "+p.Name)
	}
	if ans == nil {
		return step{ask: p.Lookup, at: p.Name,
			query: mail.Query{MessageID: messageID, KeyHash: mail.KeyHash(d.IdempotencyKey), HandedOverAt: *d.HandedOverAt, Since: earliestOf(d)}}
	}
	switch {
	case errors.Is(ans.err, mail.ErrCannotTell):
		// Asking again will not help (older than the provider keeps, more
		// matches than it pages through): settled as without a look-up,
		// not left sending where no operator reaches it.
		return byPolicy(p, policy, "provider "+p.Name+"'s look-up cannot tell: "+redactAddresses(ans.err.Error(), messageID))
	case ans.err != nil:
		// Nothing is decided on a failed look-up: the row stays stale (and
		// counted) until the provider answers, asked again next pass. The
		// error may quote the provider's reply, and a reply the
		// recipient's address: redacted, the delivery's own Message-ID
		// (which looks like an address) kept.
		return step{decision: DecisionLookupFailed, at: p.Name, reason: redactAddresses(ans.err.Error(), messageID)}
	case !ans.found:
		// Not at p now. A delivery that was not pinned had this one
		// unknown attempt: any provider may take the next. A pinned one
		// stays pinned: its earlier unknown attempts there may lie outside
		// what this search covers.
		s := toPending(p, DecisionNotFound, d.ProviderPinned, "provider "+p.Name+" has no message with Message-ID "+messageID)
		s.evidence = notify.EvidenceLookup
		return s
	}
	return step{decision: DecisionFound, to: notify.StatusSent, at: p.Name, providerID: ans.providerID,
		reason: "provider " + p.Name + " holds Message-ID " + messageID}
}

// decideHeldBack turns a pending row that may have been sent and that
// the claim holds back (why: too old, suppressed, unsubscribed) into a
// step: it must not be sent again, so only its provider's answer settles
// it — found, it is sent; not there, it goes back to pending unpinned on
// that evidence, and the worker's next claim expires or suppresses it
// through the one door for that; where nothing can tell, it is held for
// an operator. Its latest attempt ended no later than its last change
// (UpdatedAt), from which a miss is judged.
func decideHeldBack(d notify.Delivery, why notify.Verdict, providers []Provider, messageID string, ans *answer) step {
	p, known := providerOf(providers, d)
	since := earliestOf(d)
	unknown := fmt.Sprintf("%s while an attempt handed over to provider %s at %s has no known outcome", heldBackText(why), p.Name,
		since.UTC().Format(time.RFC3339))
	switch {
	case !known:
		return heldBack(p, unknown+", and that provider is not in this reconciler's PROVIDERS: check with it, then mark sent, or retry with unpin")
	case p.Lookup == nil:
		return heldBack(p, unknown+", and it has no look-up: check its log, then mark sent, or retry with unpin")
	case ans == nil:
		return step{ask: p.Lookup, at: p.Name,
			query: mail.Query{MessageID: messageID, KeyHash: mail.KeyHash(d.IdempotencyKey), HandedOverAt: d.UpdatedAt, Since: since}}
	case errors.Is(ans.err, mail.ErrCannotTell):
		return heldBack(p, unknown+", and its look-up cannot tell ("+redactAddresses(ans.err.Error(), messageID)+"): check its log, then mark sent, or retry with unpin")
	case ans.err != nil:
		return step{decision: DecisionLookupFailed, at: p.Name, reason: redactAddresses(ans.err.Error(), messageID)}
	case !ans.found:
		return step{decision: DecisionNotFound, to: notify.StatusPending, at: p.Name, evidence: notify.EvidenceLookup,
			reason: unknown + "; provider " + p.Name + " has no message with Message-ID " + messageID + ": not sent"}
	}
	return step{decision: DecisionFound, to: notify.StatusSent, at: p.Name, providerID: ans.providerID,
		reason: unknown + "; provider " + p.Name + " holds Message-ID " + messageID + ": sent"}
}

// heldBack parks a held-back row that may have been sent for an
// operator, pinned to p.
func heldBack(p Provider, reason string) step {
	return step{decision: DecisionHeldBackUnknown, to: notify.StatusHeld, at: p.Name, reason: "held: " + reason}
}

// heldBackText says why the claim holds a delivery back.
func heldBackText(why notify.Verdict) string {
	switch why {
	case notify.VerdictTooOld:
		return "past DELIVERY_MAX_AGE"
	case notify.VerdictSuppressed:
		return "the recipient is on the suppression list"
	case notify.VerdictUnsubscribed:
		return "the recipient left subscription mail"
	}
	return string(why)
}

// earliestOf is when d's earliest unknown attempt was handed over, or
// zero.
func earliestOf(d notify.Delivery) time.Time {
	since, _ := d.UnknownSince()
	return since
}

// byPolicy settles an unknown outcome at p that no look-up can, by the
// template's policy; unknown says why nothing can tell.
func byPolicy(p Provider, policy Policy, unknown string) step {
	if policy == PolicyResend {
		return toPending(p, DecisionPolicyResend, true, "outcome unknown and "+unknown+"; template policy is resend (through it alone)")
	}
	return held(p, "outcome unknown and "+unknown+"; template policy is hold: check with the provider, then retry or mark sent")
}

// toPending takes the row back to pending at p; pinned: its next
// attempts go to p alone, since the outcome there is still unknown.
func toPending(p Provider, decision string, pinned bool, reason string) step {
	return step{decision: decision, to: notify.StatusPending, at: p.Name, pinned: pinned, reason: reason}
}

// held parks the row for an operator, pinned to p (ReconcileToHeld).
func held(p Provider, reason string) step {
	return step{decision: DecisionPolicyHold, to: notify.StatusHeld, at: p.Name, reason: reason}
}

// providerOf is the provider whose answer settles d: the one its latest
// hand-over went to, or the first of the list for a hand-over recorded
// before providers were. known is false for a provider not in the list
// (taken out of PROVIDERS): it can be asked nothing.
func providerOf(providers []Provider, d notify.Delivery) (p Provider, known bool) {
	if d.Provider == "" && len(providers) > 0 {
		return providers[0], true
	}
	for _, p := range providers {
		if p.Name == d.Provider {
			return p, true
		}
	}
	return Provider{Name: d.Provider}, false
}

// policyOf is the policy for an unknown outcome of template.
func policyOf(cfg Config, template string) Policy {
	if p, ok := cfg.Policies[template]; ok {
		return p
	}
	return cfg.DefaultPolicy
}

// redactAddresses is mail.RedactAddresses on s, except for keep.
func redactAddresses(s, keep string) string {
	if keep == "" {
		return mail.RedactAddresses(s)
	}
	parts := strings.Split(s, keep)
	for i, p := range parts {
		parts[i] = mail.RedactAddresses(p)
	}
	return strings.Join(parts, keep)
}
