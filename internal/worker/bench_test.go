package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/queue"
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
		_ = mail.KeyHash(key)
	}
}

func BenchmarkRenderOrderConfirmation(b *testing.B) {
	tmpl, err := mailtemplate.LoadBuiltin()
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
// once it holds the lock: claim, last lease check, sent, each for that
// delivery alone (a batch of one; BenchmarkClaim, BenchmarkHandover and
// BenchmarkSent measure each statement at every batch size). pg-µs/op is
// what it costs PostgreSQL (claim and sent are committed without waiting
// for the WAL flush; the hand-over waits). history-row is one
// delivery_events insert on its own, the part of every transition that
// keeps the history.
func BenchmarkClaimHandOverSent(b *testing.B) {
	b.Run("all", func(b *testing.B) {
		pool, pgCPU, ids, leases := prepareRows(b, b.N, pendingRows)
		q := dbsqlc.New(postgres.GenericPlans{DB: pool}) // as the worker runs them
		ctx := context.Background()
		b.ResetTimer()
		before := pgCPU()
		for i := 0; i < b.N; i++ {
			one, lease := ids[i:i+1], leases[i:i+1]
			claimRows(b, q, one, lease)
			if rows, err := q.HandOverDeliveries(ctx, dbsqlc.HandOverDeliveriesParams{Ids: one, LeaseTokens: lease, LeaseSeconds: 30, Actor: "bench"}); err != nil || len(rows) != 1 {
				b.Fatalf("hand-over: %d rows, %v", len(rows), err)
			}
			if rows, err := q.CompleteDeliveries(ctx, sentParams(one, lease)); err != nil || len(rows) != 1 {
				b.Fatalf("sent: %d rows, %v", len(rows), err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(pgCPU()-before)/float64(b.N), "pg-µs/op")
	})
	b.Run("history-row", func(b *testing.B) {
		db := testenv.NewDB(b)
		pool, pgCPU := testenv.OneBackend(b, db)
		ctx := context.Background()
		ids := insertDeliveries(b, pool, 1)
		b.ResetTimer()
		before := pgCPU()
		for i := 0; i < b.N; i++ {
			if _, err := pool.Exec(ctx, `INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
				VALUES ($1, 'claimed', 'pending', 'sending', 1, 'bench', jsonb_build_object('task_id', 't'::text))`, ids[0]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64((pgCPU()-before).Microseconds())/float64(b.N), "pg-µs/op")
	})
}

// insertDeliveries records n pending deliveries of one order, keyed by
// their ids.
func insertDeliveries(b *testing.B, pool *pgxpool.Pool, n int) []uuid.UUID {
	b.Helper()
	ctx := context.Background()
	q := dbsqlc.New(pool)
	orderID := uuid.New()
	if _, err := pool.Exec(ctx, "INSERT INTO orders (id, customer_email, customer_name, currency, total_minor) VALUES ($1, 'a@example.com', 'A', 'USD', 1)", orderID); err != nil {
		b.Fatal(err)
	}
	data, _ := json.Marshal(map[string]string{"x": "y"})
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
		if _, err := q.InsertDelivery(ctx, dbsqlc.InsertDeliveryParams{ID: ids[i], OrderID: orderID, Template: "order-confirmation",
			Recipient: "a@example.com", IdempotencyKey: ids[i].String(), TemplateData: data, CreatedAt: time.Now(), Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	return ids
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
		if err := w.ProcessTask(context.Background(), queue.NewDeliverTask(ds[i])); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n := e.sink.Count(); n != b.N {
		b.Fatalf("%d e-mails for %d deliveries", n, b.N)
	}
}
