package order_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/testenv"
)

type noQueue struct{}

func (noQueue) EnqueueAfterCommit(context.Context, []notify.Delivery) {}

// BenchmarkPlace is one checkout's database work: the order, its lines,
// its confirmation's intent and history, with and without an
// Idempotency-Key. pg-µs/op is what it costs PostgreSQL.
func BenchmarkPlace(b *testing.B) {
	price := int64(4500000)
	c := order.Checkout{CustomerEmail: "ana@example.com", CustomerName: "Ana", Currency: "IDR",
		Items: []order.CheckoutItem{{SKU: "TEA-01", Name: "Teh melati", Quantity: 2, UnitPrice: &price}, {SKU: "CUP-02", Name: "Cangkir", Quantity: 1, UnitPrice: &price}}}
	for _, withKey := range []bool{false, true} {
		name := map[bool]string{false: "no-key", true: "idempotency-key"}[withKey]
		b.Run(name, func(b *testing.B) {
			db := testenv.NewDB(b)
			pool, pgCPU := testenv.OneBackend(b, db)
			tmpl, err := mailtemplate.LoadBuiltin()
			if err != nil {
				b.Fatal(err)
			}
			s := order.NewService(pool, noQueue{}, tmpl, time.Hour, prometheus.NewRegistry())
			keys := make([]string, b.N)
			for i := range keys {
				if withKey {
					keys[i] = fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			before := pgCPU()
			for i := 0; i < b.N; i++ {
				if _, err := s.Place(ctx, c, order.Caller{}, keys[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((pgCPU()-before).Microseconds())/float64(b.N), "pg-µs/op")
		})
	}
}
