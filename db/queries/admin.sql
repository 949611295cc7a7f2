-- name: ListDeliveries :many
-- Operators' view; every filter is optional. Least recently updated
-- first, or most recently with newest; skip rows for the next page.
-- No index serves recipient: operators' searches are rare, and every
-- checkout would pay for one. Those a provider reported a bounce or a
-- complaint of: a range of notification_deliveries_bounced_idx. test:
-- a test key's alone (true), or live ones alone (false).
SELECT * FROM notification_deliveries
WHERE (sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status)::text)
  AND (sqlc.narg(template)::text IS NULL OR template = sqlc.narg(template)::text)
  AND (sqlc.narg(order_id)::uuid IS NULL OR order_id = sqlc.narg(order_id)::uuid)
  AND (sqlc.narg(idempotency_key)::text IS NULL OR idempotency_key = sqlc.narg(idempotency_key)::text)
  AND (sqlc.narg(recipient)::text IS NULL OR recipient = sqlc.narg(recipient)::text)
  AND (sqlc.narg(created_after)::timestamptz IS NULL OR created_at >= sqlc.narg(created_after)::timestamptz)
  AND (sqlc.narg(created_before)::timestamptz IS NULL OR created_at < sqlc.narg(created_before)::timestamptz)
  AND (sqlc.narg(older_than_seconds)::float8 IS NULL
       OR updated_at < now() - make_interval(secs => sqlc.narg(older_than_seconds)::float8))
  AND (NOT @bounced_or_complained::bool OR bounced_or_complained_at IS NOT NULL)
  AND (sqlc.narg(test)::boolean IS NULL OR test = sqlc.narg(test)::boolean)
ORDER BY CASE WHEN @newest::bool THEN updated_at END DESC,
         CASE WHEN NOT @newest::bool THEN updated_at END,
         id
LIMIT @max_rows OFFSET @skip;

-- name: InsertBlock :one
INSERT INTO delivery_blocks (kind, value, reason, expires_at)
VALUES (@kind, @value, @reason, now() + make_interval(secs => @ttl_seconds::float8))
RETURNING *;

-- name: ListActiveBlocks :many
SELECT * FROM delivery_blocks WHERE expires_at > now() ORDER BY id;

-- name: DeleteBlock :one
DELETE FROM delivery_blocks WHERE id = @id
RETURNING *;

-- name: CountDeliveriesUpTo :one
-- The deliveries in status, counted no further than up_to: an index-only
-- scan of status_idx that stops there, however many there are (the
-- operators' overview says "up_to or more").
SELECT count(*)::int AS n
FROM (SELECT 1 FROM notification_deliveries WHERE status = @status LIMIT @up_to) s;
