package main

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postgres"
)

// ceiling runs the SQL one order costs in the service — the checkout
// transaction (order and lines, intent with its history row), the
// worker's read, the claim, the last lease check and the sent write —
// straight at PostgreSQL, with
// o.concurrency orders in flight and no HTTP, Redis or SMTP, as fast as it
// goes for d. It returns orders per second and the CPU they cost.
func (b *bench) ceiling(ctx context.Context, d time.Duration) (ceilingResult, error) {
	dbURL, err := b.freshDatabase(ctx, "sekali_bench_ceiling")
	if err != nil {
		return ceilingResult{}, err
	}
	pool, err := pgxpool.New(ctx, withParam(dbURL, "pool_max_conns", fmt.Sprint(b.o.concurrency)))
	if err != nil {
		return ceilingResult{}, err
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return ceilingResult{}, err
	}
	b.settle(ctx, pool, false) // a fresh database: nothing to vacuum
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	cpuBefore := b.sampleCPU(nil)
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < b.o.concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				if err := oneOrder(ctx, pool, b.o.keys); err != nil {
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
		return ceilingResult{}, firstErr
	}
	elapsed := time.Since(start)
	n := float64(done.Load())
	return ceilingResult{rate: n / elapsed.Seconds(), cpu: b.sampleCPU(nil).since(cpuBefore, elapsed, n)}, nil
}

// ceilingResult is one measurement of the ceiling.
type ceilingResult struct {
	rate float64 // orders per second
	cpu  cpuUse
}

// settle puts PostgreSQL in the same state before every measurement.
// CHECKPOINT keeps a step from meeting the checkpoint the previous one
// caused. With vacuum, VACUUM (ANALYZE) also clears the dead rows the
// previous steps' updates left, as autovacuum would in production (CI
// machines run PostgreSQL with it off). Never vacuum or analyze an empty
// database before loading it: the statistics then say "no rows", the
// planner picks sequential scans, and with autovacuum off nothing
// corrects them — the ceiling measured that way cost twice the CPU per
// order. Both need a superuser (or the database's owner and
// pg_checkpoint); without them the run goes on, noisier.
func (b *bench) settle(ctx context.Context, pool *pgxpool.Pool, vacuum bool) {
	sqls := []string{"CHECKPOINT"}
	if vacuum {
		sqls = []string{"VACUUM (ANALYZE)", "CHECKPOINT"}
	}
	for _, sql := range sqls {
		if _, err := pool.Exec(ctx, sql); err != nil {
			b.unsettled = true
			b.logf("%s refused, measurements will be noisier: %v", sql, err)
		}
	}
}

// oneOrder is one order's SQL, with the values the API and the worker
// send for the checkout the load generator offers: the same two lines and
// the same template snapshot.
func oneOrder(ctx context.Context, pool *pgxpool.Pool, withKey bool) error {
	orderID := uuid.Must(uuid.NewV7())
	deliveryID := uuid.Must(uuid.NewV7())
	now := time.Now().UTC().Truncate(time.Microsecond)
	email := "c" + orderID.String()[:8] + "@example.com"
	data, err := json.Marshal(map[string]any{
		"order_id": orderID, "customer_name": "Bench", "currency": "IDR", "total": 21500050, "placed_at": now,
		"items": []map[string]any{
			{"sku": "TEA-01", "name": "Teh melati", "quantity": 2, "unit_price": 4500000, "line_total": 9000000},
			{"sku": "CUP-02", "name": "Cangkir", "quantity": 1, "unit_price": 12500050, "line_total": 12500050},
		},
	})
	if err != nil {
		return err
	}
	q := dbsqlc.New(pool)
	key := notify.Key("order-confirmation", orderID, email)
	p := dbsqlc.InsertCheckoutParams{ID: orderID, CustomerEmail: email, CustomerName: "Bench",
		Currency: "IDR", TotalMinor: 21500050, CreatedAt: now, AccessTokenHash: make([]byte, 32), LineNos: []int32{1, 2},
		Skus: []string{"TEA-01", "CUP-02"}, Names: []string{"Teh melati", "Cangkir"}, Quantities: []int32{2, 1},
		UnitPricesMinor: []int64{4500000, 12500050}, DeliveryID: deliveryID, Template: "order-confirmation",
		Recipient: email, IdempotencyKey: key, TemplateData: data}
	if !withKey {
		err = q.InsertCheckout(ctx, p)
	} else {
		// As the API runs a checkout with an Idempotency-Key: its lock,
		// the look-up that finds nothing, the checkout with the response.
		p.Remember, p.Scope, p.Key, p.RequestHash, p.ResponseBody, p.ExpiresAt = true, "POST /v1/orders", "ceiling-"+orderID.String(),
			make([]byte, 32), data, now.Add(24*time.Hour)
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			tq := dbsqlc.New(tx)
			if _, err := tq.TryLockIdempotencyKey(ctx, dbsqlc.TryLockIdempotencyKeyParams{Scope: p.Scope, Key: p.Key}); err != nil {
				return err
			}
			if _, err := tq.GetIdempotencyKey(ctx, dbsqlc.GetIdempotencyKeyParams{Scope: p.Scope, Key: p.Key}); !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("a fresh key found: %w", err)
			}
			return tq.InsertCheckout(ctx, p)
		})
	}
	if err != nil {
		return fmt.Errorf("ceiling checkout: %w", err)
	}
	// The worker's three statements, each for one row and on its generic
	// plan as the worker runs them: the ceiling is the SQL of one order
	// alone, shared with nothing.
	ids, leases := []uuid.UUID{deliveryID}, []uuid.UUID{uuid.New()}
	wq := dbsqlc.New(postgres.GenericPlans{DB: pool})
	if _, err := wq.ClaimDeliveries(ctx, dbsqlc.ClaimDeliveriesParams{Ids: ids, KeyHashes: []string{mail.KeyHash(key)}, Templates: []string{"order-confirmation"},
		MaxAgeSeconds: 3600, LeaseTokens: leases, LeaseSeconds: 30, MessageIds: []string{mail.MessageID(key, "shop.example")}, Actor: "w", TaskIds: []string{"t"}}); err != nil {
		return fmt.Errorf("ceiling claim: %w", err)
	}
	if _, err := wq.HandOverDeliveries(ctx, dbsqlc.HandOverDeliveriesParams{Ids: ids, LeaseTokens: leases, LeaseSeconds: 30, Actor: "w"}); err != nil {
		return fmt.Errorf("ceiling hand-over: %w", err)
	}
	if _, err := wq.CompleteDeliveries(ctx, dbsqlc.CompleteDeliveriesParams{Ids: ids, LeaseTokens: leases, Outcomes: []string{"sent"}, Reasons: []string{""},
		Refunds: []bool{false}, Pins: []bool{false}, ProviderMessageIds: []string{"p"}, Languages: []string{"id"}, Providers: []string{""},
		Async: true, LeaseSeconds: 30, Actor: "w"}); err != nil {
		return fmt.Errorf("ceiling sent: %w", err)
	}
	return nil
}
