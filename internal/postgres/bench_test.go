package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/sqlc-dev/pqtype"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// BenchmarkQueryExecMode is what default_query_exec_mode costs per
// statement, straight to PostgreSQL and through PgBouncer (transaction
// pooling, four server connections for a pool of four): the worker's
// read of a delivery (dbsqlc.GetDelivery: a uuid in, nineteen columns
// out) and a history row written (dbsqlc.RecordEvent, jsonb in), eight
// at once. cache_statement is pgx's default and does not work through
// the bouncer (TestMigrateBehindPgBouncerWithoutTheSettingSaysWhatToDo);
// exec writes no jsonb from []byte (it sends them as bytea text), so it
// only reads here.
func BenchmarkQueryExecMode(b *testing.B) {
	ctx := context.Background()
	db := testenv.NewDB(b)
	orderID, deliveryID := uuid.New(), uuid.New()
	// One order and its confirmation, by the checkout's own statement.
	if err := dbsqlc.New(db.Pool).InsertCheckout(ctx, dbsqlc.InsertCheckoutParams{
		ID: orderID, CustomerEmail: "ana@example.com", CustomerName: "Ana", Currency: "IDR", TotalMinor: 9000000,
		CreatedAt: time.Now(), AccessTokenHash: make([]byte, 32),
		LineNos: []int32{1}, Skus: []string{"TEA-01"}, Names: []string{"Teh melati"}, Quantities: []int32{2}, UnitPricesMinor: []int64{4500000},
		DeliveryID: deliveryID, Template: "order-confirmation", Recipient: "ana@example.com",
		IdempotencyKey: "order-confirmation:" + orderID.String() + ":ana@example.com",
		TemplateData:   []byte(`{"order_id": "x", "items": [{"sku": "TEA-01", "quantity": 2}]}`),
	}); err != nil {
		b.Fatal(err)
	}
	bouncer := testenv.NewPgBouncer(b, db, testenv.PgBouncerOptions{PoolSize: 4})
	detail := []byte(`{"reason": "benchmark"}`)

	for _, route := range []struct{ name, url string }{{"direct", db.URL}, {"pgbouncer", bouncer.URL}} {
		for _, mode := range []string{"cache_statement", "cache_describe", "exec"} {
			if route.name == "pgbouncer" && mode == "cache_statement" {
				continue
			}
			pool, err := postgres.Open(ctx, testenv.WithParams(b, route.url, "default_query_exec_mode", mode, "pool_max_conns", "4"))
			if err != nil {
				b.Fatal(err)
			}
			q := dbsqlc.New(pool)
			b.Run(route.name+"/"+mode+"/read", func(b *testing.B) {
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := q.GetDelivery(ctx, deliveryID); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
			if mode != "exec" {
				b.Run(route.name+"/"+mode+"/write", func(b *testing.B) {
					b.SetParallelism(4)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := q.RecordEvent(ctx, dbsqlc.RecordEventParams{DeliveryID: deliveryID, Event: "benchmark", Status: "pending",
								Actor: "bench", Detail: pqtype.NullRawMessage{RawMessage: detail, Valid: true}}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
			pool.Close()
		}
	}
}
