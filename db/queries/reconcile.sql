-- name: CountStaleSending :one
SELECT count(*) FROM notification_deliveries
WHERE status = 'sending' AND lease_expires_at < now();

-- name: CountHeld :one
SELECT count(*) FROM notification_deliveries WHERE status = 'held';

-- name: ListStaleSending :many
-- The sending rows whose lease has expired, oldest expiry first, at most
-- batch: the ones a pass looks at. A plain read that locks nothing: each
-- row is read again when its turn comes (GetStaleSending), and what the
-- reconciler writes is fenced on that read, not on this one.
SELECT id FROM notification_deliveries
WHERE status = 'sending' AND lease_expires_at < now()
ORDER BY lease_expires_at
LIMIT @batch;

-- name: GetStaleSending :one
-- One delivery as it stands now, if it is still sending with an expired
-- lease: what the reconciler decides about, and fences its write on.
SELECT * FROM notification_deliveries
WHERE id = @id AND status = 'sending' AND lease_expires_at < now();

-- name: ListHeldBackUnsettled :many
-- Pending rows that may have been sent (an attempt's outcome at their
-- provider is unknown) and that are held back from another attempt (too
-- old, recipient suppressed or unsubscribed: delivery_held_back, as the
-- claim judges): the worker leaves them, and only the provider's answer
-- settles them, which the reconciler asks for. Oldest first, at most
-- batch; a plain read, each write fenced on it. Through the status
-- index's pending rows: such rows are few, and an index on
-- unsettled_since would cost every hand-over its HOT update.
SELECT sqlc.embed(d), h.reason::text AS held_back
FROM notification_deliveries d
     CROSS JOIN LATERAL delivery_held_back(d.status, d.recipient, d.template, d.trying_since,
                                           @max_age_seconds::float8, @subscription_templates::text[], d.test) AS h (reason)
WHERE d.status = 'pending'
  AND d.unsettled_since IS NOT NULL
  AND h.reason IS NOT NULL
ORDER BY d.updated_at
LIMIT @batch;

-- name: PickOrphanedPending :many
-- Pending rows nobody has looked at for a while and no block holds back;
-- one to be sent later counts from its time (not_before), before which
-- its task waits in the queue and nothing is missing. They are touched in
-- the same statement, so that the next pass, or another reconciler, looks
-- at others first; the caller then gives each a task, holding no lock.
WITH picked AS (
    SELECT d.id FROM notification_deliveries d
    WHERE d.status = 'pending'
      AND d.updated_at < now() - make_interval(secs => @older_than_seconds::float8)
      AND (d.not_before IS NULL OR d.not_before < now() - make_interval(secs => @older_than_seconds::float8))
      AND NOT EXISTS (SELECT 1 FROM delivery_blocks b
                      WHERE b.expires_at > now()
                        AND ((b.kind = 'key' AND b.value = d.idempotency_key)
                          OR (b.kind = 'recipient' AND b.value = d.recipient)))
    ORDER BY d.updated_at
    LIMIT @batch
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE notification_deliveries d SET updated_at = now()
FROM picked
WHERE d.id = picked.id AND d.status = 'pending'
RETURNING d.*;

-- name: RetireOldDeliveries :many
-- Retention, step one, in a transaction of its own: a tombstone for each
-- finished delivery (sent, failed or cancelled) untouched for the retention period
-- and past its own maximum age, a batch at a time. Once this commits, its
-- idempotency key can never be recorded again (InsertDelivery).
INSERT INTO retired_deliveries (key_hash, delivery_id, order_id, template, status, sent_at)
SELECT sha256(convert_to(d.idempotency_key, 'UTF8')), d.id, d.order_id, d.template, d.status, d.sent_at
FROM notification_deliveries d
WHERE d.status IN ('sent', 'failed', 'cancelled')
  AND d.updated_at < now() - make_interval(secs => @older_than_seconds::float8)
  AND d.trying_since < now() - make_interval(secs => @max_age_seconds::float8)
ORDER BY d.updated_at
LIMIT @batch
ON CONFLICT (key_hash) DO UPDATE
SET delivery_id = EXCLUDED.delivery_id, status = EXCLUDED.status, sent_at = EXCLUDED.sent_at, retired_at = now()
RETURNING delivery_id;

-- name: DeleteRetiredDeliveries :many
-- Retention, step two: delete the deliveries step one retired, with their
-- history (ON DELETE CASCADE). The conditions are repeated here, outside
-- any subquery, so that a row an operator retried in between (failed ->
-- pending) is re-checked under its row lock and kept. Returns the ids
-- deleted; UnretireKept then takes back the tombstones of the rows kept.
DELETE FROM notification_deliveries d
WHERE d.id = ANY(@ids::uuid[])
  AND d.status IN ('sent', 'failed', 'cancelled')
  AND d.updated_at < now() - make_interval(secs => @older_than_seconds::float8)
  AND d.trying_since < now() - make_interval(secs => @max_age_seconds::float8)
RETURNING d.id;

-- name: UnretireKept :exec
-- Retention, step two's end, in DeleteRetiredDeliveries' transaction:
-- the tombstone of a row step two kept goes, so that retired_deliveries
-- holds only rows that are gone (the row itself keeps its key refused).
-- Kept means still there, not merely not deleted by this reconciler:
-- another replica's retention may have deleted the row first (step one
-- hands the same rows to both). That is read by a statement of its own,
-- after the delete: its snapshot is taken once the delete has waited for
-- any other replica's delete of the same rows to commit, and sees it.
DELETE FROM retired_deliveries r
WHERE r.delivery_id = ANY(@ids::uuid[])
  AND NOT (r.delivery_id = ANY(coalesce(@deleted::uuid[], '{}')))
  AND EXISTS (SELECT 1 FROM notification_deliveries d WHERE d.id = r.delivery_id);

-- name: DeleteOldBatches :execrows
-- Retention of batches: a batch's composition is needed while a member's
-- outcome may be unknown, at most DELIVERY_MAX_AGE after its hand-over;
-- deleted once older than that and the retention, a bounded number at a
-- time.
DELETE FROM delivery_batches
WHERE key IN (SELECT b.key FROM delivery_batches b
              WHERE b.created_at < now() - make_interval(secs => @older_than_seconds::float8)
              ORDER BY b.created_at
              LIMIT @batch);

-- name: DeleteOldTestOrders :execrows
-- Test retention (TEST_RETENTION): test orders older than it whose
-- notifications are all settled (neither pending nor sending) and
-- untouched as long, with those notifications (their history goes with
-- them), a batch at a time. No tombstone: the order goes too, so no
-- trigger can name its keys again. Live rows are never read (the test
-- index). The orders' foreign key is checked at the statement's end,
-- when their deliveries are gone.
WITH old AS (
    SELECT o.id FROM orders o
    WHERE o.test AND o.created_at < now() - make_interval(secs => @older_than_seconds::float8)
      AND NOT EXISTS (SELECT 1 FROM notification_deliveries d
                      WHERE d.order_id = o.id
                        AND (d.status IN ('pending', 'sending')
                             OR d.updated_at >= now() - make_interval(secs => @older_than_seconds::float8)))
    ORDER BY o.created_at
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
), deliveries AS (
    DELETE FROM notification_deliveries d USING old WHERE d.order_id = old.id AND d.test
)
DELETE FROM orders o USING old WHERE o.id = old.id;

-- name: DeleteOldTestSuppressions :one
-- Test retention of the suppression list: test mode's entries (its
-- magic addresses', which only test keys reach) listed longer than
-- TEST_RETENTION, with their history, and its unsubscribes as old.
WITH old AS (
    DELETE FROM suppressions s
    WHERE s.test
      AND s.created_at < now() - make_interval(secs => @older_than_seconds::float8)
    RETURNING s.recipient
), ev AS (
    DELETE FROM suppression_events e USING old WHERE e.recipient = old.recipient AND e.test
), un AS (
    DELETE FROM unsubscribes u
    WHERE u.test
      AND u.created_at < now() - make_interval(secs => @older_than_seconds::float8)
)
SELECT count(*) FROM old;
