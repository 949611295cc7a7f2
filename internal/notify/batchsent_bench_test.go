package notify_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// batchedSent is the shape a batched completer would give MarkSent: the
// outcomes of several attempts in one statement, rows locked in id order
// (so that two batches cannot deadlock), each fenced by its own lease,
// committed without waiting for the WAL flush like MarkSent. It is not in
// db/queries because it was measured and not kept (docs/performance.md,
// "Cutting the cost per order"); it lives here so that the measurement
// can be repeated.
const batchedSent = `
WITH nosync AS (
    SELECT set_config('synchronous_commit', 'off', true)
), input AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS t(id, lease_token, provider_message_id)
), locked AS (
    SELECT d.id FROM notification_deliveries d JOIN input i ON i.id = d.id
    ORDER BY d.id FOR UPDATE OF d
), upd AS (
    UPDATE notification_deliveries d
    SET status              = 'sent',
        provider_message_id = i.provider_message_id,
        sent_at             = now(),
        last_error          = NULL,
        updated_at          = now()
    FROM input i, locked l, nosync
    WHERE d.id = i.id AND l.id = d.id
      AND d.status = 'sending'
      AND d.lease_token = i.lease_token
    RETURNING d.id, d.attempts, i.provider_message_id
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT id, 'sent', 'sending', 'sent', attempts, 'bench',
       jsonb_build_object('provider_message_id', provider_message_id, 'language', 'id')
FROM upd`

// BenchmarkBatchedSent measures that statement for batches of 1, 2, 4 and
// 16 rows beside the single-row MarkSent the worker runs (single). One op
// is one row's outcome, so pg-µs/op compares directly: a batch pays when
// its per-row cost is under single's.
func BenchmarkBatchedSent(b *testing.B) {
	ctx := context.Background()
	prepare := func(b *testing.B) (*pgxpool.Pool, func() int64, []uuid.UUID, []uuid.UUID) {
		db := testenv.NewDB(b)
		pool, pgCPU := testenv.OneBackend(b, db)
		q := dbsqlc.New(pool)
		ids, leases := insertDeliveries(b, pool, b.N), make([]uuid.UUID, b.N)
		for i, id := range ids {
			leases[i] = uuid.New()
			if _, err := q.ClaimDelivery(ctx, dbsqlc.ClaimDeliveryParams{ID: id, KeyHash: mail.KeyHash(id.String()), Templates: []string{"order-confirmation"},
				MaxAgeSeconds: 3600, LeaseToken: leases[i], LeaseSeconds: 30, Actor: "bench", TaskID: "t", MessageID: "m@shop.example"}); err != nil {
				b.Fatal(err)
			}
			if _, err := q.HandOver(ctx, dbsqlc.HandOverParams{ID: id, LeaseToken: leases[i], LeaseSeconds: 30, Actor: "bench"}); err != nil {
				b.Fatal(err)
			}
		}
		return pool, func() int64 { return pgCPU().Microseconds() }, ids, leases
	}
	b.Run("single", func(b *testing.B) {
		pool, pgCPU, ids, leases := prepare(b)
		q := dbsqlc.New(pool)
		b.ResetTimer()
		before := pgCPU()
		for i := 0; i < b.N; i++ {
			n, err := q.MarkSent(ctx, dbsqlc.MarkSentParams{ID: ids[i], LeaseToken: leases[i], ProviderMessageID: "p", Actor: "bench"})
			if err != nil || n != 1 {
				b.Fatalf("sent: %d rows, %v", n, err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(pgCPU()-before)/float64(b.N), "pg-µs/op")
	})
	for _, size := range []int{1, 2, 4, 16} {
		b.Run(fmt.Sprintf("batch-%d", size), func(b *testing.B) {
			pool, pgCPU, ids, leases := prepare(b)
			pmids := make([]string, size)
			for i := range pmids {
				pmids[i] = "p"
			}
			b.ResetTimer()
			before := pgCPU()
			for i := 0; i < b.N; i += size {
				end := min(i+size, b.N)
				tag, err := pool.Exec(ctx, batchedSent, ids[i:end], leases[i:end], pmids[:end-i])
				if err != nil || tag.RowsAffected() != int64(end-i) {
					b.Fatalf("batched sent: %d rows of %d, %v", tag.RowsAffected(), end-i, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(pgCPU()-before)/float64(b.N), "pg-µs/op")
		})
	}
}
