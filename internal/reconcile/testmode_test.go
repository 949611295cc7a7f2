package reconcile_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
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
	for _, who := range []string{"bounced@sekali.test", "budi@example.com"} {
		if _, err := e.db.Pool.Exec(ctx, `INSERT INTO suppressions (recipient, source, reason, created_at) VALUES ($1, 'bounce', 'test', now() - interval '8 days')`, who); err != nil {
			t.Fatal(err) // raw SQL: a suppression listed eight days ago
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
