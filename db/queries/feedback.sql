-- name: InsertProviderEvent :execrows
-- 0 rows: this provider sent this event before; it changes nothing again.
INSERT INTO provider_events (provider, event_id, kind, delivery_id)
VALUES (@provider, @event_id, @kind, sqlc.narg(delivery_id)::uuid)
ON CONFLICT (provider, event_id) DO NOTHING;

-- name: RememberWebhookToken :execrows
-- 0 rows: this provider's webhook came with this token before, and it is
-- refused now. The same statement prunes, a batch at a time and without
-- waiting for another request's batch, tokens that expired over ten
-- minutes ago by the database's clock: no API whose clock is within ten
-- minutes of it accepts their signatures any more.
WITH pruned AS (
    DELETE FROM webhook_tokens
    WHERE (provider, token) IN (
        SELECT t.provider, t.token FROM webhook_tokens t
        WHERE t.expires_at < now() - interval '10 minutes'
          AND NOT (t.provider = @provider AND t.token = @token)
        ORDER BY t.expires_at
        LIMIT 100
        FOR UPDATE SKIP LOCKED)
)
INSERT INTO webhook_tokens (provider, token, expires_at)
VALUES (@provider, @token, @expires_at)
ON CONFLICT (provider, token) DO NOTHING;

-- name: FindDeliveryForFeedback :one
-- The delivery a provider's event is about: by the provider's id for the
-- message, or by our Message-ID, found through its local part, the key
-- hash (the key hash index).
SELECT * FROM notification_deliveries
WHERE (sqlc.narg(provider_message_id)::text IS NOT NULL AND provider_message_id = sqlc.narg(provider_message_id)::text)
   OR (sqlc.narg(message_id)::text IS NOT NULL AND message_id IS NOT NULL
       AND split_part(message_id, '@', 1) = split_part(sqlc.narg(message_id)::text, '@', 1)
       AND message_id = sqlc.narg(message_id)::text)
ORDER BY created_at DESC
LIMIT 1;

-- name: FindDeliveryForFeedbackByKeyHash :one
-- The delivery a provider's event is about, when neither id above
-- matches: by the key hash our metadata carried (mail.KeyHash), which
-- is our Message-ID's local part.
SELECT * FROM notification_deliveries
WHERE message_id IS NOT NULL AND split_part(message_id, '@', 1) = @key_hash::text
ORDER BY created_at DESC
LIMIT 1;

-- name: AddSuppression :one
-- Adds a recipient to the list of a mode, live or @test's (a second
-- addition keeps the first, and its mode: an address is on one list),
-- and writes the list's history in the same statement.
WITH ins AS (
    INSERT INTO suppressions (recipient, source, reason, test)
    VALUES (@recipient, @source, @reason, @test)
    ON CONFLICT (recipient) DO NOTHING
    RETURNING *
), ev AS (
    INSERT INTO suppression_events (recipient, action, source, actor, note, test)
    SELECT recipient, 'added', source, @actor::text, @reason::text, test FROM ins
)
SELECT recipient, source, reason, created_at, test FROM ins;

-- name: RemoveSuppression :execrows
WITH del AS (
    DELETE FROM suppressions s WHERE s.recipient = @recipient RETURNING s.recipient, s.source, s.test
)
INSERT INTO suppression_events (recipient, action, source, actor, note, test)
SELECT del.recipient, 'removed', del.source, @actor::text, @note::text, del.test FROM del;

-- name: GetSuppression :one
SELECT * FROM suppressions WHERE recipient = @recipient;

-- name: ListSuppressions :many
-- The newest entries: of both lists, or test mode's alone (test true),
-- or the live one alone (false).
SELECT * FROM suppressions
WHERE sqlc.narg(test)::boolean IS NULL OR test = sqlc.narg(test)::boolean
ORDER BY created_at DESC, recipient LIMIT @max_rows;

-- name: ListSuppressionEvents :many
SELECT * FROM suppression_events WHERE recipient = @recipient ORDER BY id;

-- name: AddUnsubscribe :execrows
-- 0 rows: the recipient had left this category already (in the mode it
-- left it in: live, or @test's).
INSERT INTO unsubscribes (recipient, category, test) VALUES (@recipient, @category, @test)
ON CONFLICT (recipient, category) DO NOTHING;

-- name: RecordProviderEvent :exec
-- A provider's report about a delivery's message: its last report, by
-- the provider's clock (a report older than the one kept, as a
-- provider's retry brings a deferral after the delivery, is not the
-- last), and for a bounce or a complaint, the earliest of those. A
-- delivered or deferred report writes no indexed column, not even
-- updated_at: a HOT update.
UPDATE notification_deliveries
SET provider_event    = CASE WHEN provider_event_at IS NULL OR provider_event_at <= @at::timestamptz THEN @kind::text ELSE provider_event END,
    provider_event_at = CASE WHEN provider_event_at IS NULL OR provider_event_at <= @at::timestamptz THEN @at::timestamptz ELSE provider_event_at END,
    bounced_or_complained_at = CASE WHEN @kind::text IN ('bounced', 'complained')
                                    THEN least(bounced_or_complained_at, @at::timestamptz)
                                    ELSE bounced_or_complained_at END
WHERE id = @id;

-- name: ListTestFeedbackDue :many
-- The test provider's feedback (docs/testmode.md): test deliveries sent
-- to a magic address of @domain (a local part of @local_parts, before
-- any +label) in the last day whose event
-- (@event_prefix || id, the test provider's event id) is not recorded
-- yet, oldest first. The test rows only, through their own index; the
-- event ids are the provider_events primary key.
SELECT d.id, d.recipient, d.message_id, d.provider_message_id
FROM notification_deliveries d
WHERE d.test
  AND d.created_at > now() - interval '1 day'
  AND d.status = 'sent'
  AND d.provider = 'test'
  AND split_part(d.recipient, '@', 2) = @domain::text
  AND split_part(split_part(d.recipient, '@', 1), '+', 1) = ANY(@local_parts::text[])
  AND NOT EXISTS (SELECT 1 FROM provider_events e
                  WHERE e.provider = 'test' AND e.event_id = @event_prefix::text || d.id::text)
ORDER BY d.created_at
LIMIT @max_rows;
