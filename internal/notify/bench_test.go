package notify_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Hot-path benchmarks; make bench-go runs them with -count for benchstat.

func BenchmarkKey(b *testing.B) {
	id := uuid.New()
	b.ReportAllocs()
	for b.Loop() {
		_ = notify.Key("order-confirmation", id, "ana.maria@example.com")
	}
}

func BenchmarkKeyHash(b *testing.B) {
	key := notify.Key("order-confirmation", uuid.New(), "ana.maria@example.com")
	b.ReportAllocs()
	for b.Loop() {
		_ = notify.KeyHash(key)
	}
}

func BenchmarkRenderOrderConfirmation(b *testing.B) {
	tmpl, err := notify.LoadTemplates()
	if err != nil {
		b.Fatal(err)
	}
	data, err := tmpl.Sample("order-confirmation")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Render("order-confirmation", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimHandOverSent is the SQL a worker spends on one delivery
// once it holds the lock: claim, last lease check, sent.
// pg-µs/op is what it costs PostgreSQL (claim and sent are committed
// without waiting for the WAL flush; the hand-over waits).
func BenchmarkClaimHandOverSent(b *testing.B) {
	db := testenv.NewDB(b)
	pool, pgCPU := testenv.OneBackend(b, db)
	ctx := context.Background()
	q := dbsqlc.New(pool)
	orderID := uuid.New()
	if _, err := pool.Exec(ctx, "INSERT INTO orders (id, customer_email, customer_name, currency, total_minor) VALUES ($1, 'a@example.com', 'A', 'USD', 1)", orderID); err != nil {
		b.Fatal(err)
	}
	data, _ := json.Marshal(map[string]string{"x": "y"})
	ids := make([]uuid.UUID, b.N)
	for i := range ids {
		ids[i] = uuid.New()
		if _, err := q.InsertDelivery(ctx, dbsqlc.InsertDeliveryParams{ID: ids[i], OrderID: orderID, Template: "order-confirmation",
			Recipient: "a@example.com", IdempotencyKey: ids[i].String(), TemplateData: data, CreatedAt: time.Now(), Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	before := pgCPU()
	for i := 0; i < b.N; i++ {
		lease := uuid.New()
		if _, err := q.ClaimDelivery(ctx, dbsqlc.ClaimDeliveryParams{ID: ids[i], KeyHash: notify.KeyHash(ids[i].String()), Templates: []string{"order-confirmation"},
			MaxAgeSeconds: 3600, LeaseToken: lease, LeaseSeconds: 30, Actor: "bench", TaskID: "t", MessageID: "m@shop.example"}); err != nil {
			b.Fatal(err)
		}
		if _, err := q.HandOver(ctx, dbsqlc.HandOverParams{ID: ids[i], LeaseToken: lease, LeaseSeconds: 30, Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
		if n, err := q.MarkSent(ctx, dbsqlc.MarkSentParams{ID: ids[i], LeaseToken: lease, ProviderMessageID: "p", Actor: "bench"}); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((pgCPU()-before).Microseconds())/float64(b.N), "pg-µs/op")
}

// BenchmarkDeliver is one whole worker attempt against real PostgreSQL,
// Redis and the in-process SMTP sink, on a reused connection.
func BenchmarkDeliver(b *testing.B) {
	e := setup(b, smtpsink.Config{})
	w := e.worker(b, workerOpts{})
	ds := make([]notify.Delivery, b.N)
	for i := range ds {
		ds[i] = e.checkout(b, uuid.NewString()[:8]+"@example.com")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.ProcessTask(context.Background(), notify.NewDeliverTask(ds[i])); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n := e.sink.Count(); n != b.N {
		b.Fatalf("%d e-mails for %d deliveries", n, b.N)
	}
}
