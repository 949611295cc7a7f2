package notify_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The console's last hour counts the history by minute and by what each
// row did: deliveries taken through the service's own transitions by
// the test factory, their histories moved to the minutes the test is
// about. The hour is [02:08, 03:08) for a now of 03:07:42: the first
// minute's first instant counts, the instant before it does not; the
// last minute counts so far and to its end (a database clock a little
// ahead of ours), the next minute does not; a minute with nothing in it
// is there, at zero.
func TestLastHourCountsTheHistoryByMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	f := notifytest.New(t, db.Pool)
	orderID := placeOrder(t, db)
	n := 0
	pending := func() notify.Delivery {
		n++
		return f.Scheduled(orderID, "order-shipped", fmt.Sprintf("c%d@example.com", n), map[string]string{"order_id": orderID.String()}, time.Time{})
	}
	now := time.Date(2026, 3, 14, 3, 7, 42, 0, time.UTC)
	at := func(hhmm string, sec float64) time.Time {
		m, err := time.Parse("2006-01-02 15:04", "2026-03-14 "+hhmm)
		if err != nil {
			t.Fatal(err)
		}
		return m.Add(time.Duration(sec * float64(time.Second)))
	}

	f.HistoryAt(f.Sent(pending(), "p-1"), at("02:08", 0))                              // the hour's first instant
	f.HistoryAt(f.Failed(pending(), "550 5.1.1 no such user"), at("02:07", 59.999999)) // just before it
	f.HistoryAt(f.Sent(pending(), "p-2"), at("03:07", 41))                             // the last minute, before now
	f.HistoryAt(f.Held(pending(), "cannot render"), at("03:07", 59.9))                 // the last minute, after now
	f.HistoryAt(f.Sent(pending(), "p-3"), at("03:08", 0))                              // the next minute

	// 02:20: two sent, one of them from held by an operator's mark-sent.
	f.HistoryAt(f.Sent(pending(), "p-4"), at("02:20", 1))
	held := f.Held(pending(), "cannot render")
	if _, err := dbsqlc.New(db.Pool).OperatorMarkSent(ctx, dbsqlc.OperatorMarkSentParams{
		ID: held.ID, ProviderMessageID: "p-5", Actor: "operator:Ana", Note: "found at the provider"}); err != nil {
		t.Fatal(err)
	}
	f.HistoryAt(held, at("02:20", 30))
	// 02:40: deferred twice (rows, not deliveries), then put back by the
	// reconciler after a dead worker's hand-over: three deferred.
	d := f.Deferred(f.Deferred(pending(), "421 try later", false), "451 greylisted", true)
	f.TakenOver(f.HandedOver(d, -time.Second).Delivery)
	f.HistoryAt(d, at("02:40", 10))
	// 02:45: failed and retried by an operator: the retry is the
	// activity's, not a deferral.
	f.HistoryAt(f.Retried(f.Failed(pending(), "550 5.1.1 no such user"), false), at("02:45", 5))
	// 02:50: cancelled; expired (failed); a note that changes no status.
	c := pending()
	if _, err := notify.Cancel(ctx, db.Pool, c.ID, notify.Canceller{Actor: "operator:Ana", Operator: true}, "called off"); err != nil {
		t.Fatal(err)
	}
	f.HistoryAt(c, at("02:50", 0))
	e := pending()
	if err := notify.ExpirePending(ctx, db.Pool, e.ID, 0, "expired: never taken", "test"); err != nil {
		t.Fatal(err)
	}
	f.HistoryAt(e, at("02:50", 59))
	note := pending()
	if err := notify.RecordEvent(ctx, db.Pool, note, "blocked", "test", map[string]string{"block": "1"}); err != nil {
		t.Fatal(err)
	}
	f.HistoryAt(note, at("02:50", 30))
	// 02:51: suppressed.
	s := pending()
	if _, err := dbsqlc.New(db.Pool).AddSuppression(ctx, dbsqlc.AddSuppressionParams{Recipient: s.Recipient, Source: "operator", Reason: "asked", Actor: "operator:Ana"}); err != nil {
		t.Fatal(err)
	}
	if err := notify.SuppressPending(ctx, db.Pool, s.ID, "test"); err != nil {
		t.Fatal(err)
	}
	f.HistoryAt(s, at("02:51", 0))

	got, err := notify.LastHour(ctx, db.Pool, now.In(time.FixedZone("WIB", 7*3600)))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]notify.Minute, notify.HourMinutes)
	for i := range want {
		want[i].Start = at("02:08", 0).Add(time.Duration(i) * time.Minute)
	}
	minute := func(hhmm string) *notify.Minute {
		i := int(at(hhmm, 0).Sub(want[0].Start) / time.Minute)
		return &want[i]
	}
	minute("02:08").Received, minute("02:08").Sent = 1, 1
	minute("03:07").Received, minute("03:07").Sent, minute("03:07").Held = 2, 1, 1
	minute("02:20").Received, minute("02:20").Sent, minute("02:20").Held = 2, 2, 1
	minute("02:40").Received, minute("02:40").Deferred = 1, 3
	minute("02:45").Received, minute("02:45").Failed = 1, 1
	minute("02:50").Received, minute("02:50").Cancelled, minute("02:50").Failed = 3, 1, 1
	minute("02:51").Received, minute("02:51").Suppressed = 1, 1

	if len(got) != len(want) {
		t.Fatalf("%d minutes, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] || got[i].Start.Location() != time.UTC {
			t.Errorf("minute %d: %+v\n            want %+v (in UTC)", i, got[i], want[i])
		}
	}
	if got[22] != (notify.Minute{Start: at("02:30", 0)}) {
		t.Errorf("02:30, when nothing happened: %+v", got[22])
	}
}

// An hour with nothing in the history is sixty minutes at zero, the last
// one now's.
func TestLastHourOfAnEmptyHistory(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	now := time.Now()
	got, err := notify.LastHour(context.Background(), db.Pool, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != notify.HourMinutes {
		t.Fatalf("%d minutes, want %d", len(got), notify.HourMinutes)
	}
	last := now.UTC().Truncate(time.Minute)
	for i, m := range got {
		if m != (notify.Minute{Start: last.Add(time.Duration(i-notify.HourMinutes+1) * time.Minute)}) {
			t.Errorf("minute %d: %+v, want nothing from %s", i, m, last.Add(time.Duration(i-notify.HourMinutes+1)*time.Minute))
		}
	}
}

// placeOrder records an order, with its confirmation, through the
// checkout's own statement; the tests' deliveries belong to it.
func placeOrder(t *testing.T, db testenv.DB) uuid.UUID {
	t.Helper()
	id := uuid.New()
	if err := dbsqlc.New(db.Pool).InsertCheckout(context.Background(), dbsqlc.InsertCheckoutParams{
		ID: id, CustomerEmail: "ana@example.com", CustomerName: "Ana", Currency: "IDR", TotalMinor: 9000000,
		CreatedAt: time.Now(), AccessTokenHash: make([]byte, 32),
		LineNos: []int32{1}, Skus: []string{"TEA-01"}, Names: []string{"Teh melati"}, Quantities: []int32{2}, UnitPricesMinor: []int64{4500000},
		DeliveryID: uuid.New(), Template: "order-confirmation", Recipient: "ana@example.com",
		IdempotencyKey: "order-confirmation:" + id.String() + ":ana@example.com", TemplateData: []byte(`{}`),
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// The last hour is a range of delivery_events_flow_idx: the statement's
// WHERE implies the partial index's predicate, so the planner can use it
// (on this empty table it would rather scan, hence enable_seqscan off).
// An edit of either that breaks the implication makes the console's
// read a scan of the whole history again.
func TestLastHourReadsTheFlowIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	raw, err := os.ReadFile("../../db/queries/console.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, query, ok := strings.Cut(string(raw), "-- name: CountHistoryByMinute :many")
	if !ok {
		t.Fatal("db/queries/console.sql has no CountHistoryByMinute")
	}
	query, _, _ = strings.Cut(query, "-- name:")
	query = strings.NewReplacer("@since", "$1", "@until", "$2").Replace(strings.TrimSpace(query))
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Truncate(time.Minute).Add(-59 * time.Minute)
	rows, err := conn.Query(ctx, "EXPLAIN "+strings.TrimSuffix(query, ";"), since, since.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(plan, "\n"), "delivery_events_flow_idx") {
		t.Errorf("the last hour's plan does not read delivery_events_flow_idx:\n%s", strings.Join(plan, "\n"))
	}
}
