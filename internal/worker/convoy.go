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

	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
)

// A provider that takes many messages in one request (mail.Batcher:
// Resend's /emails/batch, Postmark's /email/batch) gets them so. Each
// delivery is still its own attempt — its lock, claim, lease, render and
// outcome — up to the send; there it joins its provider's convoy, and
// the convoy's leader carries everyone waiting in one request:
//
//   - one token of the provider's budget for the request, taken before
//     the batch is closed, so that whoever arrives while the leader waits
//     for it rides along (the attempts took none before their claim);
//   - one hand-over for every member (HandOverAll), recording the
//     batch's key and its members in order before the request leaves;
//     a member whose lease did not hold is left out, and nothing else;
//   - the request, under the batch's key (Resend's Idempotency-Key for
//     the whole request). A request whose answer was lost at a provider
//     that refuses a second request under the key (Resend) is sent again
//     at once, identical, under the same key, a few times: the provider
//     answers the first request's ids, or sends it the one time;
//   - each member's own outcome: its id, its own refusal, or what befell
//     the whole request. A member whose outcome stays unknown is left
//     for the reconciler, and never sent alone under a key of its own
//     (its row names its batch): the reconciler asks the provider, where
//     it can (Postmark, by Message-ID), and holds it where it cannot.
//
// Like the statements' batches (batch.go) it has no timer: a lone
// attempt goes at once, alone, and under load a request carries whoever
// arrived while the one before it was under way, up to the provider's
// MaxBatch. An attempt waiting in the convoy gives its slot of the
// worker's concurrency back: the request is one, however many it
// carries.
type convoy struct {
	w       *Worker
	route   *route
	batcher mail.Batcher
	max     int

	mu      sync.Mutex
	leading bool
	queue   []*rider
}

// tally counts the deliveries of a task of many still on their way to
// their send (many.go): a convoy's leader waits for its own task's,
// briefly, so that a task's deliveries go in one request rather than the
// first alone and the others after it.
type tally struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n reaches 0
}

func newTally(n int) *tally { return &tally{n: n, zero: make(chan struct{})} }

func (t *tally) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n--; t.n == 0 {
		close(t.zero)
	}
}

// onItsWay is one delivery of a tally: counted once, when it reaches its
// send or finishes without one, whichever comes first.
type onItsWay struct {
	t    *tally
	once sync.Once
}

func (o *onItsWay) arrived() {
	if o != nil {
		o.once.Do(o.t.done)
	}
}

type tallyKey struct{}

// onItsWayFrom is ctx's delivery of a task of many, nil for a task of
// one.
func onItsWayFrom(ctx context.Context) *onItsWay {
	o, _ := ctx.Value(tallyKey{}).(*onItsWay)
	return o
}

// gatherWait bounds how long a convoy's leader waits for the rest of its
// task's deliveries: they render and claim beside it, a few milliseconds,
// and each is counted when it rides or ends without a send, so the wait
// is the slowest one's. The bound is for a member stuck on its way; a
// shorter one split a task of four into two batches on a machine running
// the whole test suite at once (200 ms).
const gatherWait = time.Second

// rider is one attempt waiting in a convoy: its message, its hand-over,
// and, once the request is answered, its outcome.
type rider struct {
	ctx    context.Context // the attempt's, bounded by SEND_TIMEOUT
	a      *attempt
	msg    mail.Message
	ho     notify.HandOverArgs
	urgent bool
	tally  *onItsWay     // its task's count, nil for a task of one
	replay *replayMember // its place in a batch sent again, nil for a new one
	wake   chan bool     // true: id and err are set; false: lead the next request

	id  string
	err error
}

// newConvoy is the convoy of r, nil when its provider takes one message
// a request.
func newConvoy(w *Worker, r *route) *convoy {
	b, ok := r.provider.(mail.Batcher)
	if !ok || b.MaxBatch() < 2 {
		return nil
	}
	return &convoy{w: w, route: r, batcher: b, max: b.MaxBatch()}
}

// ride sends r's message in the next request the convoy makes, and
// returns its outcome as a lone send would: the provider's id, or the
// error to decide on.
func (c *convoy) ride(r *rider) (string, error) {
	r.tally.arrived()
	if r.replay != nil {
		return c.rideReplay(r, r.replay)
	}
	c.mu.Lock()
	c.queue = append(c.queue, r)
	lead := !c.leading
	c.leading = true
	c.mu.Unlock()
	if !lead {
		if done := <-r.wake; done {
			return r.id, r.err
		}
	}
	c.lead(r)
	return r.id, r.err
}

// pacedSend: the convoy's leader found no token within PACE_WAIT;
// nothing was handed over, and each rider goes back for its turn.
type pacedSend struct{ turn pace.Turn }

func (p *pacedSend) Error() string { return errPaced.Error() }

// lead makes the convoy's next request, led by l (the head of the
// queue): the token, the batch of whoever waits then, the request, each
// rider's outcome; then the lead passes to the first still waiting.
func (c *convoy) lead(l *rider) {
	if l.tally != nil {
		select {
		case <-l.tally.t.zero:
		case <-time.After(gatherWait):
		}
	}
	refusal := c.token(l)
	c.mu.Lock()
	n := min(len(c.queue), c.max)
	riders := c.queue[:n:n]
	c.queue = c.queue[n:]
	c.mu.Unlock()

	if refusal != nil {
		for _, r := range riders {
			r.err = refusal
		}
	} else {
		c.sendAs(l.ctx, riders, "batch:"+uuid.NewString(), false)
	}
	for _, r := range riders {
		if r != l {
			r.wake <- true
		}
	}
	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].wake <- false
	} else {
		c.leading = false
	}
	c.mu.Unlock()
}

// batchRetries are the waits before each identical re-send of a batch
// whose answer was lost, at a provider that refuses a second request
// under the key: within SEND_TIMEOUT, under the heartbeat.
var batchRetries = []time.Duration{time.Second, 2 * time.Second}

// token takes the provider's token for l's request: nil when it may go,
// else the error every rider of the request gets.
func (c *convoy) token(l *rider) error {
	if c.route.budget == nil {
		return nil
	}
	// The request carries whoever waits: urgent when any of them is, so
	// that a newsletter leading confirmations does not hold them back
	// with the later lane.
	c.mu.Lock()
	urgent := slices.ContainsFunc(c.queue, func(r *rider) bool { return r.urgent })
	c.mu.Unlock()
	start := time.Now()
	turn, err := c.route.line.take(l.ctx, urgent)
	c.w.metrics.paceWait.WithLabelValues(c.route.name).Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		return &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageConnect, Err: fmt.Errorf("pace %s: %w", c.route.name, err)}
	case !turn.Go():
		return &pacedSend{turn: turn}
	}
	return nil
}

// sendAs hands riders over in the batch key and sends them in one
// request under it; replay: the batch is one sent before, again.
func (c *convoy) sendAs(ctx context.Context, riders []*rider, key string, replay bool) {
	w := c.w
	hs := make([]notify.HandOverArgs, len(riders))
	for i, r := range riders {
		hs[i] = r.ho
		hs[i].Batch = key
	}
	failpoint.Inject("before-data")
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.LockTTL)
	held, err := notify.HandOverAll(hctx, w.plans, hs)
	cancel()
	if err != nil {
		for _, r := range riders {
			r.err = &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageConnect, Err: fmt.Errorf("hand over: %w", err)}
		}
		return
	}
	var members []*rider
	b := mail.Batch{Key: key}
	for i, r := range riders {
		if !held[i] {
			r.err = &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageConnect, Err: notify.ErrLeaseLost}
			continue
		}
		r.a.batched = true
		members = append(members, r)
		b.Messages = append(b.Messages, r.msg)
	}
	if len(members) == 0 {
		return
	}
	if replay && len(members) < len(riders) {
		// A member lost its lease at the hand-over: the batch cannot go
		// whole, and a part of it under its key could make the rest look
		// sent. Nothing leaves; every member waits for the next try.
		for _, r := range members {
			r.err = &replayPutOff{why: "a member lost its lease at the hand-over"}
		}
		return
	}
	failpoint.Inject("after-handover")
	w.metrics.providerBatch.WithLabelValues(c.route.name).Observe(float64(len(members)))

	w.depart(members[0].ctx, c.route)
	var ok okAnswer
	sctx := mail.WithAnswerObserver(ctx, ok.observe)
	start := time.Now()
	results, err := c.batcher.SendBatch(sctx, b, func() error { return nil })
	if err != nil && !replay && c.route.resend > 0 && inFlight(err) {
		// Nothing used this key before this request, so what the provider
		// holds in flight under it is this very request: net/http sent it
		// again on a fresh connection after the first lost its answer (a
		// request with an Idempotency-Key is one its Transport replays
		// when a reused connection closes unanswered). The first may yet
		// be sent: its answer is lost, the batch's outcome unknown.
		err = answerLost(err)
	}
	if err != nil && c.route.resend > 0 && sentMaybe(err) {
		// The answer was lost: the same request again, under the same key,
		// gets the first one's answer, or is the one time it is sent. Only
		// an answer settles it: a refusal of a re-send (the first still in
		// flight, a 429) says nothing of the first, which may have been
		// taken, and the batch stays unknown.
		lost := err
		for i := 0; err != nil && !tookAnotherBody(err) && i < len(batchRetries); i++ {
			taskLogFrom(members[0].ctx).set(slog.Int("batch_resent", i+1))
			select {
			case <-ctx.Done():
			case <-time.After(batchRetries[i]):
			}
			if ctx.Err() != nil {
				break
			}
			w.metrics.batchResent.WithLabelValues(c.route.name).Inc()
			results, err = c.batcher.SendBatch(sctx, b, func() error { return nil })
		}
		if err != nil && !tookAnotherBody(err) {
			err = lost
		}
	}
	w.metrics.sendLatency.Observe(time.Since(start).Seconds())
	if err == nil {
		w.learnPace(ctx, c.route, ok.header())
	}
	if err != nil && tookAnotherBody(err) && (replay || c.route.resend > 0) {
		// Resend holds a request of another body under this key: the
		// first, which it took (this key was never used for anything
		// else) — every member of it was sent.
		for _, r := range members {
			r.a.batch, r.a.batchSize = key, len(members)
		}
		return
	}
	for i, r := range members {
		r.a.batch, r.a.batchSize = key, len(members)
		switch {
		case err != nil:
			r.err = err
		case i >= len(results):
			r.err = &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData,
				Err: fmt.Errorf("the batch's answer has %d results for %d messages", len(results), len(members))}
		case results[i].Err != nil:
			r.err = results[i].Err
		default:
			r.id = results[i].ID
		}
	}
}

// sentMaybe reports whether err leaves open that the provider took the
// request: no answer after it was written, or a 5xx.
func sentMaybe(err error) bool {
	var se *mail.SendError
	return errors.As(err, &se) && (se.Outcome == mail.OutcomeAmbiguous || se.MayHaveAccepted())
}

// inFlight reports whether err is a provider's refusal of a request
// because another under the same key is still in flight (Resend's 409
// concurrent_idempotent_requests): classified temporary, answered 409.
func inFlight(err error) bool {
	var se *mail.SendError
	return errors.As(err, &se) && se.Outcome == mail.OutcomeTemporary && se.Reply.Protocol == mail.ProtocolHTTP && se.Reply.Code == 409
}

// answerLost is inFlight's err for a batch's first request, as what it
// says: the request was taken in hand, its answer lost.
func answerLost(err error) error {
	var se *mail.SendError
	errors.As(err, &se)
	return &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: se.Reply, HandedOver: true,
		Err: fmt.Errorf("the batch's answer was lost: a copy of it was refused while it is in flight: %w", err)}
}

// convoyTasks is how many tasks a worker with a convoy runs at once for
// each slot of its concurrency: a task waiting in a convoy holds no slot
// (the request is one, however many ride in it), and a request can
// carry only the tasks that are running; the slots still bound the
// deliveries under way otherwise.
const convoyTasks = 10

// tasksAtOnce is asynq's concurrency for a worker of concurrency slots:
// convoyTasks times as many when a provider takes many messages a
// request, else the slots.
func (w *Worker) tasksAtOnce(concurrency int) int {
	for _, r := range w.routes {
		if r.convoy != nil {
			return concurrency * convoyTasks
		}
	}
	return concurrency
}

// tookAnotherBody reports whether err is a provider's refusal of a
// request because it took another under the same key (Resend's 409
// invalid_idempotent_request): classified permanent, answered 409.
func tookAnotherBody(err error) bool {
	var se *mail.SendError
	return errors.As(err, &se) && se.Outcome == mail.OutcomePermanent && se.Reply.Protocol == mail.ProtocolHTTP && se.Reply.Code == 409
}
