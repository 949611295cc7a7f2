package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// The delivery state machine. Every write that changes a delivery's
// status is in this file — the API's, the worker's, the operator's and
// the reconciler's — and its SQL, in the same order, in
// db/queries/transitions.sql. One creation is elsewhere: the checkout
// writes its order, lines and pending delivery in a single statement
// (InsertCheckout and InsertKeyedCheckout in db/queries/orders.sql, one
// round trip per checkout), with the row's values built here by
// Intent.Prepare, so that Record and the checkout cannot write different
// rows. Each is one conditional statement that also
// writes the delivery_events row, so a transition that no longer applies
// (the lease was taken over, an operator got there first) changes
// nothing and the history cannot disagree with the row. The worker's
// three statements on the way to a send (claimAll, handOverAll,
// markSentAll) each take many rows, for the attempts that reach them at
// once (batch.go); each row is still fenced on its own lease.
//
//	from     to       who         when                                                  func
//	-        pending  API         the business event commits with its intent            Record (checkout: Prepare)
//	pending  sending  worker      claim: no block; lease and (first time) Message-ID    claimAll
//	sending  sending  worker      claim of an expired lease never handed over           claimAll
//	sending  sending  worker      last lease check before the data (handed_over_at)    handOverAll
//	sending  sent     worker      the provider accepted the message                     markSentAll
//	sending  pending  worker      refused before the data, or deferred: retry later     release
//	sending  failed   worker      refused for good for this recipient, or past max age  markFailed
//	sending  held     worker      the template cannot render the stored data, or an     holdAttempt
//	                              unknown attempt's resend window (Resend) has passed
//	sending  sending  worker      no answer after the data: ambiguous, for the reconciler markAmbiguous
//	sending  sending  worker      found a dead attempt that had handed over             noteAmbiguous
//	pending  failed   worker      tries began more than DELIVERY_MAX_AGE ago            expirePending
//	pending  suppressed worker    the recipient is on the suppression list              suppressPending
//	pending  suppressed worker    a subscription template, and the recipient left it    SuppressUnsubscribed (apply)
//	sending  suppressed worker    either, on an attempt that died before its hand-over  (the same two)
//	pending  cancelled API/operator called off before it was claimed, no attempt of it  Cancel, CancelTemplate
//	                              possibly taken (one, or a template's); the API: its
//	                              owner's key only
//	failed   pending  operator    retry, same key, a new DELIVERY_MAX_AGE               operatorRetry
//	held     pending  operator    retry                                                 operatorRetry
//	suppressed pending operator   retry, once the recipient is off the list             operatorRetry
//	held     sent     operator    found at the provider                                 operatorMarkSent
//	sending  pending  reconciler  expired lease: not handed over, or not at the provider ReconcileToPending
//	sending  sent     reconciler  expired lease, and the provider has the message        ReconcileToSent
//	sending  held     reconciler  expired lease, no look-up, template policy hold        ReconcileToHeld
//
// sent, failed and suppressed are final for the worker and the
// reconciler; only an operator moves failed, held or suppressed back to
// pending, and nothing moves sent or cancelled.

// errLeaseLost: the row's lease is no longer ours: another worker (or the
// reconciler) took over, and this attempt must write nothing more.
var errLeaseLost = errors.New("lease taken over by another worker")

// fenced turns a conditional write's row count into errLeaseLost.
func fenced(rows int64, err error) error {
	if err != nil {
		return err
	}
	if rows == 0 {
		return errLeaseLost
	}
	return nil
}

// recordIntent inserts a pending delivery as Intent.prepare built it;
// created is false when its key exists already (or was retired), and
// nothing is written then.
func recordIntent(ctx context.Context, q *dbsqlc.Queries, d Delivery) (dbsqlc.NotificationDelivery, bool, error) {
	var locale *string
	if d.Locale != "" {
		locale = &d.Locale
	}
	row, err := q.InsertDelivery(ctx, dbsqlc.InsertDeliveryParams{
		ID: d.ID, OrderID: d.OrderID, Template: d.Template, Recipient: d.Recipient,
		IdempotencyKey: d.IdempotencyKey, TemplateData: d.Data, CreatedAt: d.CreatedAt, Actor: "api", Locale: locale,
		NotBefore: d.NotBefore, OwnerID: d.Owner,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return dbsqlc.NotificationDelivery{}, false, nil
	}
	return dbsqlc.NotificationDelivery(row), err == nil, err
}

// lease is one attempt's hold on a row: its token fences every write.
type lease struct {
	token uuid.UUID
	ttl   time.Duration
	actor string // the worker's id, for the history
}

// claimAll judges the deliveries of cs and takes those it may for one
// attempt each, in one statement (a worker's claims that came together:
// batch): rows[i] is cs[i]'s row, with the claim's verdict on it
// (verdictClaimed when it was taken), nil when there is no such row. The
// claims share the worker's lease length, templates, max age and actor,
// which cs[0] gives.
func claimAll(ctx context.Context, q *dbsqlc.Queries, cs []claimArgs) ([]*dbsqlc.ClaimDeliveriesRow, error) {
	p := dbsqlc.ClaimDeliveriesParams{
		LeaseSeconds: cs[0].lease.ttl.Seconds(), Templates: cs[0].templates, MaxAgeSeconds: cs[0].maxAge.Seconds(), Actor: cs[0].lease.actor,
		SubscriptionTemplates: cs[0].subscriptions, UsableProviders: cs[0].usable,
	}
	// A delivery asked for twice (its task delivered twice at once) is
	// judged once, for the first claim: the statement takes distinct ids.
	first := make(map[uuid.UUID]int, len(cs))
	for i, c := range cs {
		if _, seen := first[c.id]; seen {
			continue
		}
		first[c.id] = i
		p.Ids, p.KeyHashes, p.LeaseTokens = append(p.Ids, c.id), append(p.KeyHashes, c.keyHash), append(p.LeaseTokens, c.lease.token)
		p.MessageIds, p.TaskIds = append(p.MessageIds, c.messageID), append(p.TaskIds, c.taskID)
	}
	judged, err := q.ClaimDeliveries(ctx, p)
	if err != nil {
		return nil, err
	}
	rows := make([]*dbsqlc.ClaimDeliveriesRow, len(cs))
	for i := range judged { // one row at most per id: the first claim's
		rows[first[judged[i].ID]] = &judged[i]
	}
	for i, c := range cs {
		if f := first[c.id]; f != i && rows[f] != nil {
			// The later claim meets the row as the first left it: taken
			// by the first claim's attempt, or judged the same.
			r := *rows[f]
			if verdict(r.Verdict) == verdictClaimed {
				r.Verdict = string(verdictLeased)
			}
			rows[i] = &r
		}
	}
	return rows, nil
}

// claimArgs is what a claim checks and writes: the task's delivery and
// key hash, the templates the worker has, the deliveries' max age, and
// the attempt's lease, Message-ID and task.
type claimArgs struct {
	id                         uuid.UUID
	keyHash, messageID, taskID string
	lease                      lease
	templates                  []string
	subscriptions              []string // the subscription templates among them
	usable                     []string // the providers that take mail from this worker now
	maxAge                     time.Duration
}

// leased names an attempt's row and lease.
type leased struct {
	id    uuid.UUID
	lease lease
}

// handOver is an attempt at its last lease check, and the provider it
// is about to hand the message to.
type handOver struct {
	leased
	provider string
}

// handOverAll is the last lease check before the data, for every attempt
// of hs at once, and records that its provider may have each message
// from now on: ok[i] reports whether hs[i] still held its lease (and may
// send). The attempts share the worker's lease length and actor.
func handOverAll(ctx context.Context, q *dbsqlc.Queries, hs []handOver) ([]bool, error) {
	p := dbsqlc.HandOverDeliveriesParams{LeaseSeconds: hs[0].lease.ttl.Seconds(), Actor: hs[0].lease.actor}
	ls := make([]leased, len(hs))
	for i, h := range hs {
		p.Ids, p.LeaseTokens, p.Providers = append(p.Ids, h.id), append(p.LeaseTokens, h.lease.token), append(p.Providers, h.provider)
		ls[i] = h.leased
	}
	rows, err := q.HandOverDeliveries(ctx, p)
	if err != nil {
		return nil, err
	}
	return heldBy(ls, rows), nil
}

// sentArgs is an acceptance to record: the attempt, the provider's id
// for the message and the language it was written in.
type sentArgs struct {
	leased
	providerID, language string
}

// markSentAll records the provider's acceptance of every attempt of ss
// at once, and in the history the language each e-mail was written in:
// ok[i] reports whether ss[i] still held its lease (false: fenced out).
func markSentAll(ctx context.Context, q *dbsqlc.Queries, ss []sentArgs) ([]bool, error) {
	p := dbsqlc.MarkSentDeliveriesParams{Actor: ss[0].lease.actor}
	ls := make([]leased, len(ss))
	for i, s := range ss {
		p.Ids, p.LeaseTokens = append(p.Ids, s.id), append(p.LeaseTokens, s.lease.token)
		p.ProviderMessageIds, p.Languages = append(p.ProviderMessageIds, providerIDText(s.providerID)), append(p.Languages, s.language)
		ls[i] = s.leased
	}
	rows, err := q.MarkSentDeliveries(ctx, p)
	if err != nil {
		return nil, err
	}
	return heldBy(ls, rows), nil
}

// providerIDText is a provider's id for a message as stored: the
// provider's own bytes (an SMTP server's "queued as" token, a JSON
// string) may hold what PostgreSQL's text refuses, and an acceptance
// must be recorded whatever its id looks like.
func providerIDText(id string) string { return textrule.Clip(id, 1000) }

// leasedRow is what the hand-over and sent statements return for each
// row they wrote: the delivery and the lease it was written under.
type leasedRow = struct {
	ID         uuid.UUID
	LeaseToken *uuid.UUID
}

// heldBy reports, for each attempt of ls, whether a statement's rows
// came back with its lease token: whether it still held the row.
func heldBy[R dbsqlc.HandOverDeliveriesRow | dbsqlc.MarkSentDeliveriesRow](ls []leased, rows []R) []bool {
	ok := make([]bool, len(ls))
	for _, r := range rows {
		t := leasedRow(r).LeaseToken
		for i, l := range ls {
			if t != nil && *t == l.lease.token {
				ok[i] = true
			}
		}
	}
	return ok
}

// extendLease renews the lease while a send runs (no status change).
func extendLease(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, l lease) {
	_, _ = q.ExtendLease(ctx, dbsqlc.ExtendLeaseParams{ID: id, LeaseToken: l.token, LeaseSeconds: l.ttl.Seconds()})
}

// release puts the delivery back to pending for a later attempt; with
// refund the attempt does not count (it never reached the recipient).
// provider is the one the attempt went to, for the history; "" if none.
// With pin, the next attempts go to that provider alone: it may have the
// message.
func release(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, l lease, provider, reason string, refund, pin bool) error {
	return fenced(q.ReleaseForRetry(ctx, dbsqlc.ReleaseForRetryParams{ID: id, LeaseToken: l.token, LastError: reason, Provider: provider,
		Actor: l.actor, RefundAttempt: refund, Pin: pin}))
}

func markFailed(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, l lease, provider, reason string) error {
	return fenced(q.MarkFailed(ctx, dbsqlc.MarkFailedParams{ID: id, LeaseToken: l.token, LastError: reason, Provider: provider, Actor: l.actor}))
}

func holdAttempt(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, l lease, reason string) error {
	return fenced(q.HoldAttempt(ctx, dbsqlc.HoldAttemptParams{ID: id, LeaseToken: l.token, LastError: reason, Actor: l.actor}))
}

// markAmbiguous leaves the row sending, with the reason, for the
// reconciler; its lease runs one more TTL so that a provider still busy
// with the message has time to finish before it is asked.
func markAmbiguous(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, l lease, provider, reason string) error {
	return fenced(q.MarkAmbiguous(ctx, dbsqlc.MarkAmbiguousParams{ID: id, LeaseToken: l.token, LastError: reason, Provider: provider,
		Actor: l.actor, LeaseSeconds: l.ttl.Seconds()}))
}

// noteAmbiguous records why a worker that found a dead, handed-over
// attempt did not send.
func noteAmbiguous(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, reason, actor string) error {
	_, err := q.NoteAmbiguous(ctx, dbsqlc.NoteAmbiguousParams{ID: id, LastError: reason, Actor: actor})
	return err
}

// errRaced: a conditional write on a row the claim did not take no
// longer applied: someone changed the row in between.
var errRaced = errors.New("delivery changed between the claim and the write")

// raced turns the row count of a write on a row the claim did not take
// into errRaced, as fenced does for the attempt's own row.
func raced(rows int64, err error) error {
	if err == nil && rows == 0 {
		return errRaced
	}
	return err
}

// expirePending fails a pending delivery whose tries began more than
// maxAge ago; errRaced when it changed meanwhile.
func expirePending(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, maxAge time.Duration, reason, actor string) error {
	return raced(q.ExpirePending(ctx, dbsqlc.ExpirePendingParams{ID: id, LastError: reason, MaxAgeSeconds: maxAge.Seconds(), Actor: actor}))
}

// suppressPending marks a pending delivery to a suppressed recipient;
// errRaced when the recipient is not on the list (or the delivery is no
// longer pending).
func suppressPending(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID, actor string) error {
	return raced(q.SuppressPending(ctx, dbsqlc.SuppressPendingParams{ID: id, Actor: actor}))
}

// operatorRetry gives a failed or held delivery a fresh series of tries
// under the same key.
func operatorRetry(ctx context.Context, db DB, id uuid.UUID, actor, note string, unpin bool) (Delivery, error) {
	row, err := dbsqlc.New(db).OperatorRetry(ctx, dbsqlc.OperatorRetryParams{ID: id, Actor: actor, Note: note, Unpin: unpin})
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, stateError(ctx, db, id)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("retry delivery %s: %w", id, err)
	}
	return fromRow(dbsqlc.NotificationDelivery(row)), nil
}

// operatorMarkSent records that a held delivery was in fact accepted.
func operatorMarkSent(ctx context.Context, db DB, id uuid.UUID, providerMessageID, actor, note string) (Delivery, error) {
	row, err := dbsqlc.New(db).OperatorMarkSent(ctx, dbsqlc.OperatorMarkSentParams{
		ID: id, ProviderMessageID: providerMessageID, Actor: actor, Note: note,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, stateError(ctx, db, id)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("mark delivery %s sent: %w", id, err)
	}
	return fromRow(dbsqlc.NotificationDelivery(row)), nil
}

// Canceller is who calls deliveries off: an operator, who may call off
// any, or an API key, which may call off only what its owner made
// (Delivery.Owner), and what was recorded before owners were.
type Canceller struct {
	Actor    string    // the history's name for it
	Operator bool      // an operator: any delivery
	Owner    uuid.UUID // an API key's owner (apikey.Key.Owner)
	// NotAtProvider: the operator checked the log of the provider a
	// delivery is pinned to, and it does not hold the message, so one
	// that may have been sent is cancelled all the same (a retry's unpin,
	// for a cancel). The history records which provider was checked.
	NotAtProvider bool
}

// Owns reports whether c may call d off, whatever d's status: nobody but
// an operator owns the public checkout's. The statements CancelDelivery
// and CancelPendingOfTemplate hold the same rule.
func (c Canceller) Owns(d Delivery) bool {
	return c.Operator || d.Owner == nil || (*d.Owner == c.Owner && c.Owner != PublicOwner)
}

// Cancel calls a pending delivery off, for c with note (may be empty),
// in one statement with its history row. Cancelled says that no provider
// has the message, so only a delivery no attempt of which may have been
// accepted is cancelled. One already cancelled is returned as it is
// (cancelling twice is cancelling once); one a provider may hold is
// ErrMayHaveBeenSent, one in any other status ErrWrongState, both with
// the delivery, so that the caller can say where it stands; a missing
// one, or one that is not c's to cancel, ErrNotFound.
func Cancel(ctx context.Context, db DB, id uuid.UUID, c Canceller, note string) (Delivery, error) {
	row, err := dbsqlc.New(db).CancelDelivery(ctx, dbsqlc.CancelDeliveryParams{
		ID: id, Actor: c.Actor, Note: note, ByOperator: c.Operator, Owner: c.Owner, NotAtProvider: c.NotAtProvider,
	})
	if err == nil {
		return fromRow(dbsqlc.NotificationDelivery(row)), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, fmt.Errorf("cancel delivery %s: %w", id, err)
	}
	d, err := Get(ctx, db, id)
	switch {
	case err != nil:
		return Delivery{}, err
	case !c.Owns(d):
		return Delivery{}, ErrNotFound
	case d.Status == StatusCancelled:
		return d, nil
	case d.Status == StatusPending && d.MayHaveBeenSent():
		since, _ := d.UnknownSince()
		return d, fmt.Errorf("%w: an attempt handed over to %s at %s has no known outcome", ErrMayHaveBeenSent,
			d.Provider, since.UTC().Format(time.RFC3339))
	}
	return d, fmt.Errorf("%w: it is %s", ErrWrongState, d.Status)
}

// CancelTemplate calls off every pending delivery of template for one
// order that c may cancel and no provider may hold, in one statement,
// and says how many it cancelled.
func CancelTemplate(ctx context.Context, db DB, orderID uuid.UUID, template string, c Canceller) (int, error) {
	n, err := dbsqlc.New(db).CancelPendingOfTemplate(ctx, dbsqlc.CancelPendingOfTemplateParams{
		OrderID: orderID, Template: template, Actor: c.Actor, ByOperator: c.Operator, Owner: c.Owner,
	})
	if err != nil {
		return 0, fmt.Errorf("cancel %s of order %s: %w", template, orderID, err)
	}
	return int(n), nil
}

// stateError tells a missing delivery from one in the wrong state.
func stateError(ctx context.Context, db DB, id uuid.UUID) error {
	d, err := Get(ctx, db, id)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: it is %s", ErrWrongState, d.Status)
}

// The reconciler's three transitions take a sending delivery whose lease
// expired, as GetStaleSending read it, and are fenced on that read: they
// change nothing (ok false) when the row changed meanwhile — its lease
// renewed or taken, its status, its hand-over, provider, pin or earliest
// unknown attempt, or anything else that moves updated_at. The reconciler
// holds no lock between the read and the write (it asks the provider in
// between), so this fence is what keeps a late worker's outcome, or
// another reconciler's decision, from being overwritten.

// ReconcileToPending takes back a sending delivery whose lease expired,
// so that it is sent (again).
//
// at is the provider the reconciler judged it at (its latest hand-over's,
// or the first of the list); pinned, whether the delivery must go there
// alone from now on, because the outcome there is still unknown.
func ReconcileToPending(ctx context.Context, db DB, d Delivery, at string, pinned bool, decision, reason, actor string) (ok bool, err error) {
	return reconciled(d, "reset", func(lease uuid.UUID) (int64, error) {
		return dbsqlc.New(db).ReconcileToPending(ctx, dbsqlc.ReconcileToPendingParams{
			ID: d.ID, LeaseToken: lease, Provider: at, Pinned: pinned, Reason: reason, Decision: decision, Actor: actor,
			SeenUpdatedAt: d.UpdatedAt, SeenHandedOverAt: d.HandedOverAt, SeenProvider: d.Provider,
			SeenPinned: d.ProviderPinned, SeenUnsettledSince: d.UnsettledSince,
		})
	})
}

// ReconcileToSent records a sending delivery whose lease expired as sent:
// the provider holds the message.
func ReconcileToSent(ctx context.Context, db DB, d Delivery, at, providerID, decision, actor string) (ok bool, err error) {
	return reconciled(d, "mark sent", func(lease uuid.UUID) (int64, error) {
		return dbsqlc.New(db).ReconcileToSent(ctx, dbsqlc.ReconcileToSentParams{
			ID: d.ID, LeaseToken: lease, ProviderMessageID: providerIDText(providerID), Provider: at, Decision: decision, Actor: actor,
			SeenUpdatedAt: d.UpdatedAt, SeenHandedOverAt: d.HandedOverAt, SeenProvider: d.Provider,
			SeenPinned: d.ProviderPinned, SeenUnsettledSince: d.UnsettledSince,
		})
	})
}

// ReconcileToHeld parks a sending delivery whose lease expired and whose
// outcome nobody can tell, for an operator; an operator's retry goes to
// provider at alone (pinned).
func ReconcileToHeld(ctx context.Context, db DB, d Delivery, at, decision, reason, actor string) (ok bool, err error) {
	return reconciled(d, "hold", func(lease uuid.UUID) (int64, error) {
		return dbsqlc.New(db).ReconcileToHeld(ctx, dbsqlc.ReconcileToHeldParams{
			ID: d.ID, LeaseToken: lease, Provider: at, Reason: reason, Decision: decision, Actor: actor,
			SeenUpdatedAt: d.UpdatedAt, SeenHandedOverAt: d.HandedOverAt, SeenProvider: d.Provider,
			SeenPinned: d.ProviderPinned, SeenUnsettledSince: d.UnsettledSince,
		})
	})
}

// reconciled runs one of the reconciler's writes, fenced on the delivery
// as it was read.
func reconciled(d Delivery, what string, write func(lease uuid.UUID) (int64, error)) (bool, error) {
	if d.leaseToken == nil {
		return false, fmt.Errorf("%s delivery %s: it has no lease", what, d.ID)
	}
	n, err := write(*d.leaseToken)
	if err != nil {
		return false, fmt.Errorf("%s delivery %s: %w", what, d.ID, err)
	}
	return n == 1, nil
}
