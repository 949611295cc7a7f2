// Package notifytest makes deliveries in the states tests need, through
// the statements the service itself runs (db/queries/transitions.sql, as
// River's testfactory builds jobs through River's own inserts). A test that writes a delivery's row by hand
// means to corrupt it, and says so; one that only needs a state asks here.
package notifytest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
)

// Actor is who the factory's transitions say made them, in the history.
const Actor = "notifytest"

// Factory moves deliveries of one database from pending to the other
// states, as a worker would.
type Factory struct {
	t  testing.TB
	db *pgxpool.Pool
	// Domain is the right-hand side of the Message-ID a claim stores:
	// shop.example unless set.
	Domain string
	// Templates, when set, are the worker's: a hand-over records what a
	// worker's does of its message (the subject, language and template
	// version of the delivery rendered with them), and the version is
	// kept, as a worker keeps those it loaded. Unset, a hand-over records
	// none of it, as a worker's did before there was such a record.
	Templates *mailtemplate.Templates
}

// New returns a Factory over db.
func New(t testing.TB, db *pgxpool.Pool) *Factory {
	return &Factory{t: t, db: db, Domain: "shop.example"}
}

// Attempt is a delivery claimed by the factory, under Lease.
type Attempt struct {
	notify.Delivery
	Lease uuid.UUID
}

// Claimed claims d as a worker does (ClaimDeliveries, for one): sending, under a
// lease that runs out in lease, or ran out already when it is negative —
// what a worker that died before the hand-over leaves behind.
func (f *Factory) Claimed(d notify.Delivery, lease time.Duration) Attempt {
	f.t.Helper()
	token := uuid.New()
	var usable []string // as a worker that sends through the provider the row may be pinned to
	if p := f.Get(d.ID).Provider; p != "" {
		usable = []string{p}
	}
	rows, err := dbsqlc.New(f.db).ClaimDeliveries(context.Background(), dbsqlc.ClaimDeliveriesParams{
		Ids: []uuid.UUID{d.ID}, LeaseTokens: []uuid.UUID{token}, LeaseSeconds: lease.Seconds(), UsableProviders: usable,
		MessageIds: []string{mail.MessageID(d.IdempotencyKey, f.Domain)}, KeyHashes: []string{mail.KeyHash(d.IdempotencyKey)},
		Templates: []string{d.Template}, MaxAgeSeconds: (1000 * time.Hour).Seconds(), Actor: Actor, TaskIds: []string{queue.TaskID(d.ID)},
	})
	if err != nil || len(rows) != 1 || rows[0].Verdict != "claimed" {
		f.t.Fatalf("notifytest: claim delivery %s (it must be pending, or sending with an expired lease and not handed over): %+v, %v", d.ID, rows, err)
	}
	return Attempt{Delivery: f.Get(d.ID), Lease: token}
}

// HandedOver claims d and passes the last lease check before the data
// (HandOverDeliveries), after which its lease runs out in lease, or ran out already
// when it is negative — what a worker that died after the hand-over
// leaves behind: the provider may have the message.
func (f *Factory) HandedOver(d notify.Delivery, lease time.Duration) Attempt {
	f.t.Helper()
	return f.HandedOverTo(d, lease, "")
}

// HandedOverTo is HandedOver to a named provider of a failover list;
// "" records none, as a worker older than failover did.
func (f *Factory) HandedOverTo(d notify.Delivery, lease time.Duration, provider string) Attempt {
	f.t.Helper()
	a := f.Claimed(d, time.Minute)
	p := dbsqlc.HandOverDeliveriesParams{
		Ids: []uuid.UUID{d.ID}, LeaseTokens: []uuid.UUID{a.Lease}, Providers: []string{provider}, LeaseSeconds: lease.Seconds(), Actor: Actor,
	}
	if f.Templates != nil {
		r, err := f.Templates.RenderLocale(a.Template, a.Data, a.Locale)
		if err != nil {
			f.t.Fatalf("notifytest: render delivery %s for its hand-over: %v", d.ID, err)
		}
		f.keepVersion(a.Template)
		p.Subjects, p.Languages, p.TemplateVersions = []string{r.Subject}, []string{r.Language}, []string{f.Templates.Version(a.Template)}
	}
	rows, err := dbsqlc.New(f.db).HandOverDeliveries(context.Background(), p)
	if err != nil || len(rows) != 1 {
		f.t.Fatalf("notifytest: hand over delivery %s: %d rows, %v", d.ID, len(rows), err)
	}
	a.Delivery = f.Get(d.ID)
	return a
}

// keepVersion stores the version of template among f.Templates, as a
// worker that loaded it does when it starts.
func (f *Factory) keepVersion(template string) {
	f.t.Helper()
	for _, v := range f.Templates.Versions() {
		if v.Template != template {
			continue
		}
		p := dbsqlc.KeepTemplateVersionParams{Digest: v.Digest, Template: v.Template}
		for _, file := range v.Files {
			p.Paths, p.Contents = append(p.Paths, file.Path), append(p.Contents, file.Content)
		}
		if err := dbsqlc.New(f.db).KeepTemplateVersion(context.Background(), p); err != nil {
			f.t.Fatalf("notifytest: keep version %s of %s: %v", v.Digest, v.Template, err)
		}
	}
}

// TakenOver lets d's lease run out and gives d to another worker, by
// the only ways the service does: a row not yet handed over is claimed
// again; a handed-over one is first put back to pending by the
// reconciler (ReconcileToPending: the provider does not have it, or the
// template's policy is resend), then claimed.
func (f *Factory) TakenOver(d notify.Delivery) Attempt {
	f.t.Helper()
	d = f.Get(d.ID)
	if d.LeaseExpiresAt != nil && d.LeaseExpiresAt.After(time.Now()) {
		d = f.Aged(d, time.Until(*d.LeaseExpiresAt)+time.Second)
	}
	if d.HandedOverAt != nil {
		f.reconciled("reconcile delivery", d)(notify.ReconcileToPending(context.Background(), f.db, d, "", false,
			notify.EvidenceLookup, "not_found_at_provider", "taken over", Actor))
	}
	return f.Claimed(d, time.Minute)
}

// Sent takes d through a whole attempt the provider accepted, under
// providerID (CompleteAll: sent).
func (f *Factory) Sent(d notify.Delivery, providerID string) notify.Delivery {
	f.t.Helper()
	return f.SentBy(d, "", providerID)
}

// SentBy is Sent through a named provider ("test": test mode's, as a
// worker sends a test delivery).
func (f *Factory) SentBy(d notify.Delivery, provider, providerID string) notify.Delivery {
	f.t.Helper()
	a := f.HandedOverTo(d, time.Minute, provider)
	return f.completed(d, a, notify.Change{Outcome: notify.OutcomeSent, ProviderID: providerID, Language: "en"})
}

// Deferred takes d through an attempt the provider deferred, with
// reason as its last error, back to pending (CompleteAll: retry):
// counted in attempts when the provider had taken the recipient, not
// when it refused us before (a connection, TLS or AUTH failure).
func (f *Factory) Deferred(d notify.Delivery, reason string, counted bool) notify.Delivery {
	f.t.Helper()
	a := f.Claimed(d, time.Minute)
	return f.completed(d, a, notify.Change{Outcome: notify.OutcomeRetry, Reason: reason, Refund: !counted})
}

// MaybeAccepted takes d through an attempt handed over to provider whose
// answer says nothing certain (an HTTP 5xx after the request went out),
// back to pending and pinned there (CompleteAll: retry with pin): the
// attempt's hand-over time becomes the delivery's unsettled_since.
func (f *Factory) MaybeAccepted(d notify.Delivery, provider string) notify.Delivery {
	f.t.Helper()
	a := f.HandedOverTo(d, time.Minute, provider)
	return f.completed(d, a, notify.Change{Outcome: notify.OutcomeRetry, Reason: "503 after the request", Pin: true, Provider: provider})
}

// Failed takes d through an attempt the provider refused for good, with
// reason as its last error (CompleteAll: failed).
func (f *Factory) Failed(d notify.Delivery, reason string) notify.Delivery {
	f.t.Helper()
	a := f.HandedOver(d, time.Minute)
	return f.completed(d, a, notify.Change{Outcome: notify.OutcomeFailed, Reason: reason})
}

// Held takes d through an attempt that left it for an operator, with
// reason as its last error (CompleteAll: held).
func (f *Factory) Held(d notify.Delivery, reason string) notify.Delivery {
	f.t.Helper()
	a := f.Claimed(d, time.Minute)
	return f.completed(d, a, notify.Change{Outcome: notify.OutcomeHeld, Reason: reason})
}

// completed records attempt a's outcome c (its lease filled in) and
// fails the test unless it applied.
func (f *Factory) completed(d notify.Delivery, a Attempt, c notify.Change) notify.Delivery {
	f.t.Helper()
	c.Leased = notify.Leased{ID: d.ID, Lease: notify.Lease{Token: a.Lease, TTL: time.Minute, Actor: Actor}}
	ok, err := notify.CompleteAll(context.Background(), f.db, []notify.Change{c})
	if err != nil || !ok[0] {
		f.t.Fatalf("notifytest: record delivery %s %s: applied %v, %v", d.ID, c.Outcome, ok, err)
	}
	return f.Get(d.ID)
}

// Retried is an operator's retry of a failed or held d (OperatorRetry),
// lifting its pin with unpin.
func (f *Factory) Retried(d notify.Delivery, unpin bool) notify.Delivery {
	f.t.Helper()
	if _, err := dbsqlc.New(f.db).OperatorRetry(context.Background(), dbsqlc.OperatorRetryParams{ID: d.ID, Actor: Actor, Note: "retried", Unpin: unpin}); err != nil {
		f.t.Fatalf("notifytest: retry delivery %s: %v", d.ID, err)
	}
	return f.Get(d.ID)
}

// HeldAt is what the reconciler leaves of a delivery whose outcome at
// provider is unknown and that nothing can settle: handed over there,
// its worker gone, held for an operator and pinned to provider
// (ReconcileToHeld).
func (f *Factory) HeldAt(d notify.Delivery, provider string) notify.Delivery {
	f.t.Helper()
	a := f.HandedOverTo(d, -time.Second, provider)
	f.reconciled("hold delivery", d)(notify.ReconcileToHeld(context.Background(), f.db, a.Delivery, provider, "policy_hold", "outcome unknown", Actor))
	return f.Get(d.ID)
}

// Aged moves every time of d by back, as if that much time had passed
// since each: when it was recorded, tried, changed, leased, handed over
// (its latest attempt, and its earliest unknown one) and sent, and when
// it may be sent. It writes the row directly: time is
// the one thing the service's statements take from the clock, not from
// their caller.
func (f *Factory) Aged(d notify.Delivery, by time.Duration) notify.Delivery {
	f.t.Helper()
	if !f.AgedWhile(d, f.Get(d.ID).Status, by) {
		f.t.Fatalf("notifytest: delivery %s changed while it was aged", d.ID)
	}
	return f.Get(d.ID)
}

// AgedWhile is Aged for a delivery a running worker may be taking: it
// changes nothing, and says so, unless d is still in status.
func (f *Factory) AgedWhile(d notify.Delivery, status notify.Status, by time.Duration) bool {
	f.t.Helper()
	tag, err := f.db.Exec(context.Background(), `UPDATE notification_deliveries
		SET created_at = created_at - $2::interval, updated_at = updated_at - $2::interval,
		    trying_since = trying_since - $2::interval, lease_expires_at = lease_expires_at - $2::interval,
		    handed_over_at = handed_over_at - $2::interval, sent_at = sent_at - $2::interval,
		    not_before = not_before - $2::interval, unsettled_since = unsettled_since - $2::interval
		WHERE id = $1 AND status = $3`, d.ID, by, string(status))
	if err != nil {
		f.t.Fatalf("notifytest: age delivery %s: %v", d.ID, err)
	}
	return tag.RowsAffected() == 1
}

// HistoryAt moves every row of d's history to at, as if all of it had
// happened then: for the console's last hour, which counts the history
// by minute. It writes delivery_events directly, on purpose: the
// service's statements take an event's time from the database's clock,
// never from their caller.
func (f *Factory) HistoryAt(d notify.Delivery, at time.Time) {
	f.t.Helper()
	if _, err := f.db.Exec(context.Background(), `UPDATE delivery_events SET at = $2 WHERE delivery_id = $1`, d.ID, at); err != nil {
		f.t.Fatalf("notifytest: move the history of delivery %s to %s: %v", d.ID, at, err)
	}
}

// Scheduled records, as the API's trigger does (notify.Record), a pending
// delivery of template about order to recipient with data, to be sent
// at; no task is queued for it.
func (f *Factory) Scheduled(order uuid.UUID, template, recipient string, data any, at time.Time) notify.Delivery {
	f.t.Helper()
	d, created, err := notify.Record(context.Background(), f.db, notify.Intent{
		OrderID: order, Template: template, Recipient: recipient, Data: data, EventID: "scheduled-" + uuid.NewString()[:8], NotBefore: at,
	}, time.Now())
	if err != nil || !created {
		f.t.Fatalf("notifytest: record a scheduled %s: created %v, %v", template, created, err)
	}
	return d
}

// Get reads d's row as it stands.
func (f *Factory) Get(id uuid.UUID) notify.Delivery {
	f.t.Helper()
	d, err := notify.Get(context.Background(), f.db, id)
	if err != nil {
		f.t.Fatalf("notifytest: read delivery %s: %v", id, err)
	}
	return d
}

// reconciled fails the test unless a reconciler's transition applied.
func (f *Factory) reconciled(what string, d notify.Delivery) func(bool, error) {
	return func(ok bool, err error) {
		f.t.Helper()
		if err != nil || !ok {
			f.t.Fatalf("notifytest: %s %s: applied %v, %v", what, d.ID, ok, err)
		}
	}
}
