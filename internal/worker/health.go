package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/sekali-dev/sekali/internal/breaker"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
)

// The worker's circuit breaker on each provider. A send that meets
// OutcomeUnavailable (the provider refuses us, not the message) opens
// that provider's; a probe that succeeds closes it:
//
//	up ──(a send is refused as OutcomeUnavailable)──▶ down
//	down ──(Provider.Probe succeeds, every PROVIDER_PROBE_INTERVAL)──▶ up
//
// Each attempt goes to the first provider of the list (PROVIDERS) that is
// up, so while the first is down the next one takes the mail: failover.
// A refusal as OutcomeUnavailable means nothing was accepted, so the
// delivery may move. A delivery whose outcome at a provider is unknown
// is pinned to it (provider_pinned) and waits for it alone. While every
// provider is down no task claims a delivery: each goes back to the
// queue and comes again shortly after the next probe, using up nothing,
// so the whole backlog goes out within a minute of a provider's return
// rather than after each delivery's own exponential back-off.

// route is one provider of the list, with its breaker.
type route struct {
	name     string
	provider mail.Provider
	resend   time.Duration // NamedProvider.Resend
	budget   *pace.Budget  // NamedProvider.Budget: nil, unpaced
	// batcher takes many messages a request (mail.Batcher), with
	// PROVIDER_BATCHES: a task's messages go to it in requests of up to
	// max; nil: one message a request.
	batcher mail.Batcher
	max     int
	batches bool // batcher != nil
	health  *breaker.Breaker
}

// newRoute is the route of p, its requests of many when batches allows
// and p takes them.
func newRoute(p NamedProvider, batches bool, h *breaker.Breaker) *route {
	r := &route{name: p.Name, provider: p.Provider, resend: p.Resend, budget: p.Budget, health: h, max: 1}
	if b, ok := p.Provider.(mail.Batcher); ok && batches && b.MaxBatch() > 1 {
		r.batcher, r.max, r.batches = b, b.MaxBatch(), true
	}
	return r
}

// anyAvailable reports whether some provider is up.
func (w *Worker) anyAvailable() bool {
	for _, r := range w.routes {
		if r.health.Available() {
			return true
		}
	}
	return false
}

// hasRoute reports whether this worker sends through provider name.
func (w *Worker) hasRoute(name string) bool {
	if name == w.test.name {
		return true
	}
	for _, r := range w.routes {
		if r.name == name {
			return true
		}
	}
	return false
}

// usable names the providers that are up, for the claim: a delivery
// pinned to another waits without being claimed. The test provider is
// always among them (a test delivery is never anywhere else).
func (w *Worker) usable() []string {
	names := []string{w.test.name}
	for _, r := range w.routes {
		if r.health.Available() {
			names = append(names, r.name)
		}
	}
	return names
}

// routeFor is the provider an attempt at row d sends through: the one
// it is pinned to, if that is up, or else the first that is up; nil if
// none may take it now.
func (w *Worker) routeFor(d notify.Delivery) *route {
	for _, r := range w.routes {
		if d.ProviderPinned && d.Provider != "" && d.Provider != r.name {
			continue
		}
		if r.health.Available() {
			return r
		}
	}
	return nil
}

// WatchProvider probes every provider whose breaker is open, every
// interval, closes a breaker when its probe succeeds, and publishes this
// worker's view in Redis for the admin API. It returns when ctx ends.
func (w *Worker) WatchProvider(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		w.publishHealth(ctx, interval)
		select {
		case <-ctx.Done():
			fields := make([]string, len(w.routes))
			for i, r := range w.routes {
				fields[i] = w.healthField(r)
			}
			_ = w.rdb.HDel(context.WithoutCancel(ctx), notify.ProviderStateKey(w.cfg.Queue), fields...).Err()
			return
		case <-t.C:
		}
		for _, r := range w.routes {
			w.probe(ctx, r, interval)
		}
	}
}

// probe probes r if its breaker is open and a probe is due, and closes
// the breaker if r answers.
func (w *Worker) probe(ctx context.Context, r *route, interval time.Duration) {
	if !r.health.ProbeDue(time.Now(), interval) {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, max(interval, 5*time.Second))
	err := r.provider.Probe(pctx)
	cancel()
	if se := aboutPace(err); se != nil {
		// The provider answered, about pace: it is up, and paced by what
		// it said, as a send's refusal for pace paces every worker.
		l := &taskLog{}
		w.throttled(ctx, l, r, throttleSignal(se, time.Now()))
		w.log.LogAttrs(ctx, slog.LevelInfo, "provider probe answered about pace; it is up, and paced", append([]slog.Attr{
			slog.String("worker_id", w.cfg.WorkerID), slog.String("provider", r.name)}, l.attrs...)...)
		err = nil
	}
	if err != nil {
		reason := mail.RedactAddresses(err.Error())
		r.health.MarkDown(reason)
		w.log.LogAttrs(ctx, slog.LevelInfo, "provider probe failed; it stays down", slog.String("worker_id", w.cfg.WorkerID),
			slog.String("provider", r.name), slog.String("reason", reason))
		return
	}
	if r.health.MarkUp() {
		w.log.LogAttrs(ctx, slog.LevelInfo, "provider takes mail again; sending resumes", slog.String("worker_id", w.cfg.WorkerID),
			slog.String("provider", r.name))
	}
}

// aboutPace is a probe's failure that is a refusal for pace (a relay's
// 421 "too many connections", 450 "too much mail"): the provider
// answered, so it is up. nil for any other.
func aboutPace(err error) *mail.SendError {
	var se *mail.SendError
	if errors.As(err, &se) && se.Outcome == mail.OutcomeThrottled {
		return se
	}
	return nil
}

// providerUnavailable opens r's breaker after a send met
// OutcomeUnavailable, and says so once per outage.
func (w *Worker) providerUnavailable(ctx context.Context, r *route, se *mail.SendError) {
	reason := mail.RedactAddresses(se.Error())
	if r.health.MarkDown(reason) {
		next := "deliveries wait until a probe succeeds"
		if w.anyAvailable() {
			next = "deliveries go to the next provider that is up until a probe succeeds"
		}
		attrs := append([]slog.Attr{slog.String("worker_id", w.cfg.WorkerID), slog.String("provider", r.name),
			slog.String("stage", string(se.Stage))}, replyAttrs(se.Reply)...)
		w.log.LogAttrs(ctx, slog.LevelWarn, "provider refuses us; "+next, append(attrs, slog.String("reason", reason))...)
	}
}

// healthField is r's field in the providerKey hash.
func (w *Worker) healthField(r *route) string { return w.cfg.WorkerID + " " + r.name }

func (w *Worker) publishHealth(ctx context.Context, interval time.Duration) {
	now := time.Now()
	values := make([]any, 0, 2*len(w.routes))
	for _, r := range w.routes {
		down, reason, since := r.health.State()
		s := notify.ProviderState{WorkerID: w.cfg.WorkerID, Provider: r.name, Up: !down, Reason: reason, Since: since,
			CheckedAt: now, ValidUntil: now.Add(3*interval + 5*time.Second)}
		if r.budget != nil {
			// Its pace, for the operators' view of the budget.
			c := notify.PaceConfigOf(r.budget.Config())
			s.Pace = &c
		}
		b, _ := json.Marshal(s)
		values = append(values, w.healthField(r), b)
	}
	// Best effort: Redis being away is not the provider's health.
	_ = w.rdb.HSet(ctx, notify.ProviderStateKey(w.cfg.Queue), values...).Err()
}
