-- name: InsertDelivery :one
-- A second intent for the same event meets the unique key and changes
-- nothing; the caller then reads the row that was there first.
INSERT INTO notification_deliveries (id, order_id, template, recipient, idempotency_key, template_data, created_at, updated_at)
VALUES (@id, @order_id, @template, @recipient, @idempotency_key, @template_data, @created_at, @created_at)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING *;

-- name: GetDeliveryByKey :one
SELECT * FROM notification_deliveries WHERE idempotency_key = @idempotency_key;

-- name: GetDelivery :one
SELECT * FROM notification_deliveries WHERE id = @id;

-- name: ListDeliveriesByOrder :many
SELECT * FROM notification_deliveries WHERE order_id = @order_id ORDER BY created_at, id;
