package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
)

// A provider's rate limit is a pace, not a failure. Each provider with a
// budget (internal/pace: one per provider, in Redis, shared by every
// worker) is sent one request per token, and a task takes its token
// before its lock and its claim: a delivery waiting for its turn holds
// no lock, no lease and no claim. A short wait (Config.PaceWait) is
// spent in the task's goroutine, bounded by the worker's concurrency;
// a longer one hands the task back to the queue for the expected wait,
// counting no failure. A refusal for pace after the hand-over (a 429, an
// SMTP rate reply: OutcomeThrottled) means nothing was taken: the row
// goes back to pending, its attempt not counted, nothing pinned, no
// breaker opened, and the provider's answer pauses or slows the budget
// for every worker at once (Budget.Observe).

// line is one worker's queue for one provider's tokens. Only the task
// at its head asks the budget; the others wait their turn in this
// process, urgent tasks (of the queue itself) before those of its later
// lane, each lane first come first served. Without it every waiting
// goroutine would ask, and whichever asked first after a token was due
// would have it: a confirmation could wait behind newsletters that came
// after it. Across processes the budget itself keeps the order: while an
// urgent request waits for a token anywhere, the later lane is given
// none (pace.Later): a later task at the head of its line that is told
// so (pace.ByUrgent) is handed back, freeing its slot, and one that
// waits for the rate steps aside the moment an urgent task joins its
// line.
type line struct {
	budget  *pace.Budget
	maxWait time.Duration // Config.PaceWait

	mu            sync.Mutex
	urgent, later []*waiter // in order of arrival
	asker         *waiter   // the one asking the budget now, nil if none
}

type waiter struct {
	urgent bool
	turn   chan struct{} // told: ask
	yield  chan struct{} // told, while a later one asks: an urgent one came; step aside
}

// take waits for a token in line, urgent or not, for at most l.maxWait
// from now: the token (a Turn that goes), or the Turn to hand the task
// back with.
func (l *line) take(ctx context.Context, urgent bool) (pace.Turn, error) {
	deadline := time.Now().Add(l.maxWait)
	w := &waiter{urgent: urgent, turn: make(chan struct{}, 1), yield: make(chan struct{}, 1)}
	l.mu.Lock()
	if urgent {
		l.urgent = append(l.urgent, w)
		if l.asker != nil && !l.asker.urgent {
			select {
			case l.asker.yield <- struct{}{}:
			default:
			}
		}
	} else {
		l.later = append(l.later, w)
	}
	l.promote()
	l.mu.Unlock()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case <-w.turn:
			turn, err, yielded := l.ask(ctx, w, deadline)
			if yielded {
				l.stepAside(w)
				continue
			}
			l.done(w)
			return turn, err
		case <-ctx.Done():
			l.done(w)
			return pace.Turn{Wait: time.Second, By: pace.ByRate}, ctx.Err()
		case <-timer.C:
			// The line ahead is longer than the wait: back for a turn about
			// as far off as the line is long.
			ahead := l.done(w)
			return pace.Turn{Wait: time.Duration(float64(ahead+1) / l.budget.Config().Rate * float64(time.Second)), By: pace.ByRate}, nil
		}
	}
}

// laterHandBack is the least a task of the later lane held back for
// urgent ones (pace.ByUrgent) is handed back for: it frees its slot for
// the urgent tasks another process's confirmations may be queued behind,
// and a second is nothing to a newsletter.
const laterHandBack = time.Second

// ask asks the budget for w, the head of the line, until it has the
// token, its wait would end past deadline (that Turn, to hand the task
// back with), or, w being of the later lane, an urgent task joins the
// line (yielded: w steps aside, having taken nothing). A later task held
// back because urgent ones wait elsewhere is handed back at once.
func (l *line) ask(ctx context.Context, w *waiter, deadline time.Time) (turn pace.Turn, err error, yielded bool) {
	for {
		turn, err := l.budget.Take(ctx, laneOf(w.urgent), 1)
		if turn.By == pace.ByUrgent {
			turn.Wait = max(turn.Wait, laterHandBack)
			return turn, err, false
		}
		if err != nil || turn.Go() || time.Until(deadline) < turn.Wait {
			return turn, err, false
		}
		timer := time.NewTimer(turn.Wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return turn, ctx.Err(), false
		case <-w.yield:
			timer.Stop()
			return turn, nil, true
		case <-timer.C:
		}
	}
}

// stepAside ends w's asking, leaving it at its place in the line, and
// lets the head of the line (the urgent task that came) ask.
func (l *line) stepAside(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.asker == w {
		l.asker = nil
	}
	l.promote()
}

// done takes w out of the line, letting the next ask if w was asking,
// and says how many waited ahead of it.
func (l *line) done(w *waiter) (ahead int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, q := range []*[]*waiter{&l.urgent, &l.later} {
		if i := slices.Index(*q, w); i >= 0 {
			ahead += i
			*q = slices.Delete(*q, i, i+1)
		} else {
			ahead += len(*q)
		}
	}
	if l.asker == w {
		l.asker = nil
	}
	l.promote()
	return ahead
}

// promote lets the head of the line ask, when nobody is asking; l.mu is
// held.
func (l *line) promote() {
	if l.asker != nil {
		return
	}
	switch {
	case len(l.urgent) > 0:
		l.asker = l.urgent[0]
	case len(l.later) > 0:
		l.asker = l.later[0]
	default:
		return
	}
	l.asker.turn <- struct{}{}
}

// errPaced: the provider's budget has no token for this task now.
var errPaced = errors.New("the provider's budget has no request to spare now; task handed back for its turn")

// paceFor takes a token of the provider the attempt will most likely go
// to: the first that is up (a delivery pinned to another is rare, and
// claimAfterPace takes that one's token after the claim). With
// Config.SpillAfter, when the first would make it wait longer than
// that, the next provider that is up and has a token now takes the
// attempt instead, if the delivery turns out never to have been handed
// over anywhere it could still be (claimAfterPace checks). It returns
// the provider whose token it took (nil: none is up, or the first has no
// budget) or the error that hands the task back for its turn.
func (w *Worker) paceFor(ctx context.Context, l *taskLog) (*route, error) {
	first := w.firstAvailable()
	if first == nil || first.budget == nil || first.convoy != nil {
		// A convoy takes one token for each of its requests (convoy.go).
		return first, nil
	}
	start := time.Now()
	turn, err := first.line.take(ctx, urgent(ctx, w.cfg.Queue))
	w.metrics.paceWait.WithLabelValues(first.name).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, w.paceError(l, first, err)
	}
	if turn.Go() {
		return first, nil
	}
	if w.cfg.SpillAfter > 0 && turn.Wait > w.cfg.SpillAfter {
		if r := w.spill(ctx, first); r != nil {
			l.set(slog.String("spilled_to", r.name))
			w.metrics.spilled.WithLabelValues(first.name, r.name).Inc()
			return r, nil
		}
	}
	return nil, w.paced(l, first, turn)
}

// spill is the next provider after first that is up and has a request
// to spare now, nil if none has.
func (w *Worker) spill(ctx context.Context, first *route) *route {
	after := false
	for _, r := range w.routes {
		if r == first {
			after = true
			continue
		}
		if !after || !r.health.available() {
			continue
		}
		if r.budget == nil {
			return r
		}
		if turn, err := r.budget.Take(ctx, w.lane(ctx), 1); err == nil && turn.Go() {
			return r
		}
	}
	return nil
}

// routeAfterPace is the provider a claimed attempt at row d goes to,
// given paced, the one whose token the task took: that one when the row
// may go there (not pinned to another, and up), else the one routeFor
// chooses, whose own token it then takes without waiting. A row pinned
// to a provider other than the one it spilled to goes to its own, never
// elsewhere. It returns nil and the step to apply when none may take it
// now.
func (w *Worker) routeAfterPace(ctx context.Context, d notify.Delivery, paced *route) (*route, *step) {
	if paced != nil && paced.health.available() && (!d.ProviderPinned || d.Provider == "" || d.Provider == paced.name) {
		return paced, nil
	}
	r := w.routeFor(d)
	if r == nil {
		s := decideNoRoute(d.Provider, w.anyAvailable())
		return nil, &s
	}
	if r.budget == nil || r == paced || r.convoy != nil {
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
func (w *Worker) lane(ctx context.Context) pace.Lane { return laneOf(urgent(ctx, w.cfg.Queue)) }

// laneOf is the budget's lane of a task urgent or not.
func laneOf(urgent bool) pace.Lane {
	if urgent {
		return pace.Urgent
	}
	return pace.Later
}

// firstAvailable is the first provider that is up, nil if none is.
func (w *Worker) firstAvailable() *route {
	for _, r := range w.routes {
		if r.health.available() {
			return r
		}
	}
	return nil
}

// depart holds a request whose token was taken until its provider's
// budget lets it leave (pace.Budget.Depart): right before it goes, after
// the claim, the render and the hand-over, so that the provider sees the
// requests spaced as their tokens were. A budget that cannot be read
// lets it go, said in its log line.
func (w *Worker) depart(ctx context.Context, r *route) {
	if r.budget == nil {
		return
	}
	start := time.Now()
	if err := r.budget.Depart(ctx); err != nil {
		taskLogFrom(ctx).set(slog.String("pace_error", err.Error()))
	}
	w.metrics.departWait.WithLabelValues(r.name).Observe(time.Since(start).Seconds())
}

// paced is the hand-back of a task that has no token yet: counted, said
// in its log line, and back in the queue after the expected wait.
func (w *Worker) paced(l *taskLog, r *route, turn pace.Turn) error {
	l.result = resultPaced
	l.set(slog.String("provider", r.name), slog.String("paced_by", string(turn.By)), slog.Duration("pace_wait", turn.Wait))
	w.metrics.handedBack.WithLabelValues(pacedReason(turn)).Inc()
	return wait(errPaced, turn.Wait, paceSpread(turn.Wait))
}

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
func (w *Worker) learnPace(ctx context.Context, r *route, h http.Header) {
	if r.budget == nil || h == nil {
		return
	}
	sig := pace.FromHTTP(http.StatusOK, h, time.Now())
	if sig.Rate == 0 {
		return
	}
	if err := r.budget.Observe(context.WithoutCancel(ctx), pace.Signal{Rate: sig.Rate, Reason: sig.Reason}); err != nil {
		taskLogFrom(ctx).set(slog.String("pace_error", err.Error()))
	}
}
