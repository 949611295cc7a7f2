-- name: InsertDelivery :one
-- A second intent for the same event meets the unique key and changes
-- nothing; the caller then reads the row that was there first. A key
-- whose delivery retention has retired is refused the same way: the
-- tombstone is committed before its delivery is deleted, so this
-- statement sees one or the other.
WITH ins AS (
    INSERT INTO notification_deliveries (id, order_id, template, recipient, idempotency_key, template_data, created_at, updated_at, trying_since)
    SELECT @id, @order_id, @template, @recipient, @idempotency_key, @template_data, @created_at, @created_at, @created_at
    WHERE NOT EXISTS (SELECT 1 FROM retired_deliveries r
                      WHERE r.key_hash = sha256(convert_to(@idempotency_key::text, 'UTF8')))
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING *
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor)
    SELECT ins.id, 'received', NULL, 'pending', 0, @actor::text FROM ins
)
SELECT id, order_id, template, recipient, idempotency_key, status, attempts, last_error,
       lease_token, lease_expires_at, handed_over_at, provider_message_id, template_data,
       created_at, updated_at, sent_at, message_id, trying_since
FROM ins;

-- name: GetDeliveryByKey :one
SELECT * FROM notification_deliveries WHERE idempotency_key = @idempotency_key;

-- name: GetDelivery :one
SELECT * FROM notification_deliveries WHERE id = @id;

-- name: ListDeliveriesByOrder :many
SELECT * FROM notification_deliveries WHERE order_id = @order_id ORDER BY created_at, id;

-- name: ListEvents :many
SELECT * FROM delivery_events WHERE delivery_id = @delivery_id ORDER BY id;

-- name: GetRetiredDelivery :one
-- What retention left of the delivery with this idempotency key.
SELECT * FROM retired_deliveries
WHERE key_hash = sha256(convert_to(@idempotency_key::text, 'UTF8'));
