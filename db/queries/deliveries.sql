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

-- name: GetDeliveryFor :one
-- A delivery, if the caller may cancel it (may_cancel: the one rule of
-- the cancel statements), whatever its status.
SELECT * FROM notification_deliveries d
WHERE d.id = @id AND may_cancel(d.owner_id, d.order_id, d.test, @by_operator::boolean, @owner::uuid, @test::boolean);

-- name: ListDeliveriesOfTemplateFor :many
-- An order's deliveries of one template that the caller may cancel
-- (may_cancel), whatever their status, oldest first.
SELECT * FROM notification_deliveries d
WHERE d.order_id = @order_id AND d.template = @template
  AND may_cancel(d.owner_id, d.order_id, d.test, @by_operator::boolean, @owner::uuid, @test::boolean)
ORDER BY d.created_at, d.id;

-- name: ListReadyToCarry :many
-- Pending deliveries a request of many to @provider may carry beside a
-- task's own, as River's producer fetches what is available: due, live,
-- not pinned to another provider, not @exclude (the task's), oldest
-- change first, at most @n; with @urgent_only, only the queue's own
-- (not of @later_templates, not scheduled: what its later lane would
-- carry). A plain read, through the status index: the claim judges each
-- again under its row lock.
SELECT id, idempotency_key FROM notification_deliveries
WHERE status = 'pending'
  AND NOT test
  AND (not_before IS NULL OR not_before <= now())
  AND (NOT provider_pinned OR provider = @provider::text)
  AND NOT (id = ANY(@exclude::uuid[]))
  AND (NOT @urgent_only::boolean OR (not_before IS NULL AND NOT (template = ANY(coalesce(@later_templates::text[], '{}')))))
ORDER BY updated_at
LIMIT @n;
