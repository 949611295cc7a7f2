-- name: InsertWebhookEndpoint :one
INSERT INTO webhook_endpoints (id, url, event_types, secret, description)
VALUES (@id, @url, @event_types::text[], @secret, @description)
RETURNING *;

-- name: ListWebhookEndpoints :many
SELECT * FROM webhook_endpoints ORDER BY created_at, id;

-- name: GetWebhookEndpoint :one
SELECT * FROM webhook_endpoints WHERE id = @id;

-- name: RotateWebhookSecret :one
-- The new secret signs from now on; the one it replaces signs too until
-- previous_expires_at, so that a receiver can move at its own pace.
UPDATE webhook_endpoints
SET previous_secret = secret, previous_expires_at = @previous_expires_at, secret = @secret
WHERE id = @id
RETURNING *;

-- name: SetWebhookEndpointDisabled :one
-- disabled NULL enables the endpoint again; its undelivered messages go
-- out from the next pass.
UPDATE webhook_endpoints
SET disabled_at = sqlc.narg(disabled_at)::timestamptz, disabled_reason = sqlc.narg(disabled_reason)::text
WHERE id = @id
RETURNING *;

-- name: DeleteWebhookEndpoint :one
DELETE FROM webhook_endpoints WHERE id = @id
RETURNING url;

-- name: ClaimWebhookMessages :many
-- The messages due for an attempt, at most batch, for the endpoints that
-- are enabled; each is leased by moving its next attempt lease_seconds
-- ahead, so that another dispatcher (a second reconciler) leaves it alone
-- while this one sends, and takes it again if this one dies.
WITH pick AS (
    SELECT m.id
    FROM webhook_messages m JOIN webhook_endpoints e ON e.id = m.endpoint_id
    WHERE m.delivered_at IS NULL AND m.gave_up_at IS NULL AND m.next_attempt_at <= now()
      AND e.disabled_at IS NULL
    ORDER BY m.next_attempt_at
    LIMIT @batch
    FOR UPDATE OF m SKIP LOCKED
)
UPDATE webhook_messages m
SET next_attempt_at = now() + make_interval(secs => @lease_seconds::float8), attempts = m.attempts + 1
FROM pick, webhook_endpoints e
WHERE m.id = pick.id AND e.id = m.endpoint_id
RETURNING m.id, m.msg_id, m.endpoint_id, m.event_type, m.payload, m.created_at, m.attempts,
          e.url, e.secret, e.previous_secret, e.previous_expires_at;

-- name: MarkWebhookDelivered :exec
-- The receiver took it: status is its answer (a 2xx).
UPDATE webhook_messages
SET delivered_at = now(), last_error = NULL, last_status = @status::smallint, last_attempt_at = now()
WHERE id = @id;

-- name: MarkWebhookFailed :one
-- Another attempt at next_attempt_at, or none: given up once its tries
-- began more than max_age_seconds ago, at its creation or at its latest
-- replay. Fenced on the attempt it records: a late answer to an attempt
-- another dispatcher has since made again, or that a later attempt
-- delivered, changes nothing (and returns no row). Returns whether it
-- gave the message up.
UPDATE webhook_messages
SET last_error = @last_error::text,
    last_status = sqlc.narg(last_status)::smallint,
    last_attempt_at = now(),
    next_attempt_at = @next_attempt_at,
    gave_up_at = CASE WHEN coalesce(replayed_at, created_at) < now() - make_interval(secs => @max_age_seconds::float8) THEN now() END
WHERE id = @id AND attempts = @attempts AND delivered_at IS NULL
RETURNING (gave_up_at IS NOT NULL)::boolean AS gave_up;

-- name: DisableGoneWebhookEndpoint :exec
-- The receiver answered 410 Gone: it wants no more.
UPDATE webhook_endpoints
SET disabled_at = coalesce(disabled_at, now()), disabled_reason = coalesce(disabled_reason, @reason::text)
WHERE id = @id;

-- name: ReplayWebhookMessages :execrows
-- Sends again (same webhook-id) one message by its id, or every message
-- of an endpoint created in [since, until): delivered, given up or not,
-- with a new series of tries, which WEBHOOK_MAX_AGE counts from now.
UPDATE webhook_messages
SET next_attempt_at = now(), delivered_at = NULL, gave_up_at = NULL, attempts = 0, replayed_at = now()
WHERE endpoint_id = @endpoint_id
  AND (sqlc.narg(msg_id)::text IS NULL OR msg_id = sqlc.narg(msg_id)::text)
  AND (sqlc.narg(since)::timestamptz IS NULL OR created_at >= sqlc.narg(since)::timestamptz)
  AND (sqlc.narg(until)::timestamptz IS NULL OR created_at < sqlc.narg(until)::timestamptz);

-- name: WebhookBacklog :many
-- Per enabled endpoint: its undelivered messages and how long the oldest
-- has waited (since its creation, or its latest replay), for the metrics.
SELECT e.id, count(m.id)::bigint AS undelivered,
       coalesce(extract(epoch FROM now() - min(coalesce(m.replayed_at, m.created_at))), 0)::float8 AS oldest_seconds
FROM webhook_endpoints e
LEFT JOIN webhook_messages m ON m.endpoint_id = e.id AND m.delivered_at IS NULL AND m.gave_up_at IS NULL
WHERE e.disabled_at IS NULL
GROUP BY e.id;

-- name: DeleteOldWebhookMessages :execrows
-- Delivered or given-up messages older than older_than_seconds go.
DELETE FROM webhook_messages
WHERE id IN (SELECT id FROM webhook_messages
             WHERE created_at < now() - make_interval(secs => @older_than_seconds::float8)
               AND (delivered_at IS NOT NULL OR gave_up_at IS NOT NULL)
             LIMIT @batch);

-- name: ListWebhookMessages :many
-- An endpoint's newest messages, for operators: every one, or those of
-- test notifications (test true) or of live ones (false) alone.
SELECT id, msg_id, event_type, created_at, attempts, next_attempt_at, last_error, delivered_at, gave_up_at,
       last_status, last_attempt_at, coalesce((payload->'data'->>'test')::boolean, false)::boolean AS test
FROM webhook_messages
WHERE endpoint_id = @endpoint_id
  AND (sqlc.narg(test)::boolean IS NULL OR coalesce((payload->'data'->>'test')::boolean, false) = sqlc.narg(test)::boolean)
ORDER BY id DESC LIMIT @max_rows;
