package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
)

// sendAll sends the messages of a task's live jobs, provider by provider
// in the order of their first job: a provider that takes batches gets
// them in requests of up to its MaxBatch (a batch sent again whole, as
// it was, under its key), any other each message in turn (SMTP: over
// the connection the provider keeps). It records each job's outcome
// (sent, providerID, sendErr) and writes none.
func (w *Worker) sendAll(ctx context.Context, jobs []*job, batch string) {
	var order []*route
	groups := map[*route][]*job{}
	for _, j := range jobs {
		if !j.live() || j.sent {
			continue
		}
		if _, ok := groups[j.route]; !ok {
			order = append(order, j.route)
		}
		groups[j.route] = append(groups[j.route], j)
	}
	for _, r := range order {
		g := groups[r]
		if !r.batches {
			for _, j := range g {
				w.sendOne(ctx, r, j)
			}
			continue
		}
		for len(g) > 0 {
			n := min(len(g), r.max)
			if batch != "" {
				n = len(g) // sent again whole
			}
			w.sendBatch(ctx, r, g[:n], batch)
			g = g[n:]
		}
	}
}

// sendOne hands j's message to r alone, its last lease check right
// before the data.
func (w *Worker) sendOne(ctx context.Context, r *route, j *job) {
	lastLeaseCheck := func() error {
		if j.lockLost.Load() {
			return errLockLost
		}
		failpoint.Inject("before-data")
		hctx, cancel := context.WithTimeout(ctx, w.cfg.LockTTL) // a hand-over later than the lease is no use
		held, err := notify.HandOverAll(hctx, w.plans, []notify.HandOverArgs{j.ho})
		cancel()
		w.metrics.batchSize.WithLabelValues("hand_over").Observe(1)
		if err != nil {
			return err
		}
		if !held[0] {
			return notify.ErrLeaseLost
		}
		failpoint.Inject("after-handover")
		w.depart(ctx, j.l, r)
		return nil
	}
	start := time.Now()
	pctx, span := w.tracer.Start(ctx, "provider send", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("sekali.provider", r.name)))
	var ok okAnswer
	j.providerID, j.sendErr = r.provider.Send(mail.WithAnswerObserver(pctx, ok.observe), j.msg, lastLeaseCheck)
	j.sent = true
	w.metrics.sendLatency.Observe(time.Since(start).Seconds())
	if j.sendErr == nil {
		w.learnPace(ctx, j.l, r, ok.header())
	} else {
		span.SetStatus(codes.Error, j.sendErr.Error())
	}
	span.End()
}

// batchRetries are the waits before each identical re-send of a batch
// whose answer was lost, at a provider that refuses a second request
// under the key: within SEND_TIMEOUT, under the heartbeat.
var batchRetries = []time.Duration{time.Second, 2 * time.Second}

// sendBatch hands jobs to r in one request: their hand-overs in one
// statement, recording the batch's key and its members in order before
// the request leaves (a member whose lease did not hold is left out, and
// nothing else; but a batch sent again goes only whole), then the request
// under the key. A request whose answer was lost at a provider that
// refuses a second request under the key (Resend) is sent again at once,
// identical, a few times: the provider answers the first one's ids, or
// sends it the one time. key: the batch's, sent again; "" for a new one.
func (w *Worker) sendBatch(ctx context.Context, r *route, jobs []*job, key string) {
	again := key != ""
	if !again {
		key = "batch:" + uuid.NewString()
	}
	hs := make([]notify.HandOverArgs, len(jobs))
	for i, j := range jobs {
		hs[i] = j.ho
		hs[i].Batch = key
	}
	failpoint.Inject("before-data")
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.LockTTL)
	held, err := notify.HandOverAll(hctx, w.plans, hs)
	cancel()
	w.metrics.batchSize.WithLabelValues("hand_over").Observe(float64(len(hs)))
	if err != nil {
		for _, j := range jobs {
			j.sent, j.sendErr = true, &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageConnect, Err: fmt.Errorf("hand over: %w", err)}
		}
		return
	}
	var members []*job
	b := mail.Batch{Key: key}
	for i, j := range jobs {
		if !held[i] {
			j.sent, j.sendErr = true, &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageConnect, Err: notify.ErrLeaseLost}
			continue
		}
		members = append(members, j)
		b.Messages = append(b.Messages, j.msg)
	}
	if len(members) == 0 {
		return
	}
	if again && len(members) < len(jobs) {
		// A member lost its lease at the hand-over: the batch cannot go
		// whole, and a part of it under its key could make the rest look
		// sent. Nothing leaves; every member waits for the next try.
		for _, j := range members {
			j.decide(decideReplayPutOff("a member lost its lease at the hand-over"))
		}
		return
	}
	failpoint.Inject("after-handover")
	w.metrics.providerBatch.WithLabelValues(r.name).Observe(float64(len(members)))
	l := members[0].l
	w.depart(ctx, l, r)

	pctx, span := w.tracer.Start(ctx, "provider batch send", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("sekali.provider", r.name), attribute.Int("sekali.batch_size", len(members))))
	defer span.End()
	var ok okAnswer
	sctx := mail.WithAnswerObserver(pctx, ok.observe)
	start := time.Now()
	results, err := r.batcher.SendBatch(sctx, b, func() error { return nil })
	if err != nil && !again && r.resend > 0 && outcomeOf(err) == mail.OutcomeKeyInFlight {
		// Nothing used this key before this request, so what the provider
		// holds in flight under it is this very request: net/http sent it
		// again on a fresh connection after the first lost its answer (a
		// request with an Idempotency-Key is one its Transport replays
		// when a reused connection closes unanswered). The first may yet
		// be sent: its answer is lost, the batch's outcome unknown.
		err = answerLost(err)
	}
	if err != nil && r.resend > 0 && sentMaybe(err) {
		// The answer was lost: the same request again, under the same key,
		// gets the first one's answer, or is the one time it is sent. Only
		// an answer settles it: a refusal of a re-send (the first still in
		// flight, a 429) says nothing of the first, which may have been
		// taken, and the batch stays unknown.
		lost := err
		for i := 0; err != nil && outcomeOf(err) != mail.OutcomeKeyTaken && i < len(batchRetries); i++ {
			l.set(slog.Int("batch_resent", i+1))
			select {
			case <-ctx.Done():
			case <-time.After(batchRetries[i]):
			}
			if ctx.Err() != nil {
				break
			}
			w.metrics.batchResent.WithLabelValues(r.name).Inc()
			results, err = r.batcher.SendBatch(sctx, b, func() error { return nil })
		}
		if err != nil && outcomeOf(err) != mail.OutcomeKeyTaken {
			err = lost
		}
	}
	w.metrics.sendLatency.Observe(time.Since(start).Seconds())
	if err == nil {
		w.learnPace(ctx, l, r, ok.header())
	} else {
		span.SetStatus(codes.Error, err.Error())
	}
	for i, j := range members {
		j.sent, j.batch, j.batchSize = true, key, len(members)
		switch {
		case err != nil:
			j.sendErr = err
		case i >= len(results):
			j.sendErr = &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData,
				Err: fmt.Errorf("the batch's answer has %d results for %d messages", len(results), len(members))}
		case results[i].Err != nil:
			j.sendErr = results[i].Err
		default:
			j.providerID = results[i].ID
		}
	}
}

// outcomeOf is err's classification, 0 for an error that has none.
func outcomeOf(err error) mail.Outcome {
	var se *mail.SendError
	if errors.As(err, &se) {
		return se.Outcome
	}
	return 0
}

// sentMaybe reports whether err leaves open that the provider took the
// request: no answer after it was written, or a 5xx.
func sentMaybe(err error) bool {
	var se *mail.SendError
	return errors.As(err, &se) && (se.Outcome == mail.OutcomeAmbiguous || se.MayHaveAccepted())
}

// answerLost is a batch's first request refused as in flight under its
// key (OutcomeKeyInFlight), as what it says: the request was taken in
// hand, its answer lost.
func answerLost(err error) error {
	var se *mail.SendError
	errors.As(err, &se)
	return &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: se.Reply, HandedOver: true,
		Err: fmt.Errorf("the batch's answer was lost: a copy of it was refused while it is in flight: %w", err)}
}
