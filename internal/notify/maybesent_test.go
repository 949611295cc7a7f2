package notify_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// "May have been sent" is a state PostgreSQL keeps (migration 00021):
// no statement may leave a delivery whose attempt may have reached a
// provider in a status that tells the shop it was not sent, or clear
// the unknown without naming its evidence. Every statement of
// db/queries that updates a delivery is tried here on every shape such a
// row takes — as the service would call it, with whatever would make it
// apply to a row that was not in doubt — and each must refuse (an error
// or no row), leave the row still in doubt, or settle it as sent, held,
// or on the evidence its caller names.

// shape makes a delivery that may have been sent, at provider "resend".
type shape struct {
	name string
	make func(f *notifytest.Factory, d notify.Delivery) (notify.Delivery, uuid.UUID) // the row and its lease ("": none)
	// onlyUnknownIsThisAttempt: its one unknown attempt is the one whose
	// lease the statements are given: that attempt's own answer (a
	// refusal, recorded by its worker) settles it.
	onlyUnknownIsThisAttempt bool
}

var maybeSentShapes = []shape{
	{name: "pending, pinned after a 5xx", make: func(f *notifytest.Factory, d notify.Delivery) (notify.Delivery, uuid.UUID) {
		return f.MaybeAccepted(d, "resend"), uuid.Nil
	}},
	{name: "sending, handed over, lease expired", onlyUnknownIsThisAttempt: true, make: func(f *notifytest.Factory, d notify.Delivery) (notify.Delivery, uuid.UUID) {
		a := f.HandedOverTo(d, -time.Second, "resend")
		return a.Delivery, a.Lease
	}},
	{name: "sending, handed over, its worker's lease live", onlyUnknownIsThisAttempt: true,
		make: func(f *notifytest.Factory, d notify.Delivery) (notify.Delivery, uuid.UUID) {
			a := f.HandedOverTo(d, time.Minute, "resend")
			return a.Delivery, a.Lease
		}},
	{name: "sending again, not yet handed over, an earlier attempt unknown", make: func(f *notifytest.Factory, d notify.Delivery) (notify.Delivery, uuid.UUID) {
		a := f.Claimed(f.MaybeAccepted(d, "resend"), time.Minute)
		return a.Delivery, a.Lease
	}},
	{name: "held, pinned by the reconciler", make: func(f *notifytest.Factory, d notify.Delivery) (notify.Delivery, uuid.UUID) {
		return f.HeldAt(d, "resend"), uuid.Nil
	}},
}

// statement runs one statement of db/queries on d (lease: its worker's)
// as the service would to move it, and returns the rows it changed.
type statement func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, lease uuid.UUID) (int64, error)

func maybeSentStatements(seen func(notify.Delivery) dbsqlc.NotificationDelivery) map[string]statement {
	const actor = "test"
	count := func(n int, err error) (int64, error) { return int64(n), err }
	one := func(_ any, err error) (int64, error) {
		if err != nil && strings.Contains(err.Error(), "no rows in result set") {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		return 1, nil
	}
	complete := func(o notify.Outcome, reason string, pin bool) statement {
		return func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, lease uuid.UUID) (int64, error) {
			ids, err := q.CompleteDeliveries(ctx, dbsqlc.CompleteDeliveriesParams{Ids: []uuid.UUID{d.ID}, LeaseTokens: []uuid.UUID{lease},
				Outcomes: []string{string(o)}, Reasons: []string{reason}, Refunds: []bool{true}, Pins: []bool{pin},
				ProviderMessageIds: []string{"re_1"}, Languages: []string{"en"}, Providers: []string{"resend"}, LeaseSeconds: 60, Actor: actor,
				Async: o == notify.OutcomeSent})
			return count(len(ids), err)
		}
	}
	return map[string]statement{
		"ClaimDeliveries": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			rows, err := q.ClaimDeliveries(ctx, dbsqlc.ClaimDeliveriesParams{
				Ids: []uuid.UUID{d.ID}, KeyHashes: []string{mail.KeyHash(d.IdempotencyKey)}, LeaseTokens: []uuid.UUID{uuid.New()}, MessageIds: []string{"m@shop.example"},
				TaskIds: []string{"t"}, LeaseSeconds: 60, Templates: []string{d.Template}, MaxAgeSeconds: 0.001, Actor: actor,
				UsableProviders: []string{"resend"},
			})
			n := 0
			for _, r := range rows {
				if r.Verdict == "claimed" {
					n++
				}
			}
			return count(n, err)
		},
		"HandOverDeliveries": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, lease uuid.UUID) (int64, error) {
			rows, err := q.HandOverDeliveries(ctx, dbsqlc.HandOverDeliveriesParams{Ids: []uuid.UUID{d.ID}, LeaseTokens: []uuid.UUID{lease},
				Providers: []string{"resend"}, Subjects: []string{""}, Languages: []string{""}, TemplateVersions: []string{""}, BatchKeys: []string{""},
				LeaseSeconds: 60, Actor: actor})
			return count(len(rows), err)
		},
		"ExtendLeases": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, lease uuid.UUID) (int64, error) {
			return 0, q.ExtendLeases(ctx, dbsqlc.ExtendLeasesParams{Ids: []uuid.UUID{d.ID}, LeaseTokens: []uuid.UUID{lease}, LeaseSeconds: 60})
		},
		// CompleteDeliveries, once for each outcome: what a worker's
		// attempt records with its lease.
		"CompleteDeliveries/sent":      complete(notify.OutcomeSent, "", false),
		"CompleteDeliveries/retry":     complete(notify.OutcomeRetry, "429", false),
		"CompleteDeliveries/failed":    complete(notify.OutcomeFailed, "422", false),
		"CompleteDeliveries/held":      complete(notify.OutcomeHeld, "cannot render", false),
		"CompleteDeliveries/ambiguous": complete(notify.OutcomeAmbiguous, "no answer", false),
		"NoteAmbiguous": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			return q.NoteAmbiguous(ctx, dbsqlc.NoteAmbiguousParams{ID: d.ID, LastError: "left", Actor: actor})
		},
		"ExpirePending": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			return q.ExpirePending(ctx, dbsqlc.ExpirePendingParams{ID: d.ID, LastError: "expired", MaxAgeSeconds: 0.001, Actor: actor})
		},
		"SuppressPending": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			return q.SuppressPending(ctx, dbsqlc.SuppressPendingParams{ID: d.ID, Actor: actor})
		},
		"SuppressUnsubscribed": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			return q.SuppressUnsubscribed(ctx, dbsqlc.SuppressUnsubscribedParams{ID: d.ID, Actor: actor})
		},
		"CancelDelivery": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			// An operator's cancel that does not say the provider lacks it.
			return one(q.CancelDelivery(ctx, dbsqlc.CancelDeliveryParams{ID: d.ID, ByOperator: true, Actor: actor}))
		},
		"CancelPendingOfTemplate": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			return q.CancelPendingOfTemplate(ctx, dbsqlc.CancelPendingOfTemplateParams{OrderID: d.OrderID, Template: d.Template, ByOperator: true, Actor: actor})
		},
		"OperatorRetry": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			return one(q.OperatorRetry(ctx, dbsqlc.OperatorRetryParams{ID: d.ID, Actor: actor, Note: "retry"}))
		},
		"OperatorMarkSent": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			return one(q.OperatorMarkSent(ctx, dbsqlc.OperatorMarkSentParams{ID: d.ID, ProviderMessageID: "re_1", Actor: actor, Note: "found"}))
		},
		"ReconcileToPending": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			r := seen(d) // unpinned, and no evidence named
			return q.ReconcileToPending(ctx, dbsqlc.ReconcileToPendingParams{ID: d.ID, Provider: "resend", Decision: "d", Reason: "r", Actor: actor,
				SeenStatus: r.Status, SeenLeaseToken: r.LeaseToken, SeenUpdatedAt: r.UpdatedAt, SeenHandedOverAt: r.HandedOverAt,
				SeenProvider: orEmpty(r.Provider), SeenPinned: r.ProviderPinned, SeenUnsettledSince: r.UnsettledSince})
		},
		"ReconcileToSent": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			r := seen(d)
			return q.ReconcileToSent(ctx, dbsqlc.ReconcileToSentParams{ID: d.ID, Provider: "resend", ProviderMessageID: "re_1", Decision: "d", Actor: actor,
				SeenStatus: r.Status, SeenLeaseToken: r.LeaseToken, SeenUpdatedAt: r.UpdatedAt, SeenHandedOverAt: r.HandedOverAt,
				SeenProvider: orEmpty(r.Provider), SeenPinned: r.ProviderPinned, SeenUnsettledSince: r.UnsettledSince})
		},
		"ReconcileToHeld": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			r := seen(d)
			return q.ReconcileToHeld(ctx, dbsqlc.ReconcileToHeldParams{ID: d.ID, Provider: "resend", Decision: "d", Reason: "r", Actor: actor,
				SeenStatus: r.Status, SeenLeaseToken: r.LeaseToken, SeenUpdatedAt: r.UpdatedAt, SeenHandedOverAt: r.HandedOverAt,
				SeenProvider: orEmpty(r.Provider), SeenPinned: r.ProviderPinned, SeenUnsettledSince: r.UnsettledSince})
		},
		"RecordProviderEvent": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			// A provider's report: the last one, not the status.
			return 0, q.RecordProviderEvent(ctx, dbsqlc.RecordProviderEventParams{ID: d.ID, Kind: "bounced", At: time.Now()})
		},
		"SettleByReport": func(ctx context.Context, q *dbsqlc.Queries, d notify.Delivery, _ uuid.UUID) (int64, error) {
			return q.SettleByReport(ctx, dbsqlc.SettleByReportParams{ID: d.ID, ProviderMessageID: "re_1", Kind: "delivered", Actor: actor})
		},
		"PickOrphanedPending": func(ctx context.Context, q *dbsqlc.Queries, _ notify.Delivery, _ uuid.UUID) (int64, error) {
			rows, err := q.PickOrphanedPending(ctx, dbsqlc.PickOrphanedPendingParams{OlderThanSeconds: 0, Batch: 100})
			return count(len(rows), err)
		},
	}
}

func TestNoStatementSaysNotSentOfWhatAProviderMayHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	f := notifytest.New(t, db.Pool)
	q := dbsqlc.New(db.Pool)
	seen := func(d notify.Delivery) dbsqlc.NotificationDelivery {
		r, err := q.GetDelivery(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	statements := maybeSentStatements(seen)

	// Every statement of db/queries that updates a delivery is tried: a
	// new one fails this test until it is added above.
	tried := map[string]bool{}
	for name := range statements {
		tried[strings.Split(name, "/")[0]] = true
	}
	for _, name := range updatesOfDeliveries(t) {
		if !tried[name] {
			t.Errorf("db/queries' %s updates notification_deliveries and is not tried here: add it to maybeSentStatements", name)
		}
	}

	orderID := placeOrder(t, db)
	n := 0
	for name, run := range statements {
		for _, sh := range maybeSentShapes {
			n++
			recipient := "doubt" + strings.Repeat("x", n%7) + uuid.NewString()[:8] + "@example.com"
			d, lease := sh.make(f, f.Scheduled(orderID, "payment-reminder", recipient, map[string]string{"order_id": orderID.String()}, time.Time{}))
			// What would make each statement apply to a row not in doubt:
			// the recipient suppressed and unsubscribed since.
			if _, err := q.AddSuppression(ctx, dbsqlc.AddSuppressionParams{Recipient: recipient, Source: "operator", Reason: "complaint", Actor: "test"}); err != nil {
				t.Fatal(err)
			}
			if _, err := q.AddUnsubscribe(ctx, dbsqlc.AddUnsubscribeParams{Recipient: recipient, Category: "subscription"}); err != nil {
				t.Fatal(err)
			}
			before := seen(d)
			if before.UnsettledSince == nil {
				t.Fatalf("%s: the shape is not in doubt: %+v", sh.name, before)
			}
			rows, err := run(ctx, q, d, lease)
			after := seen(d)
			switch {
			case err != nil:
				if after.Status != before.Status || after.UnsettledSince == nil {
					t.Errorf("%s on %q: failed (%v) but changed the row: %s -> %s", name, sh.name, err, before.Status, after.Status)
				}
			case after.UnsettledSince != nil:
				// Still in doubt: whatever it did, it says nothing false.
				if slices.Contains([]string{"failed", "suppressed", "cancelled", "sent"}, after.Status) {
					t.Errorf("%s on %q: %s while still in doubt", name, sh.name, after.Status)
				}
			case after.Status == "sent":
			case after.SettledBy != nil && *after.SettledBy == string(notify.EvidenceAnswer) && sh.onlyUnknownIsThisAttempt &&
				(name == "CompleteDeliveries/retry" || name == "CompleteDeliveries/failed"):
				// The provider's own answer to this attempt, its only
				// unknown one, refused it: settled on that evidence.
			default:
				t.Errorf("%s on %q (%d rows): %s -> %s, no longer in doubt, settled by %v", name, sh.name, rows, before.Status, after.Status, orEmpty(after.SettledBy))
			}
		}
	}

	// A statement written tomorrow, that forgets the question, is refused
	// by the database itself.
	for _, set := range []string{
		"status = 'cancelled'", "status = 'suppressed', lease_token = NULL, lease_expires_at = NULL", "status = 'failed', lease_expires_at = NULL",
		"status = 'pending', provider_pinned = false, unsettled_since = NULL, lease_token = NULL, lease_expires_at = NULL",
		"unsettled_since = NULL, provider_pinned = false",
		"unsettled_since = now() + interval '1 hour'",
		"status = 'cancelled', unsettled_since = NULL, provider_pinned = false, settled_by = 'operator'",
	} {
		for _, sh := range maybeSentShapes {
			d, _ := sh.make(f, f.Scheduled(orderID, "payment-reminder", uuid.NewString()[:8]+"@example.com", map[string]string{"order_id": orderID.String()}, time.Time{}))
			if _, err := db.Pool.Exec(ctx, "UPDATE notification_deliveries SET "+set+" WHERE id = $1", d.ID); err == nil {
				t.Errorf("SET %s on %q: accepted", set, sh.name)
			}
		}
	}
	// Named evidence, fresh, is what settles it.
	d, _ := maybeSentShapes[0].make(f, f.Scheduled(orderID, "payment-reminder", "settled@example.com", map[string]string{"order_id": orderID.String()}, time.Time{}))
	if _, err := db.Pool.Exec(ctx, `UPDATE notification_deliveries SET status = 'cancelled', unsettled_since = NULL, provider_pinned = false,
		settled_by = 'operator', settled_at = clock_timestamp() WHERE id = $1`, d.ID); err != nil {
		t.Errorf("a cancel with an operator's evidence: %v", err)
	}
}

// The service's own doors settle on evidence, and record it: an
// operator who checked the provider, the provider's search, the
// provider's refusal of the only unknown attempt.
func TestEvidenceSettlesAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	f := notifytest.New(t, db.Pool)
	orderID := placeOrder(t, db)
	newRow := func(who string) notify.Delivery {
		return f.Scheduled(orderID, "payment-reminder", who+"@example.com", map[string]string{"order_id": orderID.String()}, time.Time{})
	}
	settledBy := func(d notify.Delivery, want notify.Evidence, status notify.Status) {
		t.Helper()
		got := f.Get(d.ID)
		if got.MayHaveBeenSent() || got.SettledBy != string(want) || got.SettledAt == nil || got.Status != status {
			t.Errorf("%s: %s, may have been sent %v, settled by %q at %v; want %s settled by %q", d.Recipient, got.Status,
				got.MayHaveBeenSent(), got.SettledBy, got.SettledAt, status, want)
		}
	}

	op := f.MaybeAccepted(newRow("operator"), "resend")
	if _, err := notify.Cancel(ctx, db.Pool, op.ID, notify.Canceller{Actor: "operator:Ana", Operator: true, NotAtProvider: true}, "checked Resend's log"); err != nil {
		t.Fatal(err)
	}
	settledBy(op, notify.EvidenceOperator, notify.StatusCancelled)

	lookup := f.HandedOverTo(newRow("lookup"), -time.Second, "postmark").Delivery
	if ok, err := notify.ReconcileToPending(ctx, db.Pool, lookup, "postmark", false, notify.EvidenceLookup, "not_found_at_provider", "not there", "test"); err != nil || !ok {
		t.Fatalf("reconcile to pending on a look-up's miss: %v, %v", ok, err)
	}
	settledBy(lookup, notify.EvidenceLookup, notify.StatusPending)

	noEvidence := f.HandedOverTo(newRow("none"), -time.Second, "postmark").Delivery
	if ok, err := notify.ReconcileToPending(ctx, db.Pool, noEvidence, "postmark", false, "", "not_found_at_provider", "not there", "test"); err == nil {
		t.Errorf("reconcile to pending unpinned without evidence: %v, want refused", ok)
	}

	refused := f.Failed(newRow("refused"), "550 5.1.1 no such user")
	settledBy(refused, notify.EvidenceAnswer, notify.StatusFailed)
}

// updatesOfDeliveries names every statement of db/queries whose SQL
// updates notification_deliveries.
func updatesOfDeliveries(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../db/queries/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("db/queries: %v", err)
	}
	name := regexp.MustCompile(`(?m)^-- name: (\w+)`)
	var out []string
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		locs := name.FindAllStringSubmatchIndex(text, -1)
		for i, l := range locs {
			end := len(text)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			if regexp.MustCompile(`(?i)UPDATE\s+notification_deliveries\b`).MatchString(text[l[1]:end]) {
				out = append(out, text[l[2]:l[3]])
			}
		}
	}
	return out
}

func orEmpty(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// A provider's report about a message (delivered, deferred, bounced,
// complained) says it took it: a delivery in doubt that no attempt is
// sending — pending to be sent again under its key, or held because
// nothing could ask — is settled as sent by it, in the report's own
// transaction. One being sent now is left to its attempt.
func TestAProviderReportSettlesADeliveryInDoubt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	f := notifytest.New(t, db.Pool)
	orderID := placeOrder(t, db)
	newRow := func(who string) notify.Delivery {
		return f.Scheduled(orderID, "payment-reminder", who+"@example.com", map[string]string{"order_id": orderID.String()}, time.Time{})
	}
	pinned := f.MaybeAccepted(newRow("pinned"), "resend")
	held := f.HeldAt(newRow("held"), "resend")
	inFlight := f.HandedOverTo(newRow("in-flight"), time.Minute, "resend").Delivery
	for i, c := range []struct {
		d    notify.Delivery
		kind mail.FeedbackKind
		want notify.Status
	}{
		{pinned, mail.FeedbackDelivered, notify.StatusSent},
		{held, mail.FeedbackBounced, notify.StatusSent},
		{inFlight, mail.FeedbackDelivered, notify.StatusSending},
	} {
		out, err := notify.RecordFeedback(ctx, db.Pool, mail.Feedback{Provider: "resend", EventID: fmt.Sprintf("evt-%d", i), Kind: c.kind,
			KeyHash: mail.KeyHash(c.d.IdempotencyKey), ProviderMessageID: fmt.Sprintf("re_%d", i), At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		got := f.Get(c.d.ID)
		if got.Status != c.want || out.Settled != (c.want == notify.StatusSent) {
			t.Errorf("%s after a %s report: %s (settled %v), want %s", c.d.Recipient, c.kind, got.Status, out.Settled, c.want)
		}
		if c.want == notify.StatusSent && (got.MayHaveBeenSent() || got.ProviderMessageID != fmt.Sprintf("re_%d", i)) {
			t.Errorf("%s: may have been sent %v, provider id %q; want settled under the report's id", c.d.Recipient, got.MayHaveBeenSent(), got.ProviderMessageID)
		}
	}
}
