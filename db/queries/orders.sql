-- name: InsertOrder :exec
-- The order and all its lines in one statement: one round trip. The
-- lines' foreign key is checked at the end of the statement, when the
-- order row exists.
WITH o AS (
    INSERT INTO orders (id, customer_email, customer_name, currency, total_minor, created_at, access_token_hash, locale)
    VALUES (@id, @customer_email, @customer_name, @currency, @total_minor, @created_at, @access_token_hash, sqlc.narg(locale)::text)
)
INSERT INTO order_items (order_id, line_no, sku, name, quantity, unit_price_minor)
SELECT @id::uuid,
       unnest(@line_nos::integer[]),
       unnest(@skus::text[]),
       unnest(@names::text[]),
       unnest(@quantities::integer[]),
       unnest(@unit_prices_minor::bigint[]);

-- name: GetOrder :one
SELECT * FROM orders WHERE id = @id;

-- name: ListOrderItems :many
SELECT * FROM order_items WHERE order_id = @order_id ORDER BY line_no;

-- name: InsertCheckout :exec
-- A checkout in one statement, so that without an Idempotency-Key it is
-- one round trip and one commit: the order, its lines, its confirmation's
-- delivery (-> pending, the transition InsertDelivery makes for every
-- other intent) with its 'received' event, and, when remember is set, the
-- Idempotency-Key's response. A new order's key can be neither recorded
-- nor retired yet, so the delivery needs no conflict handling; the
-- Idempotency-Key's primary key refuses a twin that slipped past the
-- caller's lock, which rolls all of it back.
WITH o AS (
    INSERT INTO orders (id, customer_email, customer_name, currency, total_minor, created_at, access_token_hash, locale)
    VALUES (@id, @customer_email, @customer_name, @currency, @total_minor, @created_at, @access_token_hash, sqlc.narg(locale)::text)
), lines AS (
    INSERT INTO order_items (order_id, line_no, sku, name, quantity, unit_price_minor)
    SELECT @id::uuid,
           unnest(@line_nos::integer[]),
           unnest(@skus::text[]),
           unnest(@names::text[]),
           unnest(@quantities::integer[]),
           unnest(@unit_prices_minor::bigint[])
), d AS (
    INSERT INTO notification_deliveries (id, order_id, template, recipient, idempotency_key, template_data, created_at, updated_at, trying_since, locale)
    VALUES (@delivery_id, @id, @template, @recipient, @idempotency_key, @template_data, @created_at, @created_at, @created_at, sqlc.narg(locale)::text)
    RETURNING id
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor)
    SELECT d.id, 'received', NULL, 'pending', 0, 'api' FROM d
)
INSERT INTO idempotency_keys (scope, key, request_hash, response_body, expires_at)
SELECT @scope::text, @key::text, @request_hash::bytea, @response_body::bytea, @expires_at::timestamptz
WHERE @remember::boolean;
