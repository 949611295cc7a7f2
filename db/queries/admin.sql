-- name: ListDeliveries :many
-- Operators' view; every filter is optional.
SELECT * FROM notification_deliveries
WHERE (sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status)::text)
  AND (sqlc.narg(template)::text IS NULL OR template = sqlc.narg(template)::text)
  AND (sqlc.narg(order_id)::uuid IS NULL OR order_id = sqlc.narg(order_id)::uuid)
  AND (sqlc.narg(idempotency_key)::text IS NULL OR idempotency_key = sqlc.narg(idempotency_key)::text)
  AND (sqlc.narg(older_than_seconds)::float8 IS NULL
       OR updated_at < now() - make_interval(secs => sqlc.narg(older_than_seconds)::float8))
ORDER BY updated_at, id
LIMIT @max_rows;

-- name: OperatorRetry :one
-- A failed or held delivery gets a fresh set of attempts under the same
-- idempotency key.
WITH prev AS (
    SELECT n.id, n.status FROM notification_deliveries n WHERE n.id = @id FOR UPDATE
), upd AS (
    UPDATE notification_deliveries d
    SET status           = 'pending',
        attempts         = 0,
        lease_token      = NULL,
        lease_expires_at = NULL,
        handed_over_at   = NULL,
        trying_since     = now(),
        updated_at       = now()
    FROM prev
    WHERE d.id = prev.id AND d.status IN ('failed', 'held')
    RETURNING d.*, prev.status AS from_status
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
    SELECT upd.id, 'operator_retry', upd.from_status, 'pending', 0, @actor::text,
           jsonb_build_object('note', @note::text)
    FROM upd
)
SELECT id, order_id, template, recipient, idempotency_key, status, attempts, last_error,
       lease_token, lease_expires_at, handed_over_at, provider_message_id, template_data,
       created_at, updated_at, sent_at, message_id, trying_since
FROM upd;

-- name: OperatorMarkSent :one
-- A held delivery the operator found at the provider.
WITH upd AS (
    UPDATE notification_deliveries d
    SET status              = 'sent',
        provider_message_id = @provider_message_id::text,
        sent_at             = now(),
        updated_at          = now()
    WHERE d.id = @id AND d.status = 'held'
    RETURNING d.*
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
    SELECT upd.id, 'operator_mark_sent', 'held', 'sent', upd.attempts, @actor::text,
           jsonb_build_object('provider_message_id', @provider_message_id::text, 'note', @note::text)
    FROM upd
)
SELECT id, order_id, template, recipient, idempotency_key, status, attempts, last_error,
       lease_token, lease_expires_at, handed_over_at, provider_message_id, template_data,
       created_at, updated_at, sent_at, message_id, trying_since
FROM upd;

-- name: InsertBlock :one
INSERT INTO delivery_blocks (kind, value, reason, expires_at)
VALUES (@kind, @value, @reason, now() + make_interval(secs => @ttl_seconds::float8))
RETURNING *;

-- name: ListActiveBlocks :many
SELECT * FROM delivery_blocks WHERE expires_at > now() ORDER BY id;

-- name: DeleteBlock :execrows
DELETE FROM delivery_blocks WHERE id = @id;
