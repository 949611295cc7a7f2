package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/queue"
)

// A provider's rate limit is a pace, not a failure. Each provider with a
// budget (internal/pace: one per provider, in Redis, shared by every
// worker: its one door) is sent one request per token, and a task takes
// the tokens of its requests before its locks and its claims: a delivery
// waiting for its turn holds no lock, no lease and no claim. A short
// wait (Config.PaceWait) is spent in the task; the deliveries it found
// no token for within it come back later, counting no failure, each in a
// task of its own. A refusal for pace after the hand-over (a 429, an
// SMTP rate reply: OutcomeThrottled) means nothing was taken: the row
// goes back to pending, its attempt not counted, nothing pinned, no
// breaker opened, and the provider's answer pauses or slows the budget
// for every worker at once (Budget.Observe).
//
// Confirmations go first in two places, each for what only it can see:
// asynq serves the queue before its later lane (server.go: strict
// priority, in each process), and the budget keeps the later lane from
// its tokens, in every process, while an urgent request waits for one
// (pace.Later, pace.ByUrgent: a later task so held back is handed back
// at once, freeing its slot).

// paced is the provider whose tokens a task took, and how many of its
// deliveries they carry.
type paced struct {
	route   *route // nil: none is up
	granted int
}

// tokens takes the tokens of a task's requests at the provider it will
// most likely go to: the first that is up (a delivery pinned to another
// is rare, and routeOf takes that one's token after the claim). A
// provider that takes batches is sent up to its MaxBatch a request; a
// batch sent again whole is one request. With Config.SpillAfter, when
// the first would make the task wait longer than that, the next provider
// that is up and has a token now takes it instead (for the deliveries
// never handed over anywhere: routeOf checks). It returns the provider
// and how many of jobs its tokens carry (the others are queued again for
// their turn), or the error that hands the task back whole.
func (w *Worker) tokens(ctx context.Context, l *taskLog, jobs []*job, replay bool) (paced, error, error) {
	first := w.firstAvailable()
	if first == nil || first.budget == nil {
		return paced{route: first, granted: len(jobs)}, nil, nil
	}
	want := len(jobs)
	if first.max == 1 && !replay && first.budget.Rated() {
		// One message a request: the task takes its first request's
		// token, and the others wait for theirs each in a task of its
		// own. Tokens taken ahead for requests that then leave one after
		// another would leave the provider's window unevenly (a request
		// held back past pace.DepartWait goes at once) and keep the
		// budget from an urgent request asking meanwhile.
		want = 1
	}
	start := time.Now()
	granted, turn, err := takeTokens(ctx, first, w.lane(ctx), want, replay, w.cfg.PaceWait)
	w.metrics.paceWait.WithLabelValues(first.name).Observe(time.Since(start).Seconds())
	if err != nil {
		return paced{}, nil, w.paceError(l, first, err)
	}
	at := first
	if granted == 0 && w.cfg.SpillAfter > 0 && turn.Wait > w.cfg.SpillAfter && !replay {
		if r, n := w.spill(ctx, first, len(jobs)); r != nil {
			l.set(slog.String("spilled_to", r.name))
			w.metrics.spilled.WithLabelValues(first.name, r.name).Add(float64(n))
			at, granted = r, n
		}
	}
	if granted == 0 {
		return paced{}, w.pacedBack(l, first, turn), nil
	}
	if granted < len(jobs) {
		// The rest wait their turn, each in a task of its own.
		on := w.queueOf(ctx)
		for _, j := range jobs[granted:] {
			if err := queue.Requeue(context.WithoutCancel(ctx), w.requeue, on, j.p, turn.Wait+paceSpread(turn.Wait)); err != nil {
				return paced{}, nil, err
			}
		}
		l.set(slog.Int("paced_later", len(jobs)-granted))
	}
	return paced{route: at, granted: granted}, nil, nil
}

// takeTokens takes, waiting up to within, the tokens of the requests
// that carry n deliveries at r (one a delivery, or one a batch of up to
// r.max; one for a batch sent again whole), and says how many
// deliveries the tokens it got carry, and the turn that stopped it.
func takeTokens(ctx context.Context, r *route, lane pace.Lane, n int, whole bool, within time.Duration) (granted int, turn pace.Turn, err error) {
	deadline := time.Now().Add(within)
	per := r.max
	if whole || !r.budget.Rated() {
		per = n // one request's turn: a budget without a rate only pauses
	}
	for granted < n {
		msgs := min(per, n-granted)
		turn, err = r.budget.Wait(ctx, lane, msgs, time.Until(deadline))
		if err != nil || !turn.Go() {
			return granted, turn, err
		}
		granted += msgs
	}
	return granted, turn, nil
}

// spill is the next provider after first that is up and has tokens
// now for some of n deliveries, and how many; nil if none has.
func (w *Worker) spill(ctx context.Context, first *route, n int) (*route, int) {
	after := false
	for _, r := range w.routes {
		if r == first {
			after = true
			continue
		}
		if !after || !r.health.Available() {
			continue
		}
		if r.budget == nil {
			return r, n
		}
		if granted, _, err := takeTokens(ctx, r, w.lane(ctx), n, false, 0); err == nil && granted > 0 {
			return r, granted
		}
	}
	return nil, 0
}

// routeOf is the provider an attempt at the claimed row d sends through:
// the test provider for a test delivery (test mode: docs/testmode.md);
// the one whose tokens the task took (paced) when the row may go there
// (not pinned to another, and up); else the one routeFor chooses, whose
// own token it takes without waiting. A row pinned to a provider other
// than the one it spilled to goes to its own, never elsewhere. It
// returns nil and the step when none may take it now.
func (w *Worker) routeOf(ctx context.Context, d notify.Delivery, paced *route) (*route, *step) {
	if d.Test {
		return w.test, nil
	}
	if paced != nil && paced.health.Available() && (!d.ProviderPinned || d.Provider == "" || d.Provider == paced.name) {
		return paced, nil
	}
	r := w.routeFor(d)
	if r == nil {
		s := decideNoRoute(d.Provider, w.anyAvailable())
		return nil, &s
	}
	if r.budget == nil || r == paced {
		return r, nil
	}
	turn, err := r.budget.Take(ctx, w.lane(ctx), 1)
	if err != nil {
		// Its budget could not be read: the row goes back, for later.
		turn = pace.Turn{Wait: time.Second, By: pace.Hold("unread: " + err.Error())}
	}
	if !turn.Go() {
		s := decidePaced(r.name, turn)
		return nil, &s
	}
	return r, nil
}

// urgent reports whether the task of ctx is of queue itself, not of its
// later lane (notify.LaterQueue).
func urgent(ctx context.Context, queue string) bool {
	name, ok := asynq.GetQueueName(ctx)
	return !ok || name != notify.LaterQueue(queue)
}

// lane is the budget's lane of the task of ctx.
func (w *Worker) lane(ctx context.Context) pace.Lane {
	if urgent(ctx, w.cfg.Queue) {
		return pace.Urgent
	}
	return pace.Later
}

// firstAvailable is the first provider that is up, nil if none is.
func (w *Worker) firstAvailable() *route {
	for _, r := range w.routes {
		if r.health.Available() {
			return r
		}
	}
	return nil
}

// depart holds a request whose token was taken until its provider's
// budget lets it leave (pace.Budget.Depart): right before it goes, after
// the claim, the render and the hand-over, so that the provider sees the
// requests spaced as their tokens were. A budget that cannot be read
// lets it go, said in the log line l.
func (w *Worker) depart(ctx context.Context, l *taskLog, r *route) {
	if r.budget == nil {
		return
	}
	start := time.Now()
	if err := r.budget.Depart(ctx); err != nil {
		l.set(slog.String("pace_error", err.Error()))
	}
	w.metrics.departWait.WithLabelValues(r.name).Observe(time.Since(start).Seconds())
}

// pacedBack is the hand-back of a task that has no token yet: counted,
// said in its log line, and back in the queue after the expected wait.
func (w *Worker) pacedBack(l *taskLog, r *route, turn pace.Turn) error {
	l.result = resultPaced
	l.set(slog.String("provider", r.name), slog.String("paced_by", string(turn.By)), slog.Duration("pace_wait", turn.Wait))
	w.metrics.handedBack.WithLabelValues(pacedReason(turn)).Inc()
	return wait(errPaced, turn.Wait, paceSpread(turn.Wait))
}

// errPaced: the provider's budget has no token for this task now.
var errPaced = errors.New("the provider's budget has no request to spare now; task handed back for its turn")

// paceError is a budget that could not be read: its Redis did not
// answer. The task comes back, as when the lock cannot be taken.
func (w *Worker) paceError(l *taskLog, r *route, err error) error {
	l.result = resultRedisError
	w.metrics.retries.WithLabelValues("redis").Inc()
	return fmt.Errorf("pace %s: %w", r.name, err)
}

// pacedReason is the sekali_tasks_handed_back_total reason of a task
// handed back for turn: yielded when it is of the later lane and urgent
// ones wait for the budget, paced otherwise.
func pacedReason(turn pace.Turn) string {
	if turn.By == pace.ByUrgent {
		return "yielded"
	}
	return "paced"
}

// paceSpread spreads the tasks handed back for the same wait over part
// of it, so that they do not all come back at once.
func paceSpread(wait time.Duration) time.Duration {
	return min(wait/2, 5*time.Second) + 50*time.Millisecond
}

// decidePaced is what a claimed attempt does when its provider has no
// token for it (a delivery pinned to a provider other than the one whose
// token the task took): nothing was sent, so the row goes back to
// pending, the attempt not counted, for its turn.
func decidePaced(provider string, turn pace.Turn) step {
	reason := fmt.Sprintf("waiting for provider %q's pace (%s, about %s)", provider, turn.By, turn.Wait.Round(time.Millisecond))
	return step{write: writeRetry, to: notify.StatusPending, reason: reason, refund: true, result: resultPaced, outcome: "retried",
		retry: "paced", handedBack: pacedReason(turn), answer: answerWait, err: fmt.Errorf("%w: %s", errPaced, reason),
		waitBase: turn.Wait, waitSpread: paceSpread(turn.Wait)}
}

// throttleSignal is what a refusal for pace says of the provider's pace:
// its headers' (pace.FromHTTP), its SMTP reply's (pace.FromSMTP), and a
// pause it named in its body (SendError.Pause), the longest pause of
// them and at least pace.DefaultPause.
func throttleSignal(se *mail.SendError, now time.Time) pace.Signal {
	var s pace.Signal
	switch se.Reply.Protocol {
	case mail.ProtocolHTTP:
		s = pace.FromHTTP(se.Reply.Code, se.Header, now)
	case mail.ProtocolSMTP:
		s = pace.FromSMTP(se.Reply.Code, se.Reply.Enhanced, se.Reply.Text)
	}
	if se.Pause > s.Pause {
		s.Pause = min(se.Pause, pace.MaxPause)
		s.Reason = "the provider's answer names a pause of " + se.Pause.String()
	}
	if s.Pause < pace.DefaultPause {
		s.Pause = pace.DefaultPause
	}
	return s
}

// throttled paces every worker by what a provider's refusal for pace
// said, and counts the refusal.
func (w *Worker) throttled(ctx context.Context, l *taskLog, r *route, sig pace.Signal) {
	w.metrics.throttled.WithLabelValues(r.name).Inc()
	l.set(slog.String("pace", sig.Reason), slog.Duration("pace_pause", sig.Pause))
	if r.budget == nil {
		return
	}
	if err := r.budget.Observe(context.WithoutCancel(ctx), sig); err != nil {
		l.set(slog.String("pace_error", err.Error()))
	}
}

// okAnswer keeps the header fields of a send's last successful answer
// (mail.WithAnswerObserver): Resend states its pace on every answer, and
// a refusal's reach the worker in SendError.Header already.
type okAnswer struct {
	mu sync.Mutex
	h  http.Header
}

func (o *okAnswer) observe(status int, h http.Header) {
	if status >= 200 && status < 300 {
		o.mu.Lock()
		o.h = h
		o.mu.Unlock()
	}
}

func (o *okAnswer) header() http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.h
}

// learnPace applies the rate a successful answer states (its
// ratelimit-limit: an account allowed less than the configured rate is
// paced at its own from its first answer, and back at the configured rate
// once it says it allows that again). A success's ratelimit-remaining of 0
// pauses nothing: the budget spaces the next request by the rate already,
// and a reset in whole seconds would idle every worker for up to a second
// of each window. In steady state this costs no round trip (Observe).
func (w *Worker) learnPace(ctx context.Context, l *taskLog, r *route, h http.Header) {
	if r.budget == nil || h == nil {
		return
	}
	sig := pace.FromHTTP(http.StatusOK, h, time.Now())
	if sig.Rate == 0 {
		return
	}
	if err := r.budget.Observe(context.WithoutCancel(ctx), pace.Signal{Rate: sig.Rate, Reason: sig.Reason}); err != nil {
		l.set(slog.String("pace_error", err.Error()))
	}
}
