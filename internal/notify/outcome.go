package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/mail"
)

// What a finished send means for the delivery: record turns the outcome
// of Worker.deliver into one transition (transitions.go).

// record writes the outcome of deliver as the transition it calls for,
// fenced on the attempt's lease.
func (w *Worker) record(ctx context.Context, l *taskLog, a *attempt, providerID string, sendErr error) error {
	d, q := a.row, dbsqlc.New(w.db)
	if sendErr == nil {
		failpoint.Inject("after-accept")
		l.set(slog.String("provider_message_id", providerID))
		l.set(slog.String("language", a.language))
		held, err := w.sents.do(ctx, sentArgs{leased: leased{id: d.ID, lease: a.lease}, providerID: providerID, language: a.language})
		if err == nil && !held {
			err = errLeaseLost
		}
		if err != nil {
			return w.notWritten(ctx, l, d, err)
		}
		a.sent = true // cached as the lock is released
		w.finish(l, d, StatusSent, "sent")
		failpoint.Inject("after-sent")
		return nil
	}
	var re *renderError
	if errors.As(sendErr, &re) {
		// An operator's problem (fix the template or the data, then
		// retry), held in plain sight rather than failed.
		reason := "held: " + re.Error()
		if err := holdUnrenderable(ctx, q, d.ID, a.lease, reason); err != nil {
			return w.notWritten(ctx, l, d, err)
		}
		w.finish(l, d, StatusHeld, "held")
		return fmt.Errorf("%s: %w", reason, asynq.SkipRetry)
	}

	se := sendErrorOf(sendErr)
	l.set(slog.String("error_class", se.Outcome.String()), slog.String("stage", string(se.Stage)))
	l.set(replyAttrs(se.Reply)...)
	reason := truncate([]byte(sendErr.Error()), 1000)
	switch se.Outcome {
	case mail.OutcomeAborted:
		if errors.Is(sendErr, errLeaseLost) {
			return w.notWritten(ctx, l, d, errLeaseLost)
		}
		// The lock was lost before the data went out: nothing was sent,
		// so the attempt is given back, and the delivery tried again later.
		if err := release(ctx, q, d.ID, a.lease, reason, true); err != nil {
			return w.notWritten(ctx, l, d, err)
		}
		w.metrics.retries.WithLabelValues("lock_expired").Inc()
		w.finish(l, d, StatusPending, "retried")
		return sendErr

	case mail.OutcomeUnavailable:
		// The provider refuses us, not this message: the delivery waits,
		// using up nothing, and this worker stops sending until a probe
		// gets through.
		if err := release(ctx, q, d.ID, a.lease, reason, true); err != nil {
			return w.notWritten(ctx, l, d, err)
		}
		w.providerUnavailable(ctx, se)
		w.metrics.retries.WithLabelValues("provider_unavailable").Inc()
		w.finish(l, d, StatusPending, "retried")
		return w.providerWait(fmt.Errorf("%w: %s", errProviderUnavailable, mail.RedactAddresses(reason)))

	case mail.OutcomeTemporary:
		if age := time.Since(d.TryingSince); age >= w.cfg.MaxAge {
			reason = fmt.Sprintf("gave up after %s of tries (DELIVERY_MAX_AGE %s): %s", age.Round(time.Second), w.cfg.MaxAge, reason)
			if err := markFailed(ctx, q, d.ID, a.lease, reason); err != nil {
				return w.notWritten(ctx, l, d, err)
			}
			w.finish(l, d, StatusFailed, "failed")
			return fmt.Errorf("%s: %w", reason, asynq.SkipRetry)
		}
		// An attempt the provider refused before it accepted the
		// recipient does not count.
		if err := release(ctx, q, d.ID, a.lease, reason, !se.ReachedRecipient()); err != nil {
			return w.notWritten(ctx, l, d, err)
		}
		w.metrics.retries.WithLabelValues(deferredReason(se.Reply)).Inc()
		w.finish(l, d, StatusPending, "retried")
		return sendErr

	case mail.OutcomePermanent:
		if err := markFailed(ctx, q, d.ID, a.lease, reason); err != nil {
			return w.notWritten(ctx, l, d, err)
		}
		w.finish(l, d, StatusFailed, "failed")
		return fmt.Errorf("%s: %w", reason, asynq.SkipRetry)

	default: // OutcomeAmbiguous
		if err := markAmbiguous(ctx, q, d.ID, a.lease, "ambiguous: "+reason); err != nil {
			return w.notWritten(ctx, l, d, err)
		}
		w.metrics.deliveries.WithLabelValues(d.Template, "ambiguous").Inc()
		l.result = "left_for_reconciler"
		return nil
	}
}

// finish records a transition that happened.
func (w *Worker) finish(l *taskLog, d dbsqlc.NotificationDelivery, to Status, outcome string) {
	w.metrics.deliveries.WithLabelValues(d.Template, outcome).Inc()
	l.result = outcome
	l.set(slog.String("to_status", string(to)))
}

// notWritten handles an outcome write that did not apply: another worker
// owns the row now, and this one must write nothing more. A database
// error is retried: the row's lease will expire and the claim decides.
func (w *Worker) notWritten(ctx context.Context, l *taskLog, d dbsqlc.NotificationDelivery, err error) error {
	if errors.Is(err, errLeaseLost) {
		w.duplicate(l, "fencing")
		w.recordDuplicate(ctx, l, d, "fencing")
		l.result = "fenced_out"
		return nil
	}
	l.result = "db_error"
	w.metrics.retries.WithLabelValues("database").Inc()
	return fmt.Errorf("record outcome of delivery %s: %w", d.ID, err)
}

// replyAttrs are the log fields of a provider's answer, named for its
// protocol: smtp_code and smtp_enhanced for an SMTP reply, http_status
// for an HTTP one, none for no answer.
func replyAttrs(r mail.Reply) []slog.Attr {
	switch {
	case r.Code == 0:
		return nil
	case r.Protocol == mail.ProtocolHTTP:
		return []slog.Attr{slog.Int("http_status", r.Code)}
	case r.Enhanced != "":
		return []slog.Attr{slog.Int("smtp_code", r.Code), slog.String("smtp_enhanced", r.Enhanced)}
	default:
		return []slog.Attr{slog.Int("smtp_code", r.Code)}
	}
}

// deferredReason is the sekali_job_retry_total reason of a deferral:
// the protocol and class of the provider's answer (smtp_4xx, http_5xx),
// or deferred when it gave none.
func deferredReason(r mail.Reply) string {
	if r.Code == 0 || r.Protocol == "" {
		return "deferred"
	}
	return fmt.Sprintf("%s_%dxx", r.Protocol, min(max(r.Code/100, 4), 5))
}

// sendErrorOf returns the classification of err, treating an unclassified
// error as ambiguous: when in doubt, do not send again.
func sendErrorOf(err error) *mail.SendError {
	var se *mail.SendError
	if errors.As(err, &se) {
		return se
	}
	return &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Err: err}
}
