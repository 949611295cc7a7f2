package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postgres"
)

// ceiling runs the SQL one order costs in the service — the checkout
// transaction (order and lines, intent with its history row), the claim,
// the last lease check and the sent write — straight at PostgreSQL, with
// o.concurrency orders in flight and no HTTP, Redis or SMTP, as fast as it
// goes for d. It returns orders per second.
func (b *bench) ceiling(ctx context.Context, d time.Duration) (float64, error) {
	dbURL, err := b.freshDatabase(ctx, "sekali_bench_ceiling")
	if err != nil {
		return 0, err
	}
	pool, err := pgxpool.New(ctx, withParam(dbURL, "pool_max_conns", fmt.Sprint(b.o.concurrency)))
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return 0, err
	}
	data, _ := json.Marshal(map[string]any{"items": []any{map[string]any{"sku": "TEA-01", "quantity": 2}}, "total": 21500050})

	var done atomic.Int64
	var firstErr error
	var once sync.Once
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < b.o.concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				if err := oneOrder(ctx, pool, data); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}

func oneOrder(ctx context.Context, pool *pgxpool.Pool, data []byte) error {
	orderID := uuid.Must(uuid.NewV7())
	deliveryID := uuid.Must(uuid.NewV7())
	now := time.Now().UTC().Truncate(time.Microsecond)
	email := orderID.String()[:8] + "@example.com"
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		if err := q.InsertOrder(ctx, dbsqlc.InsertOrderParams{ID: orderID, CustomerEmail: email, CustomerName: "Bench",
			Currency: "IDR", TotalMinor: 21500050, CreatedAt: now, LineNos: []int32{1, 2},
			Skus: []string{"TEA-01", "CUP-02"}, Names: []string{"Teh melati", "Cangkir"}, Quantities: []int32{2, 1},
			UnitPricesMinor: []int64{4500000, 12500050}}); err != nil {
			return err
		}
		_, err := q.InsertDelivery(ctx, dbsqlc.InsertDeliveryParams{ID: deliveryID, OrderID: orderID, Template: "order-confirmation",
			Recipient: email, IdempotencyKey: notify.Key("order-confirmation", orderID, email), TemplateData: data, CreatedAt: now, Actor: "api"})
		return err
	})
	if err != nil {
		return fmt.Errorf("ceiling checkout: %w", err)
	}
	q := dbsqlc.New(pool)
	lease := uuid.New()
	if _, err := q.ClaimDelivery(ctx, dbsqlc.ClaimDeliveryParams{ID: deliveryID, LeaseToken: lease, LeaseSeconds: 30, Actor: "w", TaskID: "t"}); err != nil {
		return fmt.Errorf("ceiling claim: %w", err)
	}
	if _, err := q.HandOver(ctx, dbsqlc.HandOverParams{ID: deliveryID, LeaseToken: lease, LeaseSeconds: 30, Actor: "w"}); err != nil {
		return fmt.Errorf("ceiling hand-over: %w", err)
	}
	if _, err := q.MarkSent(ctx, dbsqlc.MarkSentParams{ID: deliveryID, LeaseToken: lease, ProviderMessageID: "p", Actor: "w"}); err != nil {
		return fmt.Errorf("ceiling sent: %w", err)
	}
	return nil
}
