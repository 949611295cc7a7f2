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

// complete applies every job's step: the outcomes of the attempts on
// their own rows in one statement (notify.CompleteAll), the writes on
// rows the claim did not take and the history entries each alone, then
// what each step counts, logs and tells asynq (job.err).
func (w *Worker) complete(ctx context.Context, jobs []*job) {
	if w.completeAll(ctx, jobs) {
		failpoint.Inject("after-sent")
	}
	for _, j := range jobs {
		if j.step == nil {
			// Cannot happen: every job is decided before its task ends.
			j.decide(step{result: resultRaced, answer: answerWait, err: errors.New("no step was decided"),
				waitBase: time.Second, waitSpread: time.Second})
		}
		if j.step.write != writeNothing && !onOwnRow(j.step.write) {
			w.writeAlone(ctx, j)
		}
		w.account(ctx, j)
	}
}

// onOwnRow reports whether write is a transition of an attempt's own
// row, under its lease (CompleteAll).
func onOwnRow(wr write) bool {
	switch wr {
	case writeSent, writeHeld, writeRetry, writeFailed, writeAmbiguous:
		return true
	}
	return false
}

// outcomeOfWrite is the notify.Outcome a write on an attempt's own row
// records.
var outcomeOfWrite = map[write]notify.Outcome{
	writeSent: notify.OutcomeSent, writeHeld: notify.OutcomeHeld, writeRetry: notify.OutcomeRetry,
	writeFailed: notify.OutcomeFailed, writeAmbiguous: notify.OutcomeAmbiguous,
}

// completeAll writes the outcomes of the attempts on their own rows in
// one statement; an attempt whose row another took (fenced out) writes
// nothing more but the duplicate it was. It reports whether it recorded
// a sent.
func (w *Worker) completeAll(ctx context.Context, jobs []*job) (sent bool) {
	var cs []notify.Change
	var own []*job
	for _, j := range jobs {
		if j.step == nil || !onOwnRow(j.step.write) || !j.claimed {
			continue
		}
		if j.step.write == writeSent {
			failpoint.Inject("after-accept")
		}
		cs = append(cs, notify.Change{Leased: notify.Leased{ID: j.p.DeliveryID, Lease: j.lease}, Outcome: outcomeOfWrite[j.step.write],
			Reason: j.step.reason, Provider: j.provider(), Refund: j.step.refund, Pin: j.step.pin,
			ProviderID: j.step.providerID, Language: j.language})
		own = append(own, j)
	}
	if len(cs) == 0 {
		return false
	}
	held, err := notify.CompleteAll(ctx, w.plans, cs)
	w.metrics.batchSize.WithLabelValues("complete").Observe(float64(len(cs)))
	for i, j := range own {
		switch {
		case err != nil:
			j.step = &step{result: resultDBError, retry: "database", answer: answerRetry,
				err: fmt.Errorf("record the outcome of delivery %s: %w", j.p.DeliveryID, err)}
		case !held[i]:
			// Another worker, or the reconciler, has the row: this attempt
			// writes nothing more.
			fo := fencedOut(j.step.attrs)
			j.step = &fo
			w.writeAlone(ctx, j)
		case j.step.write == writeSent:
			j.recordedSent, sent = true, true
		}
	}
	return sent
}

// writeAlone makes the write of a job whose step is not an outcome on its
// own row: a transition of a row the claim did not take (conditional on
// what the claim saw: raced when it changed), or a history entry, which
// is only logged when it cannot be written (the task's result does not
// depend on it).
func (w *Worker) writeAlone(ctx context.Context, j *job) {
	actor := w.cfg.WorkerID
	historyOnly := func(event string, detail map[string]string) {
		taskID, _ := asynq.GetTaskID(ctx)
		detail["task_id"] = taskID
		if err := notify.RecordEvent(ctx, w.db, j.row, event, actor, detail); err != nil {
			j.l.set(slog.String("history_error", err.Error()))
		}
	}
	var err error
	switch s := j.step; s.write {
	case writeNoteAmbiguous:
		if err := notify.NoteAmbiguous(ctx, w.db, j.row.ID, s.reason, actor); err != nil {
			j.l.set(slog.String("note_error", err.Error()))
		}
	case writeExpired:
		err = notify.ExpirePending(ctx, w.db, j.row.ID, w.cfg.MaxAge, s.reason, actor)
	case writeSuppressed:
		err = notify.SuppressPending(ctx, w.db, j.row.ID, actor)
	case writeUnsubscribed:
		err = notify.SuppressUnsubscribed(ctx, w.db, j.row.ID, actor)
	case writeBlocked:
		historyOnly("blocked", map[string]string{"reason": s.reason})
	case writeDuplicate:
		// Duplicates caught by the cache or the lock are only counted and
		// logged: writing them down would cost the database round trip
		// those layers exist to save.
		historyOnly("duplicate_suppressed", map[string]string{"layer": s.duplicate})
	}
	switch {
	case err == nil:
	case errors.Is(err, notify.ErrRaced):
		j.step = &step{result: resultRaced, answer: answerWait, err: err, waitBase: 500 * time.Millisecond, waitSpread: 500 * time.Millisecond}
	default:
		j.step = &step{result: resultDBError, retry: "database", answer: answerRetry,
			err: fmt.Errorf("record the outcome of delivery %s: %w", j.row.ID, err)}
	}
}

// account counts j's step, sets its log line, does what it asks of the
// worker (the breaker, the pace, the cache) and what asynq is told
// (j.err).
func (w *Worker) account(ctx context.Context, j *job) {
	s := j.step
	j.l.set(s.attrs...)
	if j.batch != "" {
		j.l.set(slog.String("batch", j.batch), slog.Int("batch_size", j.batchSize))
	}
	if s.outcome != "" {
		w.metrics.deliveries.WithLabelValues(j.row.Template, s.outcome, modeOf(j.row)).Inc()
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
	if s.cacheSent && j.lockToken == "" {
		if err := w.lock.CacheSent(ctx, j.p.KeyHash); err != nil {
			j.l.set(slog.String("cache_error", err.Error()))
		}
	}
	if j.lockLost.Load() {
		w.metrics.lockExpired.Inc()
	}
	if r := j.route; r != nil {
		if j.recordedSent {
			r.health.Sent()
		}
		if s.providerDown != nil {
			w.providerUnavailable(ctx, r, s.providerDown)
		}
		if s.throttle != nil {
			w.throttled(ctx, j.l, r, *s.throttle)
		}
	}
	j.l.result = s.result
	if s.to != "" {
		j.l.set(slog.String("to_status", string(s.to)))
	}
	switch s.answer {
	case answerRetry, answerSkip:
		j.err = s.err
	case answerWait:
		j.err = wait(s.err, s.waitBase, s.waitSpread)
	case answerProviderWait:
		j.err = w.providerWait(s.err)
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
