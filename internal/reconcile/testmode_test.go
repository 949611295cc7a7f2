package reconcile_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/testmail"
)

// Test mode's rows go sooner than live ones (TEST_RETENTION): a test
// order settled and untouched past it goes with its notification and
// history, and so does a magic address's suppression; a younger test
// order stays, and so do an older live order (DELIVERY_RETENTION keeps
// it) and a live address's suppression as old.
func TestTestRetentionRemovesTestRowsSooner(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx := context.Background()
	testKey := order.Caller{Key: uuid.New(), Owner: uuid.New(), Test: true}
	place := func(caller order.Caller, email string) notify.Delivery {
		t.Helper()
		price := int64(1000)
		o, err := e.orders.Place(ctx, order.Checkout{
			CustomerEmail: email, CustomerName: "Tono", Currency: "EUR",
			Items: []order.CheckoutItem{{SKU: "BOOK", Name: "Buku", Quantity: 1, UnitPrice: &price}},
		}, caller, "")
		if err != nil {
			t.Fatal(err)
		}
		return e.get(t, o.Notifications[0].ID)
	}
	// ageOrder moves an order's recording back by ago, as Aged does its
	// delivery's (raw SQL: there is no statement that ages an order).
	ageOrder := func(d notify.Delivery, ago time.Duration) {
		t.Helper()
		if _, err := e.db.Pool.Exec(ctx, `UPDATE orders SET created_at = created_at - $2::interval WHERE id = $1`, d.OrderID, ago); err != nil {
			t.Fatal(err)
		}
	}
	oldTest, youngTest, oldLive := place(testKey, "bounced@sekali.test"), place(testKey, "ana@example.com"), place(order.Caller{}, "budi@example.com")
	for _, c := range []struct {
		d   notify.Delivery
		ago time.Duration
	}{{oldTest, 8 * day}, {youngTest, day}, {oldLive, 30 * day}} {
		e.finished(t, c.d, notify.StatusSent, c.ago)
		ageOrder(c.d, c.ago)
	}
	for who, test := range map[string]bool{"bounced@sekali.test": true, "budi@example.com": false} {
		if _, err := e.db.Pool.Exec(ctx, `INSERT INTO suppressions (recipient, source, reason, created_at, test) VALUES ($1, 'bounce', 'test', now() - interval '8 days', $2)`, who, test); err != nil {
			t.Fatal(err) // raw SQL: a suppression listed eight days ago, test mode's and a live one
		}
	}

	r := reconcile.New(e.db.Pool, e.enq, e.inspector, reconcile.Config{
		PendingAfter: time.Hour, Batch: 50, DefaultPolicy: reconcile.PolicyHold, MessageIDDomain: mailDomain, Actor: "reconciler-test",
		MaxAge: 5 * day, TestRetention: 7 * day,
	}, slog.New(slog.NewJSONHandler(e.logs, nil)), prometheus.NewRegistry())
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CleanedTestOrders != 1 || rep.CleanedTestSuppressions != 1 {
		t.Errorf("cleaned %d test orders and %d test suppressions, want 1 and 1", rep.CleanedTestOrders, rep.CleanedTestSuppressions)
	}
	if e.exists(t, oldTest) {
		t.Error("the test notification past TEST_RETENTION is still there")
	}
	var orders, events int
	if err := e.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders WHERE id = $1), (SELECT count(*) FROM delivery_events WHERE delivery_id = $2)`,
		oldTest.OrderID, oldTest.ID).Scan(&orders, &events); err != nil {
		t.Fatal(err)
	}
	if orders != 0 || events != 0 {
		t.Errorf("the old test order left %d orders and %d history rows", orders, events)
	}
	if !e.exists(t, youngTest) || !e.exists(t, oldLive) {
		t.Errorf("the younger test notification (%v) or the older live one (%v) is gone", e.exists(t, youngTest), e.exists(t, oldLive))
	}
	var listed []string
	rows, err := e.db.Pool.Query(ctx, `SELECT recipient FROM suppressions ORDER BY recipient`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		listed = append(listed, s)
	}
	if len(listed) != 1 || listed[0] != "budi@example.com" {
		t.Errorf("suppressions after the test retention: %v, want the live address alone", listed)
	}
}

// Each magic recipient makes the test provider report what it names,
// once, through the providers' feedback path: delivered, a hard bounce
// and a complaint (both suppress the address), a deferral (nothing
// final), an unsubscribe (the address leaves the subscription mail); a
// +label changes nothing, and any other address, at the test domain or
// not, is reported nothing. A real provider's event about a test
// delivery names no message of that provider's.
func TestMagicRecipientsReportThroughTheFeedbackPath(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx := context.Background()
	testKey := order.Caller{Key: uuid.New(), Owner: uuid.New(), Test: true}
	want := map[string]string{
		"delivered+run-1@sekali.test": "delivered", "bounced@sekali.test": "bounced", "complained@sekali.test": "complained",
		"delayed@sekali.test": "deferred", "unsubscribed@sekali.test": "unsubscribed", "ana@sekali.test": "", "ana@example.com": "",
	}
	sent := map[string]notify.Delivery{}
	for email := range want {
		price := int64(1000)
		o, err := e.orders.Place(ctx, order.Checkout{
			CustomerEmail: email, CustomerName: "Tono", Currency: "EUR",
			Items: []order.CheckoutItem{{SKU: "BOOK", Name: "Buku", Quantity: 1, UnitPrice: &price}},
		}, testKey, "")
		if err != nil {
			t.Fatal(err)
		}
		d := e.get(t, o.Notifications[0].ID)
		sent[email] = e.f.SentBy(d, mail.TestProvider, testmail.ProviderID(d.ID.String()+"@"+mailDomain))
	}
	r := reconcile.New(e.db.Pool, e.enq, e.inspector, reconcile.Config{
		PendingAfter: time.Hour, Batch: 50, DefaultPolicy: reconcile.PolicyHold, MessageIDDomain: mailDomain, Actor: "reconciler-test", MaxAge: 5 * day,
	}, slog.New(slog.NewJSONHandler(e.logs, nil)), prometheus.NewRegistry())
	for pass := range 2 {
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wantN := []int{5, 0}[pass]; rep.TestFeedback != wantN {
			t.Errorf("pass %d reported %d events, want %d", pass+1, rep.TestFeedback, wantN)
		}
	}
	for email, kind := range want {
		ops := notify.NewOperator(e.db.Pool, e.enq, e.inspector, nil)
		d, events, err := ops.Get(ctx, sent[email].ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range events {
			if ev.Event != "received" && ev.Event != "claimed" && ev.Event != "handed_over" && ev.Event != "sent" {
				got = append(got, ev.Event)
			}
		}
		if (kind == "" && len(got) != 0) || (kind != "" && (len(got) != 1 || got[0] != kind)) || d.Status != notify.StatusSent {
			t.Errorf("%s: %s with the reports %v, want sent with %q", email, d.Status, got, kind)
		}
		var suppressed, unsubscribed bool
		if err := e.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM suppressions WHERE recipient = $1), EXISTS (SELECT 1 FROM unsubscribes WHERE recipient = $1)`,
			email).Scan(&suppressed, &unsubscribed); err != nil {
			t.Fatal(err)
		}
		if suppressed != (kind == "bounced" || kind == "complained") || unsubscribed != (kind == "unsubscribed") {
			t.Errorf("%s: suppressed %v, unsubscribed %v", email, suppressed, unsubscribed)
		}
	}
	if _, err := notify.RecordFeedback(ctx, e.db.Pool, mail.Feedback{Provider: "resend", EventID: "evt-1", Kind: mail.FeedbackBounced,
		MessageID: sent["ana@example.com"].MessageID}); !errors.Is(err, notify.ErrUnknownMessage) {
		t.Errorf("a real provider's bounce of a test delivery: %v, want ErrUnknownMessage", err)
	}
}
