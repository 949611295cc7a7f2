package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
)

// apply does step s for a task on row d: its write, then its metrics,
// its log line's result, and what asynq is told. a is the attempt when
// the claim took the row (its lease fences the write), nil when it did
// not.
func (w *Worker) apply(ctx context.Context, l *taskLog, d notify.Delivery, a *attempt, s step) error {
	l.set(s.attrs...)
	switch err := w.write(ctx, l, d, a, s); {
	case err == nil:
	case errors.Is(err, notify.ErrLeaseLost):
		s = fencedOut(nil)
		_ = w.write(ctx, l, d, nil, s)
	case errors.Is(err, notify.ErrRaced):
		s = step{result: resultRaced, answer: answerWait, err: err, waitBase: 500 * time.Millisecond, waitSpread: 500 * time.Millisecond}
	default:
		l.result = resultDBError
		w.metrics.retries.WithLabelValues("database").Inc()
		return fmt.Errorf("record the outcome of delivery %s: %w", d.ID, err)
	}

	if s.outcome != "" {
		w.metrics.deliveries.WithLabelValues(d.Template, s.outcome, modeOf(d)).Inc()
	}
	if s.retry != "" {
		w.metrics.retries.WithLabelValues(s.retry).Inc()
	}
	if s.duplicate != "" {
		w.metrics.duplicates.WithLabelValues(s.duplicate).Inc()
	}
	if s.handedBack != "" {
		w.metrics.handedBack.WithLabelValues(s.handedBack).Inc()
	}
	if s.blocked {
		w.metrics.blocked.Inc()
	}
	if s.cacheSent {
		if err := w.lock.cacheSent(ctx, mail.KeyHash(d.IdempotencyKey)); err != nil {
			l.set(slog.String("cache_error", err.Error()))
		}
	}
	if s.write == writeSent && a != nil && a.route != nil {
		a.route.health.sent()
	}
	if s.providerDown != nil && a != nil && a.route != nil {
		w.providerUnavailable(ctx, a.route, s.providerDown)
	}
	if s.throttle != nil && a != nil && a.route != nil {
		w.throttled(ctx, l, a.route, *s.throttle)
	}
	l.result = s.result
	if s.to != "" {
		l.set(slog.String("to_status", string(s.to)))
	}

	switch s.answer {
	case answerRetry, answerSkip:
		return s.err
	case answerWait:
		return wait(s.err, s.waitBase, s.waitSpread)
	case answerProviderWait:
		return w.providerWait(s.err)
	default:
		return nil
	}
}

// write makes s's transition or history entry. A transition on the
// attempt's own row that no longer applies returns notify.ErrLeaseLost (another
// worker owns the row); a conditional one on a row the claim did not
// take, notify.ErrRaced. A history entry that cannot be written is only logged:
// the task's result does not depend on it.
func (w *Worker) write(ctx context.Context, l *taskLog, d notify.Delivery, a *attempt, s step) error {
	actor := w.cfg.WorkerID
	historyOnly := func(event string, detail map[string]string) error {
		taskID, _ := asynq.GetTaskID(ctx)
		detail["task_id"] = taskID
		if err := notify.RecordEvent(ctx, w.db, d, event, actor, detail); err != nil {
			l.set(slog.String("history_error", err.Error()))
		}
		return nil
	}
	switch s.write {
	case writeSent:
		failpoint.Inject("after-accept")
		l.set(slog.String("language", a.language))
		held, err := w.sents.Do(ctx, notify.SentArgs{Leased: notify.Leased{ID: d.ID, Lease: a.lease}, ProviderID: s.providerID, Language: a.language})
		if err == nil && !held {
			err = notify.ErrLeaseLost
		}
		if err != nil {
			return err
		}
		a.sent = true // cached as the lock is released
		failpoint.Inject("after-sent")
		return nil
	case writeHeld:
		return notify.HoldAttempt(ctx, w.db, d.ID, a.lease, s.reason)
	case writeRetry:
		return notify.Release(ctx, w.db, d.ID, a.lease, a.provider(), s.reason, s.refund, s.pin)
	case writeFailed:
		return notify.MarkFailed(ctx, w.db, d.ID, a.lease, a.provider(), s.reason)
	case writeAmbiguous:
		return notify.MarkAmbiguous(ctx, w.db, d.ID, a.lease, a.provider(), s.reason)
	case writeNoteAmbiguous:
		if err := notify.NoteAmbiguous(ctx, w.db, d.ID, s.reason, actor); err != nil {
			l.set(slog.String("note_error", err.Error()))
		}
		return nil
	case writeExpired:
		return notify.ExpirePending(ctx, w.db, d.ID, w.cfg.MaxAge, s.reason, actor)
	case writeSuppressed:
		return notify.SuppressPending(ctx, w.db, d.ID, actor)
	case writeUnsubscribed:
		return notify.SuppressUnsubscribed(ctx, w.db, d.ID, actor)
	case writeBlocked:
		return historyOnly("blocked", map[string]string{"reason": s.reason})
	case writeDuplicate:
		// Duplicates caught by the cache or the lock are only counted and
		// logged: writing them down would cost the database round trip
		// those layers exist to save.
		return historyOnly("duplicate_suppressed", map[string]string{"layer": s.duplicate})
	case writeNothing:
		return nil
	default:
		return fmt.Errorf("no such write: %d", s.write)
	}
}

// modeOf is d's mode, the mode label of sekali_deliveries_total: test
// mode's attempts are counted apart from the live ones.
func modeOf(d notify.Delivery) string {
	if d.Test {
		return "test"
	}
	return "live"
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
