package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
)

// A batch whose outcome stayed unknown (its worker died between the
// hand-over and the answer, or every identical re-send lost its answer
// too) is sent again only as it was: the same members, in the same
// order, under the same key, so that Resend answers the first request's
// ids or sends it the one time. Its members never go alone under keys
// of their own: the provider would not refuse them.
//
// The reconciler puts each member back to pending, pinned
// (batch_replay). The attempt at the batch's first member still due
// (pending or sending, still naming the batch) leads the replay: it
// takes the others' attempts in hand, in this task, each its own lock,
// claim, lease and outcome as usual, and they ride the convoy as one
// group that is sent only whole. The attempts at the other members, from
// their own tasks, leave them to it. A member still in another's hands,
// or one that cannot be taken now, puts the whole replay off: every
// member goes back to pending, pinned, and the first's task comes again.
//
// Sent again under its key, a batch gets one of three answers: the first
// request's ids (the same body: sent once, by the first or by this one);
// 409 invalid_idempotent_request (Resend took a request of another body
// under this key — the first, since nothing else ever used it — so every
// member of it was sent; an id is not known); or a refusal as any
// request's.

// replayGroup is one batch being sent again: its members still due, in
// the batch's order, and those that have reached the convoy.
type replayGroup struct {
	key   string
	order []uuid.UUID // the due members, in the batch's order

	mu     sync.Mutex
	riders []*rider
	gone   int            // members that finished without reaching the convoy
	wg     sync.WaitGroup // the adopted members' attempts
}

// replayMember is one member's place in its group: it reaches the convoy
// (arrive) or finishes without (leave), once.
type replayMember struct {
	g    *replayGroup
	once sync.Once
}

type replayKey struct{}

func replayMemberFrom(ctx context.Context) *replayMember {
	m, _ := ctx.Value(replayKey{}).(*replayMember)
	return m
}

// errReplayPutOff: the batch could not be sent again whole now.
var errReplayPutOff = errors.New("its batch cannot be sent again whole now; every member waits for the next try")

// decideReplayPutOff is the step of a member whose batch's replay is put
// off: back to pending, still pinned, the attempt not counted, after a
// wait.
func decideReplayPutOff(why string) step {
	reason := errReplayPutOff.Error() + ": " + why
	return step{write: writeRetry, to: notify.StatusPending, reason: reason, refund: true, pin: true, result: resultReplayPutOff,
		outcome: "retried", retry: "batch_replay", answer: answerWait, err: fmt.Errorf("%w: %s", errReplayPutOff, why),
		waitBase: 2 * time.Second, waitSpread: 2 * time.Second}
}

// decideLeftToBatch is the step of a member whose batch's first due
// member leads the replay: back to pending, pinned, uncounted, and the
// task is done; the leader's attempt takes it in hand (and, should that
// never come, the reconciler queues it again).
func decideLeftToBatch(first uuid.UUID) step {
	reason := "sent again in its batch, led by the attempt at its first member " + first.String()
	return step{write: writeRetry, to: notify.StatusPending, reason: reason, refund: true, pin: true, result: resultLeftToBatch}
}

// replayFor decides whether the claimed attempt a is at a member of a
// batch to send again, and what it does: nil, nil when it is not one
// (or is already one of a group's members); a step to apply when it
// leaves the replay to another, or puts it off; else the group it leads
// and the adopted members' attempts already under way.
func (w *Worker) replayFor(ctx context.Context, l *taskLog, a *attempt) (*replayGroup, *step) {
	d := a.row
	if d.HandoverBatch == "" || !d.ProviderPinned || d.Provider != a.route.name || a.route.convoy == nil || replayMemberFrom(ctx) != nil {
		return nil, nil
	}
	l.set(slog.String("batch", d.HandoverBatch), slog.Bool("batch_replay", true))
	members, err := notify.BatchMembers(ctx, w.db, d.HandoverBatch)
	if err != nil {
		s := decideReplayPutOff(err.Error())
		return nil, &s
	}
	var due []notify.Delivery
	for _, m := range members {
		if m.HandoverBatch == d.HandoverBatch && (m.Status == notify.StatusPending || m.Status == notify.StatusSending) {
			due = append(due, m)
		}
	}
	if !slices.ContainsFunc(due, func(m notify.Delivery) bool { return m.ID == d.ID }) {
		// The batch is no longer kept (older than the retention): nothing
		// says what it was, and sending this alone could be a second
		// e-mail. Held, for an operator.
		reason := fmt.Sprintf("held: handed over in batch %s at provider %q, whose outcome is unknown and which is no longer kept: sending this delivery alone could deliver a second e-mail; check the provider's log, then mark sent or retry",
			d.HandoverBatch, d.Provider)
		s := step{write: writeHeld, to: notify.StatusHeld, reason: reason, result: resultHeld, outcome: "held", answer: answerSkip,
			err: fmt.Errorf("%s: %w", reason, asynq.SkipRetry)}
		return nil, &s
	}
	for _, m := range due {
		if m.ID != d.ID && m.Status == notify.StatusSending {
			s := decideReplayPutOff("member " + m.ID.String() + " is still being sent or settled")
			return nil, &s
		}
	}
	if due[0].ID != d.ID {
		s := decideLeftToBatch(due[0].ID)
		return nil, &s
	}
	g := &replayGroup{key: d.HandoverBatch}
	for _, m := range due {
		g.order = append(g.order, m.ID)
	}
	l.set(slog.Int("batch_size", len(due)))
	parent := taskLogFrom(ctx)
	for i, m := range due[1:] {
		ml := parent.member(i + 1)
		ml.set(slog.String("batch", g.key), slog.Bool("batch_replay", true))
		rm := &replayMember{g: g}
		mctx := context.WithValue(context.WithValue(ctx, taskLogKey{}, ml), replayKey{}, rm)
		g.wg.Go(func() {
			start := time.Now()
			defer rm.leave()
			err := w.processOne(mctx, ml, queue.Payload{DeliveryID: m.ID, KeyHash: mail.KeyHash(m.IdempotencyKey)})
			w.logLine(mctx, ml, "delivery attempt", err, time.Since(start))
		})
	}
	return g, nil
}

// leave counts a member that finished without reaching the convoy: the
// group cannot be sent whole, and those waiting in it are told so once
// every member has arrived or left.
func (m *replayMember) leave() {
	if m == nil {
		return
	}
	m.once.Do(func() {
		g := m.g
		g.mu.Lock()
		g.gone++
		riders, complete := g.riders, len(g.riders)+g.gone == len(g.order)
		g.mu.Unlock()
		if complete && len(riders) > 0 {
			g.fail(riders, "a member of it could not be taken in hand")
		}
	})
}

// fail tells riders that the replay is put off.
func (g *replayGroup) fail(riders []*rider, why string) {
	for _, r := range riders {
		r.err = &replayPutOff{why: why}
		r.wake <- true
	}
}

// replayPutOff is errReplayPutOff for one rider, as the send's error.
type replayPutOff struct{ why string }

func (e *replayPutOff) Error() string { return errReplayPutOff.Error() + ": " + e.why }

// rideReplay waits for the group of m whole, then sends it, or is told
// it cannot be; it returns r's outcome.
func (c *convoy) rideReplay(r *rider, m *replayMember) (string, error) {
	first := false
	m.once.Do(func() { first = true })
	if !first {
		return "", &replayPutOff{why: "a member reached its send twice"} // cannot happen: one attempt a member
	}
	g := m.g
	g.mu.Lock()
	g.riders = append(g.riders, r)
	riders, complete, gone := slices.Clone(g.riders), len(g.riders)+g.gone == len(g.order), g.gone
	g.mu.Unlock()
	if !complete {
		<-r.wake
		return r.id, r.err
	}
	// The last to arrive sends the group, or says it cannot be.
	if gone > 0 {
		others := slices.DeleteFunc(riders, func(o *rider) bool { return o == r })
		g.fail(others, "a member of it could not be taken in hand")
		return "", &replayPutOff{why: "a member of it could not be taken in hand"}
	}
	slices.SortFunc(riders, func(a, b *rider) int {
		return slices.Index(g.order, a.a.row.ID) - slices.Index(g.order, b.a.row.ID)
	})
	if refusal := c.token(r); refusal != nil {
		for _, o := range riders {
			o.err = refusal
		}
	} else {
		c.sendAs(r.ctx, riders, g.key, true)
	}
	for _, o := range riders {
		if o != r {
			o.wake <- true
		}
	}
	return r.id, r.err
}
