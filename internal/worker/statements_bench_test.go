package worker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The worker's three statements on the way to a send, each shared by
// the attempts that reach it at once (batch.go): claim, hand-over, sent.
// Each benchmark runs the statement for batches of 1, 4, 16 and 64 rows,
// through postgres.GenericPlans as the worker runs them, beside the
// single-row statement it replaced (single, kept below as it was). One
// op is one row, so pg-µs/op (the PostgreSQL backend's CPU per row)
// compares directly: batch-1 is what a lone attempt pays (a little more
// than single: the setting GenericPlans sends first), the larger batches
// what sharing buys under load.

// singleClaim, singleHandOver and singleSent are the single-row
// statements of db/queries/transitions.sql before they took many rows.
const (
	singleClaim = `
WITH nosync AS (
    SELECT set_config('synchronous_commit', 'off', true)
), prev AS (
    SELECT n.id, n.status FROM notification_deliveries n, nosync WHERE n.id = $1 FOR UPDATE OF n
), claimed AS (
    UPDATE notification_deliveries d
    SET status = 'sending', lease_token = $2::uuid, lease_expires_at = now() + make_interval(secs => 30),
        handed_over_at = NULL, message_id = coalesce(d.message_id, $3::text), attempts = d.attempts + 1, updated_at = now()
    FROM prev
    WHERE d.id = prev.id
      AND (d.status = 'pending' OR (d.status = 'sending' AND d.lease_expires_at < now() AND d.handed_over_at IS NULL))
      AND encode(substring(sha256(convert_to(d.idempotency_key, 'UTF8')) FROM 1 FOR 16), 'hex') = $4::text
      AND d.template = ANY($5::text[])
      AND (d.status <> 'pending' OR d.trying_since > now() - make_interval(secs => 3600))
      AND NOT EXISTS (SELECT 1 FROM delivery_blocks b WHERE b.expires_at > now()
                        AND ((b.kind = 'key' AND b.value = d.idempotency_key) OR (b.kind = 'recipient' AND b.value = d.recipient)))
      AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.recipient = d.recipient)
    RETURNING d.*, prev.status AS from_status
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
    SELECT id, 'claimed', from_status, 'sending', attempts, 'bench', jsonb_build_object('task_id', 't') FROM claimed
)
SELECT id FROM claimed`
	singleHandOver = `
WITH upd AS (
    UPDATE notification_deliveries d
    SET handed_over_at = now(), lease_expires_at = now() + make_interval(secs => 30), updated_at = now()
    WHERE d.id = $1 AND d.status = 'sending' AND d.lease_token = $2::uuid AND d.lease_expires_at > now()
    RETURNING d.id, d.attempts, d.handed_over_at
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor)
    SELECT id, 'handed_over', 'sending', 'sending', attempts, 'bench' FROM upd
)
SELECT handed_over_at FROM upd`
	singleSent = `
WITH nosync AS (
    SELECT set_config('synchronous_commit', 'off', true)
), upd AS (
    UPDATE notification_deliveries d
    SET status = 'sent', provider_message_id = 'p', sent_at = now(), last_error = NULL, updated_at = now()
    FROM nosync
    WHERE d.id = $1 AND d.status = 'sending' AND d.lease_token = $2::uuid
    RETURNING d.id, d.attempts
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT id, 'sent', 'sending', 'sent', attempts, 'bench', jsonb_build_object('provider_message_id', 'p', 'language', 'id') FROM upd`
)

var batchSizes = []int{1, 4, 16, 64}

// stage is how far the rows of a statement's benchmark have gone before
// it: pending (claim), claimed (hand-over), handed over (sent).
type stage int

const (
	pendingRows stage = iota
	claimedRows
	handedOverRows
)

// prepareRows makes n deliveries at stage s, on a database of its own,
// and a pool of one connection whose backend's CPU is counted.
func prepareRows(b *testing.B, n int, s stage) (*pgxpool.Pool, func() int64, []uuid.UUID, []uuid.UUID) {
	b.Helper()
	ctx := context.Background()
	db := testenv.NewDB(b)
	pool, pgCPU := testenv.OneBackend(b, db)
	q := dbsqlc.New(pool)
	ids, leases := insertDeliveries(b, pool, n), make([]uuid.UUID, n)
	for i, id := range ids {
		leases[i] = uuid.New()
		if s >= claimedRows {
			claimRows(b, q, ids[i:i+1], leases[i:i+1])
		}
		if s >= handedOverRows {
			if rows, err := q.HandOverDeliveries(ctx, dbsqlc.HandOverDeliveriesParams{Ids: []uuid.UUID{id}, LeaseTokens: leases[i : i+1], LeaseSeconds: 30, Actor: "bench"}); err != nil || len(rows) != 1 {
				b.Fatalf("hand-over: %d rows, %v", len(rows), err)
			}
		}
	}
	// Statistics, as a table in service has them: without any, the
	// planner takes the table for a few rows and scans every row in
	// sending for one.
	if _, err := pool.Exec(ctx, "ANALYZE notification_deliveries"); err != nil {
		b.Fatal(err)
	}
	return pool, func() int64 { return pgCPU().Microseconds() }, ids, leases
}

// claimRows claims ids under leases in one statement, as a batch does.
func claimRows(b *testing.B, q *dbsqlc.Queries, ids, leases []uuid.UUID) {
	b.Helper()
	p := dbsqlc.ClaimDeliveriesParams{LeaseSeconds: 30, Templates: []string{"order-confirmation"}, MaxAgeSeconds: 3600, Actor: "bench"}
	for i, id := range ids {
		p.Ids, p.LeaseTokens = append(p.Ids, id), append(p.LeaseTokens, leases[i])
		p.KeyHashes, p.MessageIds, p.TaskIds = append(p.KeyHashes, mail.KeyHash(id.String())), append(p.MessageIds, "m@shop.example"), append(p.TaskIds, "t")
	}
	rows, err := q.ClaimDeliveries(context.Background(), p)
	claimed := 0
	for _, r := range rows {
		if r.Verdict == "claimed" {
			claimed++
		}
	}
	if err != nil || claimed != len(ids) {
		b.Fatalf("claim: %d rows of %d taken, %v", claimed, len(ids), err)
	}
}

// benchStatement runs single (one row a statement) and the batch
// statement for each size, reporting pg-µs/op.
func benchStatement(b *testing.B, s stage, single func(b *testing.B, pool *pgxpool.Pool, id, lease uuid.UUID), batched func(b *testing.B, q *dbsqlc.Queries, ids, leases []uuid.UUID)) {
	b.Run("single", func(b *testing.B) {
		pool, pgCPU, ids, leases := prepareRows(b, b.N, s)
		b.ResetTimer()
		before := pgCPU()
		for i := 0; i < b.N; i++ {
			single(b, pool, ids[i], leases[i])
		}
		b.StopTimer()
		b.ReportMetric(float64(pgCPU()-before)/float64(b.N), "pg-µs/op")
	})
	for _, size := range batchSizes {
		b.Run(fmt.Sprintf("batch-%d", size), func(b *testing.B) {
			pool, pgCPU, ids, leases := prepareRows(b, b.N, s)
			q := dbsqlc.New(postgres.GenericPlans{DB: pool}) // as the worker runs them
			b.ResetTimer()
			before := pgCPU()
			for i := 0; i < b.N; i += size {
				end := min(i+size, b.N)
				batched(b, q, ids[i:end], leases[i:end])
			}
			b.StopTimer()
			b.ReportMetric(float64(pgCPU()-before)/float64(b.N), "pg-µs/op")
		})
	}
}

func BenchmarkClaim(b *testing.B) {
	benchStatement(b, pendingRows, func(b *testing.B, pool *pgxpool.Pool, id, lease uuid.UUID) {
		var got uuid.UUID
		if err := pool.QueryRow(context.Background(), singleClaim, id, lease, "m@shop.example", mail.KeyHash(id.String()), []string{"order-confirmation"}).Scan(&got); err != nil {
			b.Fatal(err)
		}
	}, claimRows)
}

func BenchmarkHandover(b *testing.B) {
	benchStatement(b, claimedRows, func(b *testing.B, pool *pgxpool.Pool, id, lease uuid.UUID) {
		if tag, err := pool.Exec(context.Background(), singleHandOver, id, lease); err != nil || tag.RowsAffected() != 1 {
			b.Fatalf("hand-over: %v, %v", tag, err)
		}
	}, func(b *testing.B, q *dbsqlc.Queries, ids, leases []uuid.UUID) {
		if rows, err := q.HandOverDeliveries(context.Background(), dbsqlc.HandOverDeliveriesParams{Ids: ids, LeaseTokens: leases, LeaseSeconds: 30, Actor: "bench"}); err != nil || len(rows) != len(ids) {
			b.Fatalf("hand-over: %d rows of %d, %v", len(rows), len(ids), err)
		}
	})
}

func BenchmarkSent(b *testing.B) {
	benchStatement(b, handedOverRows, func(b *testing.B, pool *pgxpool.Pool, id, lease uuid.UUID) {
		if tag, err := pool.Exec(context.Background(), singleSent, id, lease); err != nil || tag.RowsAffected() != 1 {
			b.Fatalf("sent: %v, %v", tag, err)
		}
	}, func(b *testing.B, q *dbsqlc.Queries, ids, leases []uuid.UUID) {
		if rows, err := q.CompleteDeliveries(context.Background(), sentParams(ids, leases)); err != nil || len(rows) != len(ids) {
			b.Fatalf("sent: %d rows of %d, %v", len(rows), len(ids), err)
		}
	})
}

// sentParams records ids sent under leases, as the worker's completion
// of accepted attempts does.
func sentParams(ids, leases []uuid.UUID) dbsqlc.CompleteDeliveriesParams {
	p := dbsqlc.CompleteDeliveriesParams{Ids: ids, LeaseTokens: leases, Async: true, LeaseSeconds: 30, Actor: "bench"}
	for range ids {
		p.Outcomes, p.Reasons, p.Refunds, p.Pins = append(p.Outcomes, "sent"), append(p.Reasons, ""), append(p.Refunds, false), append(p.Pins, false)
		p.ProviderMessageIds, p.Languages, p.Providers = append(p.ProviderMessageIds, "p"), append(p.Languages, "id"), append(p.Providers, "")
	}
	return p
}
