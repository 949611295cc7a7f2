// Package reconcile cleans up what crashes, lost Redis data and ambiguous
// sends leave behind, without ever causing a second e-mail: it re-queues
// pending deliveries whose task is gone, and decides about sending rows
// whose worker's lease expired, asking the provider where it can.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
)

// Policy says what to do with a delivery whose outcome is unknown and
// that no provider look-up can settle.
type Policy string

const (
	// PolicyResend sends again: at-least-once, right when the provider
	// deduplicates by the idempotency key or Message-ID within its window.
	PolicyResend Policy = "resend"
	// PolicyHold parks the delivery as held for an operator, with an alert.
	PolicyHold Policy = "hold"
)

// Decisions, as logged, counted and written to the delivery's history.
const (
	DecisionRequeued      = "requeued_pending"      // pending, no live task: enqueued again
	DecisionNotHandedOver = "reset_not_handed_over" // worker died before the data: back to pending
	DecisionFound         = "found_at_provider"     // the provider has it: sent
	DecisionNotFound      = "not_found_at_provider" // the provider does not: back to pending
	DecisionPolicyResend  = "policy_resend"         // no look-up; policy resend: back to pending
	DecisionPolicyHold    = "policy_hold"           // no look-up; policy hold: held
	DecisionLookupFailed  = "lookup_failed"         // the look-up failed; decided next pass
	DecisionEnqueueFailed = "enqueue_failed"        // could not enqueue; tried again next pass
	DecisionAlreadyQueued = "already_queued"        // pending with a live task: nothing to do
	DecisionDedupResend   = "provider_dedupes"      // no look-up, but the provider deduplicates by key: back to pending
)

// allDecisions lists every decision, in the order reports print them.
var allDecisions = []string{DecisionRequeued, DecisionAlreadyQueued, DecisionNotHandedOver, DecisionFound, DecisionNotFound,
	DecisionDedupResend, DecisionPolicyResend, DecisionPolicyHold, DecisionLookupFailed, DecisionEnqueueFailed}

// Config tunes a Reconciler.
type Config struct {
	PendingAfter    time.Duration     // a pending row untouched this long is checked
	Batch           int               // rows of each kind per pass
	DefaultPolicy   Policy            // for templates without their own
	Policies        map[string]Policy // per template
	MessageIDDomain string            // as the worker's (the MAIL_FROM domain)
	Actor           string            // names this reconciler in the history
	// DeliveryRetention, when positive, deletes sent and failed deliveries
	// (and their history) untouched for that long, leaving a tombstone
	// that keeps their idempotency keys refused. Zero keeps them.
	DeliveryRetention time.Duration
	// MaxAge is the workers' DELIVERY_MAX_AGE: retention never deletes a
	// delivery whose tries began less than this long ago.
	MaxAge time.Duration
	// Providers are the workers' providers (PROVIDERS), in their order:
	// an ambiguous send is settled at the provider that had it, and one
	// handed over before the provider was recorded at the first.
	Providers []Provider
}

// Provider is what the reconciler knows of one of the workers'
// providers.
type Provider struct {
	Name   string
	Lookup mail.Lookup // its search for a message; nil if it has none
	// DedupWindow, when positive, is how long after a hand-over the
	// provider itself refuses a second message under the delivery's key
	// (Resend: 24 h, less a margin: provider.DedupWindows). Without a
	// look-up, an ambiguous send whose earliest unknown attempt was
	// handed over within it is sent again: the provider keeps it to one
	// e-mail, the stalled worker's late copy included. Past it, the
	// template's policy. The worker holds what is not sent again in time.
	DedupWindow time.Duration
}

// Reconciler runs reconciliation passes. Several may run at once: rows
// are claimed with FOR UPDATE SKIP LOCKED.
type Reconciler struct {
	db        *pgxpool.Pool
	enqueuer  *notify.Enqueuer
	inspector *asynq.Inspector
	cfg       Config
	log       *slog.Logger

	stale     prometheus.Gauge
	held      prometheus.Gauge
	decisions *prometheus.CounterVec
	passes    prometheus.Histogram
	cleaned   *prometheus.CounterVec
}

// New returns a Reconciler.
func New(db *pgxpool.Pool, enq *notify.Enqueuer, ins *asynq.Inspector, cfg Config, log *slog.Logger, reg prometheus.Registerer) *Reconciler {
	r := &Reconciler{
		db: db, enqueuer: enq, inspector: ins, cfg: cfg, log: log,
		stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sekali_stale_processing_records",
			Help: "Deliveries in sending whose lease has expired, as of the last pass (before it acted).",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sekali_held_deliveries",
			Help: "Deliveries held for an operator because their outcome is unknown.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sekali_reconciler_decisions_total",
			Help: "Reconciler decisions by kind.",
		}, []string{"decision"}),
		passes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sekali_reconciler_pass_duration_seconds",
			Help:    "Time one reconciliation pass took.",
			Buckets: prometheus.DefBuckets,
		}),
		cleaned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sekali_cleanup_deleted_total",
			Help: "Rows the retention clean-up deleted: expired idempotency keys, and finished deliveries past DELIVERY_RETENTION.",
		}, []string{"table"}),
	}
	// Every series exists from the start, at zero, so that dashboards show
	// it and a rate() alert fires on the first event.
	for _, d := range allDecisions {
		r.decisions.WithLabelValues(d)
	}
	for _, t := range []string{"idempotency_keys", "notification_deliveries"} {
		r.cleaned.WithLabelValues(t)
	}
	reg.MustRegister(r.stale, r.held, r.decisions, r.passes, r.cleaned)
	return r
}

// Report counts the decisions of one pass.
type Report struct {
	Stale     int            // sending rows with an expired lease at the start
	Held      int            // held rows at the end
	Decisions map[string]int // by decision
	// Cleaned counts what the retention clean-up deleted.
	CleanedKeys, CleanedDeliveries int
}

func (rep Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stale_sending=%d held=%d cleaned_idempotency_keys=%d cleaned_deliveries=%d",
		rep.Stale, rep.Held, rep.CleanedKeys, rep.CleanedDeliveries)
	for _, d := range allDecisions {
		fmt.Fprintf(&b, " %s=%d", d, rep.Decisions[d])
	}
	return b.String()
}

// Run runs a pass every interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("reconciliation pass failed", "error", mail.RedactAddresses(err.Error()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce runs one pass: first the sending rows whose lease expired, then
// the pending rows nobody has touched for PendingAfter.
func (r *Reconciler) RunOnce(ctx context.Context) (Report, error) {
	start := time.Now()
	defer func() { r.passes.Observe(time.Since(start).Seconds()) }()
	rep := Report{Decisions: map[string]int{}}

	stale, err := notify.CountStaleSending(ctx, r.db)
	if err != nil {
		return rep, err
	}
	rep.Stale = stale
	r.stale.Set(float64(stale))

	var undecided []uuid.UUID // rows whose look-up failed in this pass
	for i := 0; i < r.cfg.Batch; i++ {
		more, err := r.resolveOneStale(ctx, &rep, &undecided)
		if err != nil {
			return rep, err
		}
		if !more {
			break
		}
	}
	if err := r.requeueOrphans(ctx, &rep); err != nil {
		return rep, err
	}

	held, err := notify.CountHeld(ctx, r.db)
	if err != nil {
		return rep, err
	}
	rep.Held = held
	r.held.Set(float64(held))
	return rep, r.cleanUp(ctx, &rep)
}

// cleanUp deletes what has outlived its use, a batch per pass: expired
// Idempotency-Key records, and, with a DeliveryRetention, finished
// deliveries, each leaving a tombstone that keeps its idempotency key
// refused for ever (notify.Retire).
func (r *Reconciler) cleanUp(ctx context.Context, rep *Report) error {
	n, err := order.DeleteExpiredIdempotencyKeys(ctx, r.db, r.cfg.Batch)
	if err != nil {
		return err
	}
	rep.CleanedKeys = n
	r.cleaned.WithLabelValues("idempotency_keys").Add(float64(n))
	if r.cfg.DeliveryRetention <= 0 {
		return nil
	}
	n, err = notify.Retire(ctx, r.db, r.cfg.DeliveryRetention, r.cfg.MaxAge, r.cfg.Batch)
	if err != nil {
		return err
	}
	rep.CleanedDeliveries = n
	r.cleaned.WithLabelValues("notification_deliveries").Add(float64(n))
	return nil
}

// decide records one decision in the metrics, the report and the log.
func (r *Reconciler) decide(rep *Report, d notify.Delivery, decision, reason string) {
	r.decisions.WithLabelValues(decision).Inc()
	rep.Decisions[decision]++
	level := slog.LevelInfo
	if decision == DecisionLookupFailed || decision == DecisionEnqueueFailed || decision == DecisionPolicyHold {
		level = slog.LevelWarn
	}
	r.log.LogAttrs(context.Background(), level, "reconciled",
		slog.String("decision", decision),
		slog.String("reason", reason),
		slog.String("delivery_id", d.ID.String()),
		slog.String("order_id", d.OrderID.String()),
		slog.String("template", d.Template),
		slog.String("key_hash", mail.KeyHash(d.IdempotencyKey)),
		slog.String("actor", r.cfg.Actor),
		slog.Int("attempt", d.Attempts),
	)
}

// resolveOneStale takes one expired sending row and decides about it in
// its own transaction. more is false when no such row is left.
func (r *Reconciler) resolveOneStale(ctx context.Context, rep *Report, undecided *[]uuid.UUID) (more bool, err error) {
	var requeue *notify.Delivery
	err = pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		d, found, err := notify.PickStaleSending(ctx, tx, *undecided)
		if err != nil || !found {
			return err
		}
		more = true
		p, known := r.providerOf(d)
		// pinned: the delivery's next attempts go to p alone, since the
		// outcome there is still unknown.
		toPending := func(decision string, pinned bool, reason string) error {
			if _, err := notify.ReconcileToPending(ctx, tx, d, p.Name, pinned, decision, reason, r.cfg.Actor); err != nil {
				return err
			}
			r.decide(rep, d, decision, reason)
			requeue = &d
			return nil
		}

		if d.HandedOverAt == nil {
			return toPending(DecisionNotHandedOver, d.ProviderPinned, "the worker's lease expired before it handed the message over; safe to send")
		}
		if !known {
			// Handed to a provider this reconciler was not given (taken
			// out of PROVIDERS, or the lists differ): nobody can ask it,
			// and no policy may send again what it may hold.
			reason := "outcome unknown at provider " + p.Name + ", which is not in this reconciler's PROVIDERS: check with it, then retry or mark sent"
			if _, err := notify.ReconcileToHeld(ctx, tx, d, p.Name, DecisionPolicyHold, reason, r.cfg.Actor); err != nil {
				return err
			}
			r.decide(rep, d, DecisionPolicyHold, reason)
			return nil
		}
		if p.Lookup == nil {
			// Counted from the earliest attempt whose outcome is
			// unknown: it, not the latest, may be the one the provider
			// took.
			earliest, _ := d.UnknownSince()
			if p.DedupWindow > 0 && time.Since(earliest) < p.DedupWindow {
				return toPending(DecisionDedupResend, true, "outcome unknown; provider "+p.Name+" refuses a second message under this delivery's key, so sending again through it is safe")
			}
			return r.applyPolicy(ctx, tx, rep, d, p, "no look-up at provider "+p.Name, toPending)
		}
		messageID := r.messageID(d)
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		providerID, found, err := p.Lookup.Find(lctx, mail.Query{MessageID: messageID, KeyHash: mail.KeyHash(d.IdempotencyKey), HandedOverAt: *d.HandedOverAt})
		cancel()
		if errors.Is(err, mail.ErrCannotTell) {
			// Asking again will not help (older than the provider keeps,
			// more matches than it pages through): settled as without a
			// look-up, not left sending where no operator reaches it.
			return r.applyPolicy(ctx, tx, rep, d, p, "provider "+p.Name+"'s look-up cannot tell: "+redactAddresses(err.Error(), messageID), toPending)
		}
		if err != nil {
			// Decide nothing on a failed look-up; the row stays stale (and
			// counted) until the provider answers. The rest of the pass
			// goes on without it. The error may quote the provider's reply,
			// and a reply may quote the recipient's address: the log line
			// gets it redacted, the delivery's own Message-ID (which looks
			// like an address) kept.
			r.decide(rep, d, DecisionLookupFailed, redactAddresses(err.Error(), messageID))
			*undecided = append(*undecided, d.ID)
			return nil
		}
		if !found {
			// Not at p now. A delivery that was not pinned had this one
			// unknown attempt: any provider may take the next. A pinned
			// one stays pinned: its earlier unknown attempts there may
			// lie outside what this search covers.
			return toPending(DecisionNotFound, d.ProviderPinned, "provider "+p.Name+" has no message with Message-ID "+messageID)
		}
		if _, err := notify.ReconcileToSent(ctx, tx, d, p.Name, providerID, DecisionFound, r.cfg.Actor); err != nil {
			return err
		}
		r.decide(rep, d, DecisionFound, "provider "+p.Name+" holds Message-ID "+messageID)
		return nil
	})
	if err != nil {
		return false, err
	}
	if requeue != nil {
		r.ensureQueued(ctx, rep, *requeue)
	}
	return more, nil
}

// messageID is the Message-ID the delivery's attempt stored; rows
// claimed by a worker older than that column have none, and get the one
// it would have built.
func (r *Reconciler) messageID(d notify.Delivery) string {
	if d.MessageID != "" {
		return d.MessageID
	}
	return mail.MessageID(d.IdempotencyKey, r.cfg.MessageIDDomain)
}

// redactAddresses is mail.RedactAddresses on s, except for keep.
func redactAddresses(s, keep string) string {
	if keep == "" {
		return mail.RedactAddresses(s)
	}
	parts := strings.Split(s, keep)
	for i, p := range parts {
		parts[i] = mail.RedactAddresses(p)
	}
	return strings.Join(parts, keep)
}

// providerOf is the provider whose answer settles d: the one its latest
// hand-over went to, or the first of the list for a hand-over recorded
// before providers were. known is false for a provider not in the list
// (taken out of PROVIDERS): it can be asked nothing.
func (r *Reconciler) providerOf(d notify.Delivery) (p Provider, known bool) {
	if d.Provider == "" && len(r.cfg.Providers) > 0 {
		return r.cfg.Providers[0], true
	}
	for _, p := range r.cfg.Providers {
		if p.Name == d.Provider {
			return p, true
		}
	}
	return Provider{Name: d.Provider}, false
}

func (r *Reconciler) applyPolicy(ctx context.Context, tx pgx.Tx, rep *Report, d notify.Delivery, p Provider, unknown string, toPending func(decision string, pinned bool, reason string) error) error {
	policy, ok := r.cfg.Policies[d.Template]
	if !ok {
		policy = r.cfg.DefaultPolicy
	}
	if policy == PolicyResend {
		return toPending(DecisionPolicyResend, true, "outcome unknown and "+unknown+"; template policy is resend (through it alone)")
	}
	reason := "outcome unknown and " + unknown + "; template policy is hold: check with the provider, then retry or mark sent"
	if _, err := notify.ReconcileToHeld(ctx, tx, d, p.Name, DecisionPolicyHold, reason, r.cfg.Actor); err != nil {
		return err
	}
	r.decide(rep, d, DecisionPolicyHold, reason)
	return nil
}

// requeueOrphans makes sure every pending row older than PendingAfter has
// a live task. The rows are locked while it works and touched, so that
// another reconciler skips them and the next pass looks at others.
func (r *Reconciler) requeueOrphans(ctx context.Context, rep *Report) error {
	return pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		ds, err := notify.PickOrphanedPending(ctx, tx, r.cfg.PendingAfter, r.cfg.Batch)
		if err != nil {
			return err
		}
		for _, d := range ds {
			r.ensureQueued(ctx, rep, d)
		}
		return nil
	})
}

func (r *Reconciler) ensureQueued(ctx context.Context, rep *Report, d notify.Delivery) {
	// A row taken back from a sending attempt (its status, as read, is
	// still sending) had a worker whose lease ran out: its task is dead.
	created, err := r.enqueuer.EnsureQueued(ctx, r.inspector, d, d.Status == notify.StatusSending)
	switch {
	case err != nil:
		r.decide(rep, d, DecisionEnqueueFailed, err.Error())
	case created && d.Status == notify.StatusPending:
		r.decide(rep, d, DecisionRequeued, "pending without a live task")
	case !created && d.Status == notify.StatusPending:
		rep.Decisions[DecisionAlreadyQueued]++
		r.decisions.WithLabelValues(DecisionAlreadyQueued).Inc()
	}
}
