// Package reconcile cleans up what crashes, lost Redis data and ambiguous
// sends leave behind, without ever causing a second e-mail: it re-queues
// pending deliveries whose task is gone, and decides about sending rows
// whose worker's lease expired, asking the provider where it can.
package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/metric"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/testmail"
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
	DecisionBatchReplay   = "batch_replay"          // the same, for a member of a batch: back to pending, sent again in its batch under the batch's key
	DecisionChanged       = "changed_meanwhile"     // the row changed between the read and the write: nothing written, judged again next pass
	// DecisionHeldBackUnknown: a pending row that may have been sent is
	// held back (too old, suppressed) and nothing can tell whether its
	// provider has it: held for an operator.
	DecisionHeldBackUnknown = "held_back_unknown"
)

// allDecisions lists every decision, in the order reports print them.
var allDecisions = []string{DecisionRequeued, DecisionAlreadyQueued, DecisionNotHandedOver, DecisionFound, DecisionNotFound,
	DecisionDedupResend, DecisionBatchReplay, DecisionPolicyResend, DecisionPolicyHold, DecisionHeldBackUnknown, DecisionLookupFailed, DecisionEnqueueFailed, DecisionChanged}

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
	// delivery whose tries began less than this long ago, and a pending
	// one that may have been sent and is older is settled, not sent.
	MaxAge time.Duration
	// Subscriptions are the subscription templates (their recipients can
	// unsubscribe), as the workers judge them.
	Subscriptions []string
	// Providers are the workers' providers (PROVIDERS), in their order:
	// an ambiguous send is settled at the provider that had it, and one
	// handed over before the provider was recorded at the first. New adds
	// the workers' test provider (test mode) after them.
	Providers []Provider
	// TestRetention deletes test orders (docs/testmode.md) settled and
	// untouched for that long, with their notifications and history, and
	// test mode's suppressions as old (TEST_RETENTION). Zero keeps them.
	TestRetention time.Duration
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

// Reconciler runs reconciliation passes. Several may run at once: each
// write is fenced on the row as its reconciler read it, so that of two
// that judged the same row only the first write takes effect, and they
// take the rows in orders of their own, so that they seldom judge the
// same one.
type Reconciler struct {
	db        *pgxpool.Pool
	enqueuer  *queue.Enqueuer
	inspector *asynq.Inspector
	cfg       Config
	log       *slog.Logger

	stale     prometheus.Gauge
	held      prometheus.Gauge
	decisions *prometheus.CounterVec
	passes    prometheus.Histogram
	cleaned   *prometheus.CounterVec
	// testFeedback counts the test provider's events (testFeedback).
	testFeedback *prometheus.CounterVec
}

// New returns a Reconciler.
func New(db *pgxpool.Pool, enq *queue.Enqueuer, ins *asynq.Inspector, cfg Config, log *slog.Logger, reg prometheus.Registerer) *Reconciler {
	// A test delivery whose worker stopped after its hand-over is judged
	// at the test provider, which never has it: it is sent to the test
	// provider again, which mails nobody.
	cfg.Providers = append(slices.Clip(cfg.Providers), Provider{Name: mail.TestProvider, Lookup: testmail.Lookup{}})
	r := &Reconciler{
		db: db, enqueuer: enq, inspector: ins, cfg: cfg, log: log,
		stale: metric.Gauge(reg, "sekali_stale_processing_records",
			"Deliveries in sending whose lease has expired, as of the last pass (before it acted)."),
		held: metric.Gauge(reg, "sekali_held_deliveries", "Deliveries held for an operator because their outcome is unknown."),
		decisions: metric.CounterVec(reg, "sekali_reconciler_decisions_total", "Reconciler decisions by kind.",
			[]string{"decision"}, allDecisions),
		passes: metric.Histogram(reg, "sekali_reconciler_pass_duration_seconds", "Time one reconciliation pass took.", prometheus.DefBuckets),
		cleaned: metric.CounterVec(reg, "sekali_cleanup_deleted_total",
			"Rows the retention clean-up deleted: expired idempotency keys, and finished deliveries past DELIVERY_RETENTION.",
			[]string{"table"}, []string{"idempotency_keys", "notification_deliveries", "test_orders", "test_suppressions"}),
		testFeedback: metric.CounterVec(reg, "sekali_test_feedback_total",
			"Events the test provider reported about test deliveries to magic recipients, through the providers' feedback path: delivered, deferred, bounced, complained, unsubscribed.",
			[]string{"kind"}, []string{"delivered", "deferred", "bounced", "complained", "unsubscribed"}),
	}
	return r
}

// Report counts the decisions of one pass.
type Report struct {
	Stale     int            // sending rows with an expired lease at the start
	Held      int            // held rows at the end
	Decisions map[string]int // by decision
	// Cleaned counts what the retention clean-up deleted.
	CleanedKeys, CleanedDeliveries int
	// CleanedTestOrders, CleanedTestSuppressions: the test retention's.
	CleanedTestOrders, CleanedTestSuppressions int
	// TestFeedback counts the test provider's events reported.
	TestFeedback int
}

func (rep Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stale_sending=%d held=%d cleaned_idempotency_keys=%d cleaned_deliveries=%d cleaned_test_orders=%d cleaned_test_suppressions=%d test_feedback=%d",
		rep.Stale, rep.Held, rep.CleanedKeys, rep.CleanedDeliveries, rep.CleanedTestOrders, rep.CleanedTestSuppressions, rep.TestFeedback)
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

	if err := r.settleStale(ctx, &rep); err != nil {
		return rep, err
	}
	if err := r.settleHeldBack(ctx, &rep); err != nil {
		return rep, err
	}
	if err := r.requeueOrphans(ctx, &rep); err != nil {
		return rep, err
	}
	if err := r.reportTestFeedback(ctx, &rep); err != nil {
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
	if r.cfg.TestRetention > 0 {
		if n, err = order.DeleteOldTestOrders(ctx, r.db, r.cfg.TestRetention, r.cfg.Batch); err != nil {
			return err
		}
		rep.CleanedTestOrders = n
		r.cleaned.WithLabelValues("test_orders").Add(float64(n))
		if n, err = notify.DeleteOldTestSuppressions(ctx, r.db, r.cfg.TestRetention); err != nil {
			return err
		}
		rep.CleanedTestSuppressions = n
		r.cleaned.WithLabelValues("test_suppressions").Add(float64(n))
	}
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

// reportTestFeedback is the test provider's webhook (docs/testmode.md):
// for each test delivery it took for a magic recipient (bounced@ the
// test domain, ...), a batch a pass, the event that recipient asks for,
// recorded through notify.RecordFeedback, the path every provider's
// verified webhook event takes, so that its history, suppression and
// outbound webhook are what a real provider's report would make. After
// the send, as a provider's report comes; once per delivery, by the
// event's id, however many reconcilers run.
func (r *Reconciler) reportTestFeedback(ctx context.Context, rep *Report) error {
	due, err := notify.TestFeedbackDue(ctx, r.db, testmail.MagicLocalParts, testmail.EventPrefix, r.cfg.Batch)
	if err != nil {
		return err
	}
	for _, d := range due {
		f, ok := testmail.FeedbackOf(d.DeliveryID.String(), d.Recipient, d.MessageID, d.ProviderMessageID, time.Now())
		if !ok {
			continue
		}
		out, err := notify.RecordFeedback(ctx, r.db, f)
		if err != nil {
			return fmt.Errorf("report the test provider's %s of delivery %s: %w", f.Kind, d.DeliveryID, err)
		}
		if !out.Duplicate {
			rep.TestFeedback++
			r.testFeedback.WithLabelValues(string(f.Kind)).Inc()
			r.log.Info("test feedback", "delivery_id", d.DeliveryID.String(), "kind", string(f.Kind), "suppressed", out.Suppressed)
		}
	}
	return nil
}

// record counts one decision in the metrics and the report, and logs it.
func (r *Reconciler) record(rep *Report, d notify.Delivery, decision, reason string) {
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

// settleStale decides about the sending rows whose lease expired, up to
// a batch: read, ask, write, a row at a time, holding no lock and no
// transaction in between. The rows are taken in an order of this pass's
// own, so that two reconcilers that listed the same rows mostly reach
// different ones first; a row settled meanwhile (by the other, or by a
// late worker) is no longer stale when its turn comes, and is passed
// over without a look-up.
func (r *Reconciler) settleStale(ctx context.Context, rep *Report) error {
	ids, err := notify.StaleSending(ctx, r.db, r.cfg.Batch)
	if err != nil {
		return err
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := r.settleOne(ctx, rep, id); err != nil {
			return err
		}
	}
	return nil
}

// settleOne reads one stale row, asks its provider if the decision needs
// it, and applies the decision, fenced on the row as read.
func (r *Reconciler) settleOne(ctx context.Context, rep *Report, id uuid.UUID) error {
	d, stale, err := notify.GetStaleSending(ctx, r.db, id)
	if err != nil || !stale {
		return err
	}
	policy, messageID, now := policyOf(r.cfg, d.Template), r.messageID(d), time.Now()
	return r.settle(ctx, rep, d, func(ans *answer) step { return decide(d, r.cfg.Providers, policy, messageID, ans, now) })
}

// settleHeldBack settles the pending rows that may have been sent and
// that the claim holds back (too old, suppressed, unsubscribed), up to a
// batch, as settleStale does the stale ones: the worker leaves them, and
// they must not be sent again, so their provider is asked.
func (r *Reconciler) settleHeldBack(ctx context.Context, rep *Report) error {
	hs, err := notify.HeldBackUnsettled(ctx, r.db, r.cfg.MaxAge, r.cfg.Subscriptions, r.cfg.Batch)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := ctx.Err(); err != nil {
			return err
		}
		messageID := r.messageID(h.Delivery)
		err := r.settle(ctx, rep, h.Delivery, func(ans *answer) step {
			return decideHeldBack(h.Delivery, h.Reason, r.cfg.Providers, messageID, ans)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// settle decides about d (asking its provider first when the decision
// needs it) and applies the decision, fenced on d as read.
func (r *Reconciler) settle(ctx context.Context, rep *Report, d notify.Delivery, decide func(*answer) step) error {
	s := decide(nil)
	if s.ask != nil {
		ans := lookUp(ctx, s.ask, s.query)
		s = decide(&ans)
	}
	applied, err := r.apply(ctx, d, s)
	if err != nil {
		return err
	}
	if !applied {
		// Someone wrote the row between the read and the write: a late
		// worker's outcome, another reconciler's decision, a new claim.
		// Whatever it is now, the next pass judges it afresh.
		r.record(rep, d, DecisionChanged, "the row changed after it was read; "+s.decision+" not written, left for the next pass")
		return nil
	}
	r.record(rep, d, s.decision, s.reason)
	switch {
	case s.decision == DecisionBatchReplay:
		r.queueBatch(ctx, rep, d)
	case s.to == notify.StatusPending:
		r.ensureQueued(ctx, rep, d)
	}
	return nil
}

// queueBatch gives the batch d was handed over in its task, once every
// member still due (pending or sending, naming the batch) is back to
// pending: the batch goes again only whole, in one task. The last of its
// members the reconciler takes back queues it.
func (r *Reconciler) queueBatch(ctx context.Context, rep *Report, d notify.Delivery) {
	members, err := notify.BatchMembers(ctx, r.db, d.HandoverBatch)
	if err != nil {
		r.record(rep, d, DecisionEnqueueFailed, err.Error())
		return
	}
	var due []notify.Delivery
	for _, m := range members {
		if m.HandoverBatch != d.HandoverBatch {
			continue
		}
		switch m.Status {
		case notify.StatusSending:
			return // not back yet: its turn queues the batch
		case notify.StatusPending:
			due = append(due, m)
		}
	}
	if err := r.enqueuer.EnqueueBatch(ctx, d.HandoverBatch, due); err != nil {
		r.record(rep, d, DecisionEnqueueFailed, err.Error())
	}
}

// lookupTimeout bounds one provider look-up.
const lookupTimeout = 10 * time.Second

// lookUp asks a provider about one message. It is given no database
// handle: no row is locked and no transaction is open while it waits.
func lookUp(ctx context.Context, l mail.Lookup, q mail.Query) answer {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	id, found, err := l.Find(ctx, q)
	return answer{providerID: id, found: found, err: err}
}

// apply writes step s for d, fenced on d as it was read: applied is false
// when the row changed since. A step without a transition (lookup_failed)
// writes nothing.
func (r *Reconciler) apply(ctx context.Context, d notify.Delivery, s step) (applied bool, err error) {
	switch s.to {
	case notify.StatusPending:
		return notify.ReconcileToPending(ctx, r.db, d, s.at, s.pinned, s.evidence, s.decision, s.reason, r.cfg.Actor)
	case notify.StatusSent:
		return notify.ReconcileToSent(ctx, r.db, d, s.at, s.providerID, s.decision, r.cfg.Actor)
	case notify.StatusHeld:
		return notify.ReconcileToHeld(ctx, r.db, d, s.at, s.decision, s.reason, r.cfg.Actor)
	case "":
		return true, nil
	}
	return false, fmt.Errorf("reconcile delivery %s: no transition to %s", d.ID, s.to)
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

// requeueOrphans makes sure every pending row older than PendingAfter has
// a live task. The rows are touched as they are read, so that another
// reconciler, and the next pass, look at others; no lock is held while
// the queue is asked. Those that need a task share tasks of many
// (queue.Enqueuer.EnsureAllQueued), each decided and counted on its own.
func (r *Reconciler) requeueOrphans(ctx context.Context, rep *Report) error {
	ds, err := notify.PickOrphanedPending(ctx, r.db, r.cfg.PendingAfter, r.cfg.Batch)
	if err != nil || len(ds) == 0 {
		return err
	}
	created, errs := r.enqueuer.EnsureAllQueued(ctx, r.inspector, ds)
	for i, d := range ds {
		r.recordQueued(rep, d, created[i], errs[i])
	}
	return nil
}

func (r *Reconciler) ensureQueued(ctx context.Context, rep *Report, d notify.Delivery) {
	// A row taken back from a sending attempt (its status, as read, is
	// still sending) had a worker whose lease ran out: its task is dead.
	created, err := r.enqueuer.EnsureQueued(ctx, r.inspector, d, d.Status == notify.StatusSending)
	r.recordQueued(rep, d, created, err)
}

// recordQueued counts what making sure d has a live task did.
func (r *Reconciler) recordQueued(rep *Report, d notify.Delivery, created bool, err error) {
	switch {
	case err != nil:
		r.record(rep, d, DecisionEnqueueFailed, err.Error())
	case created && d.Status == notify.StatusPending:
		r.record(rep, d, DecisionRequeued, "pending without a live task")
	case !created && d.Status == notify.StatusPending:
		rep.Decisions[DecisionAlreadyQueued]++
		r.decisions.WithLabelValues(DecisionAlreadyQueued).Inc()
	}
}
