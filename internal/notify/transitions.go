package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// nothing and the history cannot disagree with the row. The worker
// writes through three statements, each for every delivery of a task at
// once (ClaimAll, HandOverAll, CompleteAll); each row is still fenced on
// its own lease.
//
// The table is Transitions, below: every status and every move between
// them, who makes it and the function that writes it. docs/architecture.md
// shows the same table, and TestTheDocsShowTheStateTable holds the two
// (and the functions it names) together.

// Transition is one move of the state machine.
type Transition struct {
	From []Status // none: the delivery comes into being
	To   Status
	Who  string // the API, the worker, an operator, the reconciler
	When string
	// Funcs are the functions of this package that write it.
	Funcs []string
}

// Transitions is the delivery state machine: every status a delivery
// has, every move between them, who makes it and where it is written.
// sent and cancelled are final; failed, held and suppressed move only by
// an operator's hand.
var Transitions = []Transition{
	{nil, StatusPending, "API", "the business event commits with its intent (the checkout writes it in its own one statement, InsertCheckout, from Intent.Prepare)", []string{"Record", "Intent.Prepare"}},
	{[]Status{StatusPending}, StatusSending, "worker", "claim: its time has come (not_before, from send_at), no block; a fresh lease and, the first time, the stored Message-ID", []string{"ClaimAll"}},
	{[]Status{StatusSending}, StatusSending, "worker", "claim of an expired lease that was never handed over (the worker died before the data)", []string{"ClaimAll"}},
	{[]Status{StatusSending}, StatusSending, "worker", "the last lease check before the data (handed_over_at), with what the message is: its subject, language and template version", []string{"HandOverAll"}},
	{[]Status{StatusSending}, StatusSent, "worker", "the provider accepted the message", []string{"CompleteAll"}},
	{[]Status{StatusSending}, StatusPending, "worker", "refused before the data, the provider refusing us, or deferred: try later; pinned to the provider when it may have taken it (a 5xx after the request, at a provider that refuses a second message under our key)", []string{"CompleteAll"}},
	{[]Status{StatusSending}, StatusFailed, "worker", "refused for good for this recipient, or deferred past DELIVERY_MAX_AGE, and no earlier attempt's outcome is unknown", []string{"CompleteAll"}},
	{[]Status{StatusSending}, StatusHeld, "worker", "the template cannot render the stored data, the provider's window for a second message under our key has passed since an attempt whose outcome is unknown, or it is refused now while an earlier attempt's outcome is unknown", []string{"CompleteAll"}},
	{[]Status{StatusSending}, StatusSending, "worker", "no answer after the data (ambiguous), or a dead attempt found that had handed over: left for the reconciler", []string{"CompleteAll", "NoteAmbiguous"}},
	{[]Status{StatusPending}, StatusFailed, "worker", "tries began more than DELIVERY_MAX_AGE ago (expired), and no attempt may have reached a provider", []string{"ExpirePending"}},
	{[]Status{StatusPending, StatusSending}, StatusSuppressed, "worker", "the recipient is on the suppression list (a hard bounce, a complaint, an operator), or left a subscription template's mail; a sending row only if its attempt died before its hand-over; never one that may have been sent", []string{"SuppressPending", "SuppressUnsubscribed"}},
	{[]Status{StatusPending}, StatusCancelled, "API (the notification's owner), operator", "called off before a worker claimed it, and no attempt of it may have reached a provider (an operator may say it did not, having checked)", []string{"Cancel", "CancelTemplate"}},
	{[]Status{StatusFailed, StatusHeld, StatusSuppressed}, StatusPending, "operator", "retry: same key, a new DELIVERY_MAX_AGE; suppressed once the recipient is off the list", []string{"operatorRetry"}},
	{[]Status{StatusHeld}, StatusSent, "operator", "found at the provider (mark-sent)", []string{"operatorMarkSent"}},
	{[]Status{StatusPending, StatusHeld}, StatusSent, "API (a provider's report)", "in doubt, no attempt sending it, and the provider reports about the message (delivered, deferred, bounced, complained): it took it", []string{"RecordFeedback"}},
	{[]Status{StatusSending, StatusPending}, StatusPending, "reconciler", "expired lease: not handed over, not at the provider, or policy resend (pinned where the outcome stays unknown); a pending row that may have been sent and is held back (too old, suppressed): not at the provider, unpinned on that evidence", []string{"ReconcileToPending"}},
	{[]Status{StatusSending, StatusPending}, StatusSent, "reconciler", "expired lease, or held back while it may have been sent, and the provider has the message", []string{"ReconcileToSent"}},
	{[]Status{StatusSending, StatusPending}, StatusHeld, "reconciler", "expired lease, no look-up (or one that can never tell), policy hold; held back while it may have been sent, and nothing can tell", []string{"ReconcileToHeld"}},
}

// ErrLeaseLost: the row's lease is no longer ours: another worker (or the
// reconciler) took over, and this attempt must write nothing more.
var ErrLeaseLost = errors.New("lease taken over by another worker")

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
		NotBefore: d.NotBefore, OwnerID: d.Owner, Test: d.Test,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return dbsqlc.NotificationDelivery{}, false, nil
	}
	return dbsqlc.NotificationDelivery(row), err == nil, err
}

// ---- The worker (internal/worker): a task's attempts. ----
//
// Each row is written under its attempt's lease, which fences the write:
// a row another worker, or the reconciler, took is left as it is, and
// the attempt writes nothing more. A write on a row the claim did not
// take is conditional on what the claim saw: ErrRaced when the row
// changed in between.

// Lease is one attempt's hold on a row: its token fences every write.
type Lease struct {
	Token uuid.UUID
	TTL   time.Duration
	Actor string // the worker's id, for the history
}

// Verdict is the claim's judgement of a row (ClaimDeliveries in
// db/queries/transitions.sql says when each is given): what the worker
// decides from when the claim took nothing (internal/worker's
// decideUnclaimed), without restating it.
type Verdict string

const (
	VerdictClaimed         Verdict = "claimed"
	VerdictNotTask         Verdict = "not_task"
	VerdictSettled         Verdict = "settled"
	VerdictLeased          Verdict = "leased"
	VerdictHandedOver      Verdict = "handed_over"
	VerdictNotYet          Verdict = "not_yet"
	VerdictUnknownTemplate Verdict = "unknown_template"
	VerdictTooOld          Verdict = "too_old"
	VerdictSuppressed      Verdict = "suppressed"
	VerdictUnsubscribed    Verdict = "unsubscribed"
	VerdictBlocked         Verdict = "blocked"
	VerdictPinnedElsewhere Verdict = "pinned_elsewhere"
)

// Claim is what a claim checks and writes: the task's delivery and key
// hash, the templates the worker has, the deliveries' max age, and the
// attempt's lease, Message-ID and task.
type Claim struct {
	ID                         uuid.UUID
	KeyHash, MessageID, TaskID string
	Lease                      Lease
	Templates                  []string
	Subscriptions              []string // the subscription templates among them
	Usable                     []string // the providers that take mail from this worker now
	MaxAge                     time.Duration
}

// Judged is a row as a claim judged it: the delivery (as taken, when
// Verdict is VerdictClaimed), the claim's verdict, and the status it was
// taken from.
type Judged struct {
	Delivery   Delivery
	Verdict    Verdict
	FromStatus Status
}

// ClaimAll judges the deliveries of cs and takes those it may for one
// attempt each, in one statement (a worker's claims that came together):
// out[i] is cs[i]'s row with the claim's verdict on it, nil when there is
// no such row. The claims share the worker's lease length, templates,
// max age and actor, which cs[0] gives.
func ClaimAll(ctx context.Context, db DB, cs []Claim) ([]*Judged, error) {
	p := dbsqlc.ClaimDeliveriesParams{
		LeaseSeconds: cs[0].Lease.TTL.Seconds(), Templates: cs[0].Templates, MaxAgeSeconds: cs[0].MaxAge.Seconds(), Actor: cs[0].Lease.Actor,
		SubscriptionTemplates: cs[0].Subscriptions, UsableProviders: cs[0].Usable,
	}
	// A delivery asked for twice (its task delivered twice at once) is
	// judged once, for the first claim: the statement takes distinct ids.
	first := make(map[uuid.UUID]int, len(cs))
	for i, c := range cs {
		if _, seen := first[c.ID]; seen {
			continue
		}
		first[c.ID] = i
		p.Ids, p.KeyHashes, p.LeaseTokens = append(p.Ids, c.ID), append(p.KeyHashes, c.KeyHash), append(p.LeaseTokens, c.Lease.Token)
		p.MessageIds, p.TaskIds = append(p.MessageIds, c.MessageID), append(p.TaskIds, c.TaskID)
	}
	rows, err := dbsqlc.New(db).ClaimDeliveries(ctx, p)
	if err != nil {
		return nil, err
	}
	out := make([]*Judged, len(cs))
	for _, r := range rows { // one row at most per id: the first claim's
		out[first[r.ID]] = &Judged{Delivery: fromJudged(r), Verdict: Verdict(r.Verdict), FromStatus: Status(r.FromStatus)}
	}
	for i, c := range cs {
		if f := first[c.ID]; f != i && out[f] != nil {
			// The later claim meets the row as the first left it: taken
			// by the first claim's attempt, or judged the same.
			j := *out[f]
			if j.Verdict == VerdictClaimed {
				j.Verdict = VerdictLeased
			}
			out[i] = &j
		}
	}
	return out, nil
}

// fromJudged is the delivery of a row the claim judged.
func fromJudged(r dbsqlc.ClaimDeliveriesRow) Delivery {
	return fromRow(dbsqlc.NotificationDelivery{
		ID: r.ID, OrderID: r.OrderID, Template: r.Template, Recipient: r.Recipient, IdempotencyKey: r.IdempotencyKey,
		Status: r.Status, Attempts: r.Attempts, LastError: r.LastError, LeaseToken: r.LeaseToken,
		LeaseExpiresAt: r.LeaseExpiresAt, HandedOverAt: r.HandedOverAt, ProviderMessageID: r.ProviderMessageID,
		TemplateData: r.TemplateData, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, SentAt: r.SentAt,
		MessageID: r.MessageID, TryingSince: r.TryingSince, Locale: r.Locale, NotBefore: r.NotBefore,
		Provider: r.Provider, ProviderPinned: r.ProviderPinned, UnsettledSince: r.UnsettledSince,
		HandoverBatch: r.HandoverBatch, Test: r.Test,
	})
}

// Leased names an attempt's row and lease.
type Leased struct {
	ID    uuid.UUID
	Lease Lease
}

// HandOverArgs is an attempt at its last lease check, the provider it is
// about to hand the message to, and what the message is, for the
// history: its subject, its language and the digest of the template
// version that rendered it.
type HandOverArgs struct {
	Leased
	Provider                   string
	Subject, Language, Version string
	// Batch is the key of the batch at the provider the message goes in
	// (mail.Batch.Key), "" when it goes alone. The batch's members in
	// order are those of one HandOverAll call with that key whose lease
	// held: the caller hands over a batch's members together.
	Batch string
}

// HandOverAll is the last lease check before the data, for every attempt
// of hs at once, and records that its provider may have each message
// from now on: ok[i] reports whether hs[i] still held its lease (and may
// send). The attempts share the worker's lease length and actor.
func HandOverAll(ctx context.Context, db DB, hs []HandOverArgs) ([]bool, error) {
	p := dbsqlc.HandOverDeliveriesParams{LeaseSeconds: hs[0].Lease.TTL.Seconds(), Actor: hs[0].Lease.Actor}
	ls := make([]Leased, len(hs))
	for i, h := range hs {
		p.Ids, p.LeaseTokens, p.Providers = append(p.Ids, h.ID), append(p.LeaseTokens, h.Lease.Token), append(p.Providers, h.Provider)
		p.Subjects, p.Languages = append(p.Subjects, textrule.Clip(h.Subject, 1000)), append(p.Languages, h.Language)
		p.TemplateVersions, p.BatchKeys = append(p.TemplateVersions, h.Version), append(p.BatchKeys, h.Batch)
		ls[i] = h.Leased
	}
	rows, err := dbsqlc.New(db).HandOverDeliveries(ctx, p)
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

// leasedRow is what the hand-over statement returns for each row it
// wrote: the delivery and the lease it was written under.
type leasedRow = struct {
	ID         uuid.UUID
	LeaseToken *uuid.UUID
}

// heldBy reports, for each attempt of ls, whether a statement's rows
// came back with its lease token: whether it still held the row.
func heldBy(ls []Leased, rows []dbsqlc.HandOverDeliveriesRow) []bool {
	ok := make([]bool, len(ls))
	for _, r := range rows {
		t := leasedRow(r).LeaseToken
		for i, l := range ls {
			if t != nil && *t == l.Lease.Token {
				ok[i] = true
			}
		}
	}
	return ok
}

// ExtendLeases renews the leases of ls while their sends run (no status
// change), in one statement; a renewal that fails is only a shorter
// lease. The leases share the worker's length.
func ExtendLeases(ctx context.Context, db DB, ls []Leased) {
	if len(ls) == 0 {
		return
	}
	p := dbsqlc.ExtendLeasesParams{LeaseSeconds: ls[0].Lease.TTL.Seconds()}
	for _, l := range ls {
		p.Ids, p.LeaseTokens = append(p.Ids, l.ID), append(p.LeaseTokens, l.Lease.Token)
	}
	_ = dbsqlc.New(db).ExtendLeases(ctx, p)
}

// Outcome is what an attempt's send ended in, as the worker records it
// (CompleteAll).
type Outcome string

const (
	OutcomeSent      Outcome = "sent"      // the provider accepted the message
	OutcomeRetry     Outcome = "retry"     // back to pending, for a later attempt
	OutcomeFailed    Outcome = "failed"    // refused for good, or deferred past DELIVERY_MAX_AGE
	OutcomeHeld      Outcome = "held"      // for an operator
	OutcomeAmbiguous Outcome = "ambiguous" // left sending, for the reconciler
)

// Change is one attempt's outcome to record: the attempt, what it ended
// in and why (the row's last_error and the history's), and with it what
// that outcome carries.
type Change struct {
	Leased
	Outcome  Outcome
	Reason   string
	Provider string // the provider the attempt went to, for the history; "" if none
	// Refund (OutcomeRetry): the attempt does not count: it never
	// reached the recipient's acceptance. Pin: the provider may have the
	// message; the next attempts go to it alone.
	Refund, Pin bool
	// ProviderID, Language (OutcomeSent): the provider's id for the
	// message and the language it was written in.
	ProviderID, Language string
}

// CompleteAll records the outcome of every attempt of cs, in one
// statement (CompleteDeliveries): ok[i] reports whether cs[i] still held
// its row (false: another worker or the reconciler took it, and nothing
// was written for it). The attempts share the worker's lease length and
// actor; ids are distinct.
func CompleteAll(ctx context.Context, db DB, cs []Change) ([]bool, error) {
	p := dbsqlc.CompleteDeliveriesParams{Async: true, LeaseSeconds: cs[0].Lease.TTL.Seconds(), Actor: cs[0].Lease.Actor}
	for _, c := range cs {
		p.Ids, p.LeaseTokens = append(p.Ids, c.ID), append(p.LeaseTokens, c.Lease.Token)
		p.Outcomes, p.Reasons = append(p.Outcomes, string(c.Outcome)), append(p.Reasons, textrule.Clip(c.Reason, 1000))
		p.Refunds, p.Pins = append(p.Refunds, c.Refund), append(p.Pins, c.Pin)
		p.ProviderMessageIds, p.Languages = append(p.ProviderMessageIds, providerIDText(c.ProviderID)), append(p.Languages, c.Language)
		p.Providers = append(p.Providers, c.Provider)
		p.Async = p.Async && c.Outcome == OutcomeSent
	}
	ids, err := dbsqlc.New(db).CompleteDeliveries(ctx, p)
	if err != nil {
		return nil, err
	}
	ok := make([]bool, len(cs))
	for i, c := range cs {
		ok[i] = slices.Contains(ids, c.ID)
	}
	return ok, nil
}

// NoteAmbiguous records why a worker that found a dead, handed-over
// attempt did not send.
func NoteAmbiguous(ctx context.Context, db DB, id uuid.UUID, reason, actor string) error {
	_, err := dbsqlc.New(db).NoteAmbiguous(ctx, dbsqlc.NoteAmbiguousParams{ID: id, LastError: reason, Actor: actor})
	return err
}

// ErrRaced: a conditional write on a row the claim did not take no
// longer applied: someone changed the row in between.
var ErrRaced = errors.New("delivery changed between the claim and the write")

// raced turns the row count of a write on a row the claim did not take
// into ErrRaced, as fenced does for the attempt's own row.
func raced(rows int64, err error) error {
	if err == nil && rows == 0 {
		return ErrRaced
	}
	return err
}

// ExpirePending fails a pending delivery whose tries began more than
// maxAge ago; ErrRaced when it changed meanwhile.
func ExpirePending(ctx context.Context, db DB, id uuid.UUID, maxAge time.Duration, reason, actor string) error {
	return raced(dbsqlc.New(db).ExpirePending(ctx, dbsqlc.ExpirePendingParams{ID: id, LastError: reason, MaxAgeSeconds: maxAge.Seconds(), Actor: actor}))
}

// SuppressPending marks a pending delivery to a suppressed recipient;
// ErrRaced when the recipient is not on the list (or the delivery is no
// longer pending).
func SuppressPending(ctx context.Context, db DB, id uuid.UUID, actor string) error {
	return raced(dbsqlc.New(db).SuppressPending(ctx, dbsqlc.SuppressPendingParams{ID: id, Actor: actor}))
}

// SuppressUnsubscribed marks a pending delivery of a subscription
// template to a recipient who left subscription mail; ErrRaced when that
// no longer holds.
func SuppressUnsubscribed(ctx context.Context, db DB, id uuid.UUID, actor string) error {
	return raced(dbsqlc.New(db).SuppressUnsubscribed(ctx, dbsqlc.SuppressUnsubscribedParams{ID: id, Actor: actor}))
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
// any, or an API key, which may call off what its owner made
// (Delivery.Owner), whatever is on an order its owner placed, and what
// was recorded before owners were. The rule is PostgreSQL's may_cancel
// (migration 22), which every cancel statement and every read of what a
// canceller may cancel (getFor, ListOfTemplateFor) applies.
type Canceller struct {
	Actor    string    // the history's name for it
	Operator bool      // an operator: any delivery
	Owner    uuid.UUID // an API key's owner (apikey.Key.Owner)
	Test     bool      // the key's mode: a test key calls off only test deliveries, a live one only live ones
	// NotAtProvider: the operator checked the log of the provider a
	// delivery is pinned to, and it does not hold the message, so one
	// that may have been sent is cancelled all the same (a retry's unpin,
	// for a cancel). The history records which provider was checked.
	NotAtProvider bool
}

// GetFor reads delivery id if c may call it off, whatever its status:
// who may read one notification is who may cancel it (may_cancel, one
// rule for both). ErrNotFound when it is not there or not c's.
func GetFor(ctx context.Context, db DB, id uuid.UUID, c Canceller) (Delivery, error) {
	row, err := dbsqlc.New(db).GetDeliveryFor(ctx, dbsqlc.GetDeliveryForParams{ID: id, ByOperator: c.Operator, Owner: c.Owner, Test: c.Test})
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, ErrNotFound
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("get delivery %s: %w", id, err)
	}
	return fromRow(row), nil
}

// ListOfTemplateFor returns the deliveries of template for one order
// that c may call off, whatever their status, oldest first.
func ListOfTemplateFor(ctx context.Context, db DB, orderID uuid.UUID, template string, c Canceller) ([]Delivery, error) {
	rows, err := dbsqlc.New(db).ListDeliveriesOfTemplateFor(ctx, dbsqlc.ListDeliveriesOfTemplateForParams{
		OrderID: orderID, Template: template, ByOperator: c.Operator, Owner: c.Owner, Test: c.Test,
	})
	if err != nil {
		return nil, fmt.Errorf("list %s of order %s: %w", template, orderID, err)
	}
	return mapRows(rows, fromRow), nil
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
		ID: id, Actor: c.Actor, Note: note, ByOperator: c.Operator, Owner: c.Owner, Test: c.Test, NotAtProvider: c.NotAtProvider,
	})
	if err == nil {
		return fromRow(dbsqlc.NotificationDelivery(row)), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, fmt.Errorf("cancel delivery %s: %w", id, err)
	}
	d, err := GetFor(ctx, db, id, c)
	switch {
	case err != nil:
		return Delivery{}, err
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
		OrderID: orderID, Template: template, Actor: c.Actor, ByOperator: c.Operator, Owner: c.Owner, Test: c.Test,
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

// Evidence is what settles an attempt whose outcome at a provider was
// unknown as "not taken" (settled_by): PostgreSQL refuses to clear an
// unknown outcome without it, except by the provider's acceptance.
type Evidence string

const (
	// EvidenceAnswer: the provider's answer to the request (or the
	// request never written) says nothing was taken.
	EvidenceAnswer Evidence = "answer"
	// EvidenceLookup: the provider's search has no such message.
	EvidenceLookup Evidence = "lookup"
	// EvidenceOperator: an operator checked the provider's log.
	EvidenceOperator Evidence = "operator"
)

// The reconciler's three transitions take a delivery as it read it — a
// sending one whose lease expired (GetStaleSending), or a pending one
// that may have been sent and is held back (HeldBackUnsettled) — and
// are fenced on that read: they change nothing (ok false) when the row
// changed meanwhile — its status, its lease renewed or taken, its
// hand-over, provider, pin or earliest unknown attempt, or anything else
// that moves updated_at. The reconciler holds no lock between the read
// and the write (it asks the provider in between), so this fence is
// what keeps a late worker's outcome, or another reconciler's decision,
// from being overwritten.

// ReconcileToPending takes back a delivery so that it is sent (again).
//
// at is the provider the reconciler judged it at (its latest hand-over's,
// or the first of the list); pinned, whether the delivery must go there
// alone from now on, because the outcome there is still unknown. A
// delivery that may have been sent is unpinned only on evidence (the
// database refuses the write without it); "" when there is none.
func ReconcileToPending(ctx context.Context, db DB, d Delivery, at string, pinned bool, evidence Evidence, decision, reason, actor string) (ok bool, err error) {
	return reconciled(d, "reset", func(s seenRow) (int64, error) {
		return dbsqlc.New(db).ReconcileToPending(ctx, dbsqlc.ReconcileToPendingParams{
			ID: d.ID, Provider: at, Pinned: pinned, Evidence: string(evidence), Reason: reason, Decision: decision, Actor: actor,
			SeenStatus: s.status, SeenLeaseToken: s.lease, SeenUpdatedAt: s.updatedAt, SeenHandedOverAt: s.handedOverAt,
			SeenProvider: s.provider, SeenPinned: s.pinned, SeenUnsettledSince: s.unsettledSince,
		})
	})
}

// ReconcileToSent records a delivery as sent: the provider holds the
// message.
func ReconcileToSent(ctx context.Context, db DB, d Delivery, at, providerID, decision, actor string) (ok bool, err error) {
	return reconciled(d, "mark sent", func(s seenRow) (int64, error) {
		return dbsqlc.New(db).ReconcileToSent(ctx, dbsqlc.ReconcileToSentParams{
			ID: d.ID, ProviderMessageID: providerIDText(providerID), Provider: at, Decision: decision, Actor: actor,
			SeenStatus: s.status, SeenLeaseToken: s.lease, SeenUpdatedAt: s.updatedAt, SeenHandedOverAt: s.handedOverAt,
			SeenProvider: s.provider, SeenPinned: s.pinned, SeenUnsettledSince: s.unsettledSince,
		})
	})
}

// ReconcileToHeld parks a delivery whose outcome nobody can tell, for an
// operator; an operator's retry goes to provider at alone (pinned).
func ReconcileToHeld(ctx context.Context, db DB, d Delivery, at, decision, reason, actor string) (ok bool, err error) {
	return reconciled(d, "hold", func(s seenRow) (int64, error) {
		return dbsqlc.New(db).ReconcileToHeld(ctx, dbsqlc.ReconcileToHeldParams{
			ID: d.ID, Provider: at, Reason: reason, Decision: decision, Actor: actor,
			SeenStatus: s.status, SeenLeaseToken: s.lease, SeenUpdatedAt: s.updatedAt, SeenHandedOverAt: s.handedOverAt,
			SeenProvider: s.provider, SeenPinned: s.pinned, SeenUnsettledSince: s.unsettledSince,
		})
	})
}

// seenRow is what a reconciler's write is fenced on: the row as read.
type seenRow struct {
	status                       string
	lease                        *uuid.UUID
	updatedAt                    time.Time
	handedOverAt, unsettledSince *time.Time
	provider                     string
	pinned                       bool
}

// reconciled runs one of the reconciler's writes, fenced on the delivery
// as it was read: a sending one (with its expired lease) or a pending one
// that may have been sent.
func reconciled(d Delivery, what string, write func(seenRow) (int64, error)) (bool, error) {
	switch {
	case d.Status == StatusSending && d.leaseToken == nil:
		return false, fmt.Errorf("%s delivery %s: it has no lease", what, d.ID)
	case d.Status != StatusSending && !(d.Status == StatusPending && d.MayHaveBeenSent()):
		return false, fmt.Errorf("%s delivery %s: the reconciler takes sending rows and pending ones that may have been sent, not %s", what, d.ID, d.Status)
	}
	n, err := write(seenRow{status: string(d.Status), lease: d.leaseToken, updatedAt: d.UpdatedAt, handedOverAt: d.HandedOverAt,
		unsettledSince: d.UnsettledSince, provider: d.Provider, pinned: d.ProviderPinned})
	if err != nil {
		return false, fmt.Errorf("%s delivery %s: %w", what, d.ID, err)
	}
	return n == 1, nil
}
