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

-- name: RecordEvent :exec
-- An event without a transition, such as a suppressed duplicate.
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
VALUES (@delivery_id, @event, @status::text, @status::text, @attempt, @actor, @detail);

-- name: ListBatchMembers :many
-- The deliveries of a batch at the provider, in the order its request
-- carried them (those still kept).
SELECT d.* FROM delivery_batches b
CROSS JOIN LATERAL unnest(b.members) WITH ORDINALITY AS m(id, ord)
JOIN notification_deliveries d ON d.id = m.id
WHERE b.key = @key
ORDER BY m.ord;
