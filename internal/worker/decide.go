package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// What an attempt's state calls for, decided without I/O: the worker
// reads (the claim's verdict, the provider's answer), decideUnclaimed and
// decideOutcome turn what it read into a step, and apply (apply.go) does
// the step. Every path of a task ends in one result.

// result is how a task ended, the "result" of its log line
// (docs/observability.md lists them).
type result string

const (
	resultSent                 result = "sent"
	resultRetried              result = "retried"
	resultFailed               result = "failed"
	resultHeld                 result = "held"
	resultExpired              result = "expired"    // past DELIVERY_MAX_AGE without a try
	resultSuppressed           result = "suppressed" // the recipient is on the suppression list
	resultBlocked              result = "blocked"    // an operator's block holds it back
	resultNotYet               result = "not_yet"    // to be sent later: the task comes back then
	resultLeftForReconciler    result = "left_for_reconciler"
	resultOwnedByAnotherWorker result = "owned_by_another_worker"
	resultFencedOut            result = "fenced_out" // the lease was taken over before the outcome was written
	resultRaced                result = "raced"      // changed by someone else between the claim and a write
	resultUnknownTemplate      result = "unknown_template"
	resultProviderUnavailable  result = "provider_unavailable"
	resultPaced                result = "paced"                      // the provider's budget had no request to spare: back for its turn
	resultPinnedMissing        result = "pinned_to_missing_provider" // its provider is not in this worker's PROVIDERS
	resultHandedBack           result = "handed_back"                // the worker is shutting down
	resultShutdown             result = "shutdown"                   // stopped while waiting for a concurrency slot
	resultBadPayload           result = "bad_payload"
	resultUnknownDelivery      result = "unknown_delivery"
	resultDBError              result = "db_error"
	resultRedisError           result = "redis_error"
	resultDone                 result = "done"                 // a task of many: each delivery done, or back in a task of its own
	resultReplayPutOff         result = "batch_replay_put_off" // its batch cannot be sent again whole now
	resultLeftToBatch          result = "left_to_its_batch"    // sent again in its batch, by the attempt at the batch's first member
	// resultAwaitingSettlement: held back (too old, suppressed) while it
	// may have been sent: only the provider's answer, which the
	// reconciler asks for, settles it.
	resultAwaitingSettlement result = "awaiting_settlement"
)

// duplicateResult is the result of a duplicate caught by layer (cache,
// lock, database, fencing).
func duplicateResult(layer string) result { return result("duplicate_" + layer) }

// The verdicts of notify.ClaimAll, and two of the worker's own: no such
// row, and pinned to a provider this worker does not have at all (it
// tells that from notify.VerdictPinnedElsewhere).
const (
	verdictMissing       notify.Verdict = "missing"
	verdictPinnedMissing notify.Verdict = "pinned_to_missing_provider"
)

// write is the one transition or history entry a step makes.
type write int

const (
	writeNothing write = iota
	// On the attempt's own row, fenced on its lease (transitions.go): a
	// write that no longer applies means another worker owns the row.
	writeSent
	writeHeld
	writeRetry
	writeFailed
	writeAmbiguous
	// On a row the claim did not take.
	writeNoteAmbiguous // a note in the history: the reconciler decides
	writeExpired       // pending -> failed, if still pending and too old
	writeSuppressed    // pending (or a dead attempt's sending) -> suppressed, if still so
	writeUnsubscribed  // pending -> suppressed, if still pending and still unsubscribed
	writeBlocked       // a "blocked" history entry
	writeDuplicate     // a "duplicate_suppressed" history entry
)

// answer is what asynq is told about the task.
type answer int

const (
	answerDone         answer = iota // nil: finished
	answerRetry                      // the error: retried with asynq's back-off
	answerSkip                       // SkipRetry: never again
	answerWait                       // again after a delay that is not a failure
	answerProviderWait               // again after the provider's next probe
)

// step is what an attempt's state calls for.
type step struct {
	write      write
	to         notify.Status // the status write leaves the row in, for the log
	providerID string        // writeSent: the provider's id for the message
	reason     string        // the row's last_error and the history's detail
	refund     bool          // writeRetry: the attempt does not count
	pin        bool          // writeRetry: the provider may have the message; the delivery stays with it

	result     result
	outcome    string // sekali_deliveries_total{outcome}
	retry      string // sekali_job_retry_total{reason}
	duplicate  string // sekali_duplicate_detected_total{layer}
	handedBack string // sekali_tasks_handed_back_total{reason}
	blocked    bool   // sekali_deliveries_blocked_total
	cacheSent  bool   // the row is sent: remember it in the cache
	// providerDown: the provider refuses our session; the worker stops
	// sending until a probe gets through.
	providerDown *mail.SendError
	// throttle: the provider refused the request for pace; what it said
	// slows or pauses its budget for every worker.
	throttle *pace.Signal

	answer     answer
	err        error         // what asynq gets, unless answerDone
	waitBase   time.Duration // answerWait: the delay, plus up to waitSpread
	waitSpread time.Duration

	attrs []slog.Attr // for the task's log line
}

// decideUnclaimed is what a task whose claim took nothing does, by the
// claim's verdict on the row d (only its ID when there is no such row);
// keyHash is the task's, now the time of the claim.
func decideUnclaimed(v notify.Verdict, d notify.Delivery, keyHash string, maxAge time.Duration, now time.Time) step {
	switch v {
	case verdictMissing:
		return step{result: resultUnknownDelivery, answer: answerSkip,
			err: fmt.Errorf("delivery %s does not exist: %w", d.ID, asynq.SkipRetry)}
	case notify.VerdictNotTask:
		return step{result: resultBadPayload, answer: answerSkip,
			err: fmt.Errorf("task key hash %s does not match delivery %s: %w", keyHash, d.ID, asynq.SkipRetry)}
	case notify.VerdictSettled:
		return step{write: writeDuplicate, duplicate: "database", result: duplicateResult("database"),
			cacheSent: d.Status == notify.StatusSent}
	case notify.VerdictLeased:
		return step{write: writeDuplicate, duplicate: "database", result: resultOwnedByAnotherWorker}
	case notify.VerdictHandedOver:
		// The previous attempt died after the data went out. Sending now
		// could be the second e-mail; the reconciler asks the provider.
		return step{write: writeNoteAmbiguous, result: resultLeftForReconciler, outcome: "ambiguous",
			reason: "ambiguous: a previous attempt stopped after handing the message to the provider; left for the reconciler"}
	case notify.VerdictNotYet:
		// Early: a task enqueued before its time (the queue's own is
		// scheduled for it). It comes back then, plus a moment, which is
		// not a failure; nothing is written.
		wait := time.Second
		if d.NotBefore != nil {
			wait = max(d.NotBefore.Sub(now), 0) + 100*time.Millisecond
		}
		return step{result: resultNotYet, answer: answerWait, err: errNotYet, waitBase: wait, waitSpread: 400 * time.Millisecond}
	case notify.VerdictUnknownTemplate:
		// An older worker during a rolling deploy: the delivery is not
		// this worker's to fail. It waits for one that knows the template.
		return step{result: resultUnknownTemplate, handedBack: "unknown_template",
			answer: answerWait, err: errUnknownTemplate, waitBase: unknownTemplateWait, waitSpread: 2 * unknownTemplateWait}
	case notify.VerdictTooOld, notify.VerdictSuppressed, notify.VerdictUnsubscribed:
		if d.MayHaveBeenSent() {
			// Expiring or suppressing it would tell the shop "not sent" of
			// a message its provider may hold; the reconciler asks it.
			return step{result: resultAwaitingSettlement, attrs: []slog.Attr{slog.String("held_back", string(v))}}
		}
		return decideHeldBack(v, d, maxAge)
	case notify.VerdictBlocked:
		// The row stays pending; the reconciler queues it again once the
		// block has expired.
		return step{write: writeBlocked, result: resultBlocked, blocked: true,
			reason: "an operator's block on the key or recipient holds it back"}
	case notify.VerdictPinnedElsewhere:
		// Its outcome at the provider it is pinned to is unknown, and that
		// one does not take mail from this worker now: it waits for it,
		// unwritten, as every delivery waits while all providers are down.
		reason := fmt.Sprintf("pinned to provider %q, which may hold an earlier attempt and does not take mail from this worker now", d.Provider)
		return step{result: resultProviderUnavailable, handedBack: "provider_unavailable", answer: answerProviderWait,
			err: fmt.Errorf("%w: %s", errProviderUnavailable, reason), attrs: []slog.Attr{slog.String("pinned_to", d.Provider)}}
	case verdictPinnedMissing:
		// Taken out of PROVIDERS, or an older list: no worker of this
		// configuration can send it, and another provider must not. An
		// operator decides (runbook 1.8); meanwhile it waits, loudly.
		return step{result: resultPinnedMissing, handedBack: string(resultPinnedMissing), answer: answerWait,
			err:      fmt.Errorf("%w: %q", errPinnedToMissingProvider, d.Provider),
			waitBase: unknownTemplateWait, waitSpread: 2 * unknownTemplateWait,
			attrs: []slog.Attr{slog.String("pinned_to", d.Provider)}}
	default: // a verdict this build does not know: leave the row alone
		return step{result: resultRaced, answer: answerWait, err: fmt.Errorf("claim verdict %q unknown to this worker", v),
			waitBase: 500 * time.Millisecond, waitSpread: 500 * time.Millisecond}
	}
}

// decideHeldBack is what a delivery the claim holds back (v: too old,
// suppressed, unsubscribed) and that no provider may hold calls for:
// it is expired or suppressed.
func decideHeldBack(v notify.Verdict, d notify.Delivery, maxAge time.Duration) step {
	switch v {
	case notify.VerdictTooOld:
		reason := fmt.Sprintf("expired: not sent within DELIVERY_MAX_AGE (%s)", maxAge)
		if d.LastError != "" {
			reason += "; last error: " + textrule.Clip(d.LastError, 900)
		}
		return step{write: writeExpired, to: notify.StatusFailed, reason: reason, result: resultExpired, outcome: "failed",
			answer: answerSkip, err: fmt.Errorf("%s: %w", reason, asynq.SkipRetry)}
	case notify.VerdictSuppressed:
		return step{write: writeSuppressed, to: notify.StatusSuppressed, result: resultSuppressed, outcome: "suppressed"}
	}
	return step{write: writeUnsubscribed, to: notify.StatusSuppressed, result: resultSuppressed, outcome: "suppressed"}
}

// decideOutcome is what a finished send calls for: its error (nil: the
// provider accepted the message), on the claimed row d, at now. dedupes
// says the provider refuses a second message under the delivery's key
// (Resend, within its window): only then may an answer that leaves the
// message possibly taken (a 5xx after the request was written) be sent
// again at once; with any other provider it is left for the reconciler,
// which asks the provider first.
func decideOutcome(d notify.Delivery, providerID string, sendErr error, now time.Time, maxAge time.Duration, dedupes bool) step {
	if sendErr == nil {
		return step{write: writeSent, to: notify.StatusSent, providerID: providerID, result: resultSent, outcome: "sent",
			attrs: []slog.Attr{slog.String("provider_message_id", providerID)}}
	}
	var re *renderError
	if errors.As(sendErr, &re) {
		return decideUnrenderable(re)
	}

	se := sendErrorOf(sendErr)
	attrs := append([]slog.Attr{slog.String("error_class", se.Outcome.String()), slog.String("stage", string(se.Stage))}, replyAttrs(se.Reply)...)
	if se.Outcome == mail.OutcomeKeyTaken {
		// The provider holds a request under this key, with another body:
		// it took that one (the key was only ever this delivery's, or its
		// batch's), so the message was sent, though no id says so.
		return step{write: writeSent, to: notify.StatusSent, result: resultSent, outcome: "sent", attrs: append(attrs, slog.Bool("key_taken", true))}
	}
	reason := textrule.Clip(sendErr.Error(), 1000)
	retried := func(refund bool, label string) step {
		return step{write: writeRetry, to: notify.StatusPending, reason: reason, refund: refund, pin: se.MayHaveAccepted(), result: resultRetried,
			outcome: "retried", retry: label, answer: answerRetry, err: sendErr, attrs: attrs}
	}
	failed := func(reason string) step {
		if d.ProviderPinned {
			// This answer speaks for this attempt alone: an earlier one's
			// outcome at the provider is unknown, and "failed" would say
			// none was sent. An operator checks.
			since, _ := d.UnknownSince()
			reason = fmt.Sprintf("held: refused now (%s), but an attempt handed over to provider %q at %s has no known outcome: check its log, then mark sent, or retry with unpin",
				reason, d.Provider, since.UTC().Format(time.RFC3339))
			return step{write: writeHeld, to: notify.StatusHeld, reason: reason, result: resultHeld, outcome: "held",
				answer: answerSkip, err: fmt.Errorf("%s: %w", reason, asynq.SkipRetry), attrs: attrs}
		}
		return step{write: writeFailed, to: notify.StatusFailed, reason: reason, result: resultFailed, outcome: "failed",
			answer: answerSkip, err: fmt.Errorf("%s: %w", reason, asynq.SkipRetry), attrs: attrs}
	}
	ambiguous := func() step {
		s := step{write: writeAmbiguous, reason: "ambiguous: " + reason, result: resultLeftForReconciler, outcome: "ambiguous", attrs: attrs}
		if se.Reply.Protocol == mail.ProtocolHTTP && se.Reply.Code >= 500 {
			// A server error answered: the provider is unwell. The
			// worker stops sending until a probe gets through, and the
			// reconciler settles this one.
			s.providerDown = se
		}
		return s
	}
	if se.Outcome == mail.OutcomeKeyInFlight {
		// An earlier request under its key (its own, or its batch's) is
		// still in flight at a provider that refuses a second one under
		// it: asking again later, under the same key, gets that one's
		// answer. Pinned there: it may be taken.
		return retried(true, deferredReason(se.Reply))
	}
	if se.MayHaveAccepted() && se.Outcome != mail.OutcomeAmbiguous && !dedupes {
		// Sending it again could deliver a second e-mail: a provider that
		// does not refuse a second message under our key must be asked.
		return ambiguous()
	}
	switch se.Outcome {
	case mail.OutcomeThrottled:
		// An outside limit is a pace: nothing was taken. The delivery
		// waits its turn, counting no attempt, pinning nothing and opening
		// no breaker; the answer paces every worker.
		sig := throttleSignal(se, now)
		s := retried(true, "throttled")
		s.pin, s.result, s.throttle = false, resultPaced, &sig
		s.answer, s.waitBase, s.waitSpread = answerWait, sig.Pause, paceSpread(sig.Pause)
		s.err = fmt.Errorf("%w: %s", errPaced, mail.RedactAddresses(reason))
		return s
	case mail.OutcomeAborted:
		if errors.Is(sendErr, notify.ErrLeaseLost) {
			// Another worker has the row: this one writes nothing more.
			return fencedOut(attrs)
		}
		// The lock was lost before the data went out: nothing was sent,
		// so the attempt is given back, and the delivery tried again later.
		return retried(true, "lock_expired")
	case mail.OutcomeUnavailable:
		// The provider refuses us, not this message: the delivery waits,
		// using up nothing, and this worker stops sending until a probe
		// gets through.
		s := retried(true, "provider_unavailable")
		s.answer, s.providerDown = answerProviderWait, se
		s.err = fmt.Errorf("%w: %s", errProviderUnavailable, mail.RedactAddresses(reason))
		return s
	case mail.OutcomeTemporary:
		if age := now.Sub(d.TryingSince); age >= maxAge {
			return failed(fmt.Sprintf("gave up after %s of tries (DELIVERY_MAX_AGE %s): %s", age.Round(time.Second), maxAge, reason))
		}
		// An attempt the provider refused before it accepted the
		// recipient does not count.
		return retried(!se.ReachedRecipient(), deferredReason(se.Reply))
	case mail.OutcomePermanent:
		return failed(reason)
	default: // mail.OutcomeAmbiguous
		return ambiguous()
	}
}

// decideCachedSent: the status cache says the delivery is sent; nothing
// to do, no lock taken.
func decideCachedSent() step {
	return step{duplicate: "cache", result: duplicateResult("cache")}
}

// decideLockBusy: another worker holds the delivery's lock; it comes back
// shortly.
func decideLockBusy() step {
	return step{duplicate: "lock", retry: "lock_busy", result: duplicateResult("lock"), answer: answerWait, err: errLockBusy,
		waitBase: 500 * time.Millisecond, waitSpread: time.Second}
}

// decideRedisError: the lock could not be taken or asked: back later.
func decideRedisError(err error) step {
	return step{retry: "redis", result: resultRedisError, answer: answerRetry, err: err}
}

// decideDBError: a statement failed; the delivery comes back.
func decideDBError(err error) step {
	return step{retry: "database", result: resultDBError, answer: answerRetry, err: err}
}

// decideDrainingBeforeClaim: the worker is shutting down and the
// delivery is not claimed: another worker takes the task.
func decideDrainingBeforeClaim() step {
	return step{result: resultHandedBack, handedBack: "shutdown", answer: answerWait, err: errDraining,
		waitBase: 500 * time.Millisecond, waitSpread: 500 * time.Millisecond}
}

// decideUnrenderable holds a delivery whose template cannot render its
// stored data: an operator's problem (fix the template or the data, then
// retry), held in plain sight rather than failed.
func decideUnrenderable(err error) step {
	reason := "held: " + err.Error()
	return step{write: writeHeld, to: notify.StatusHeld, reason: reason, result: resultHeld, outcome: "held",
		answer: answerSkip, err: fmt.Errorf("%s: %w", reason, asynq.SkipRetry)}
}

// errReplayPutOff: the batch could not be sent again whole now.
var errReplayPutOff = errors.New("its batch cannot be sent again whole now; every member waits for the next try")

// decideReplayPutOff is the step of a member of a batch sent again whose
// batch cannot go whole now: back to pending, still pinned, the attempt
// not counted, and the batch's task again after a wait.
func decideReplayPutOff(why string) step {
	reason := errReplayPutOff.Error() + ": " + why
	return step{write: writeRetry, to: notify.StatusPending, reason: reason, refund: true, pin: true, result: resultReplayPutOff,
		outcome: "retried", retry: "batch_replay", answer: answerWait, err: fmt.Errorf("%w: %s", errReplayPutOff, why),
		waitBase: 2 * time.Second, waitSpread: 2 * time.Second}
}

// decideLeftToBatch is the step of a delivery whose outcome is unknown in
// batch at its provider, met in a task other than the batch's: back to
// pending, pinned, uncounted, and done here; the batch's own task sends
// it again, whole.
func decideLeftToBatch(batch string) step {
	reason := "sent again only in its batch " + batch + ", whole, by the batch's task"
	return step{write: writeRetry, to: notify.StatusPending, reason: reason, refund: true, pin: true, result: resultLeftToBatch}
}

// fencedOut is the step of an attempt whose lease another worker took
// over before its outcome was written: it writes nothing more but the
// duplicate it was in the history.
func fencedOut(attrs []slog.Attr) step {
	return step{write: writeDuplicate, duplicate: "fencing", result: resultFencedOut, attrs: attrs}
}

// decidePastResendWindow holds a claimed attempt at row d that would go
// to provider (route) although an earlier attempt there, handed over at
// d.UnsettledSince (its creation, if a release before that column
// pinned it), may have been accepted, once resend (the window in which
// that provider refuses a second message under our key) has passed
// since: sending again could then deliver a second e-mail. past is false
// when the attempt may go ahead.
func decidePastResendWindow(d notify.Delivery, route string, resend time.Duration, now time.Time) (s step, past bool) {
	if resend <= 0 || !d.ProviderPinned || d.Provider != route {
		return step{}, false
	}
	since, unknown := d.UnknownSince()
	if !unknown || now.Sub(since) < resend {
		return step{}, false
	}
	reason := fmt.Sprintf("held: an attempt handed over to provider %q at %s may have been accepted, and the %s in which it refuses a second message under this delivery's key have passed: sending again could deliver a second e-mail; check the provider's log, then mark sent, or retry with unpin if it does not have the message",
		route, since.UTC().Format(time.RFC3339), resend)
	return step{write: writeHeld, to: notify.StatusHeld, reason: reason, result: resultHeld, outcome: "held",
		answer: answerSkip, err: fmt.Errorf("%s: %w", reason, asynq.SkipRetry)}, true
}

// decideDraining: the worker began shutting down while this attempt's
// claim ran. Nothing was sent; rather than start a send the shutdown may
// cut before its outcome is written, the row goes back to pending, the
// attempt not counted, and the task to another worker.
func decideDraining() step {
	return step{write: writeRetry, to: notify.StatusPending, reason: errDraining.Error(), refund: true, result: resultHandedBack,
		handedBack: "shutdown", answer: answerWait, err: errDraining, waitBase: 500 * time.Millisecond, waitSpread: 500 * time.Millisecond}
}

// decideNoRoute is what a claimed attempt does when no provider may take
// it now: every provider went down since the task began, or the row is
// pinned to provider (an earlier hand-over's outcome there is unknown,
// so no other may send it) and that one is down or not in this worker's
// list. Nothing was sent: the row goes back to pending, the attempt not
// counted, and the task comes back after the next probe.
func decideNoRoute(pinned string, anyUp bool) step {
	reason := "every provider refuses us; waiting for a probe to succeed"
	if anyUp {
		reason = fmt.Sprintf("pinned to provider %q, which may hold an earlier attempt and does not take mail from this worker now; waiting for it", pinned)
	}
	return step{write: writeRetry, to: notify.StatusPending, reason: reason, refund: true, result: resultProviderUnavailable, outcome: "retried",
		retry: "provider_unavailable", answer: answerProviderWait, err: fmt.Errorf("%w: %s", errProviderUnavailable, reason)}
}
