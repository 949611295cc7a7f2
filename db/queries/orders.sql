-- name: InsertOrder :exec
-- The order and all its lines in one statement: one round trip. The
-- lines' foreign key is checked at the end of the statement, when the
-- order row exists.
WITH o AS (
    INSERT INTO orders (id, customer_email, customer_name, currency, total_minor, created_at, access_token_hash, locale, owner_id, test)
    VALUES (@id, @customer_email, @customer_name, @currency, @total_minor, @created_at, @access_token_hash, sqlc.narg(locale)::text, @owner_id::uuid, @test::boolean)
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

-- name: GetOrderByReference :one
-- The order of owner that has the shop's number reference: what a
-- second checkout with that number is told it clashes with.
SELECT id FROM orders WHERE owner_id = @owner_id::uuid AND reference = @reference::text;

-- name: GetOrderReference :one
-- The shop's number of an order (NULL: none), for the operators' view of
-- its deliveries.
SELECT reference FROM orders WHERE id = @id;

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
    INSERT INTO orders (id, customer_email, customer_name, currency, total_minor, created_at, access_token_hash, locale, owner_id, test, reference)
    VALUES (@id, @customer_email, @customer_name, @currency, @total_minor, @created_at, @access_token_hash, sqlc.narg(locale)::text, @owner_id::uuid, @test::boolean, sqlc.narg(reference)::text)
), lines AS (
    INSERT INTO order_items (order_id, line_no, sku, name, quantity, unit_price_minor)
    SELECT @id::uuid,
           unnest(@line_nos::integer[]),
           unnest(@skus::text[]),
           unnest(@names::text[]),
           unnest(@quantities::integer[]),
           unnest(@unit_prices_minor::bigint[])
), d AS (
    INSERT INTO notification_deliveries (id, order_id, template, recipient, idempotency_key, template_data, created_at, updated_at, trying_since, locale, owner_id, test)
    VALUES (@delivery_id, @id, @template, @recipient, @idempotency_key, @template_data, @created_at, @created_at, @created_at, sqlc.narg(locale)::text, @owner_id::uuid, @test::boolean)
    RETURNING id
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor)
    SELECT d.id, 'received', NULL, 'pending', 0, 'api' FROM d
)
INSERT INTO idempotency_keys (scope, key, request_hash, response_body, expires_at)
SELECT @scope::text, @key::text, @request_hash::bytea, @response_body::bytea, @expires_at::timestamptz
WHERE @remember::boolean;

-- name: InsertKeyedCheckout :one
-- A checkout with an Idempotency-Key in one statement: the key's lock
-- (held to the end of this statement's own transaction), its earlier
-- response if any, and — only with the lock and no earlier response —
-- everything InsertCheckout writes, the response included. The caller
-- reads what happened from the one row: locked false, a twin is in
-- flight; a prior_* value, the key was used (live or expired); inserted,
-- the checkout is recorded. The statement's snapshot predates the lock:
-- a twin that committed in between is not seen as prior, and its key's
-- primary key refuses this insert, which rolls all of it back.
WITH lk AS (
    SELECT pg_try_advisory_xact_lock(385697, hashtext(@scope::text || ' ' || @key::text)) AS locked
), prior AS (
    SELECT k.request_hash, k.response_body, k.expires_at
    FROM idempotency_keys k, lk
    WHERE lk.locked AND k.scope = @scope::text AND k.key = @key::text
), go AS (
    SELECT 1 AS one FROM lk WHERE lk.locked AND NOT EXISTS (SELECT 1 FROM prior)
), o AS (
    INSERT INTO orders (id, customer_email, customer_name, currency, total_minor, created_at, access_token_hash, locale, owner_id, test, reference)
    SELECT @id, @customer_email, @customer_name, @currency, @total_minor, @created_at, @access_token_hash, sqlc.narg(locale)::text, @owner_id::uuid, @test::boolean, sqlc.narg(reference)::text
    FROM go
), lines AS (
    INSERT INTO order_items (order_id, line_no, sku, name, quantity, unit_price_minor)
    SELECT @id::uuid,
           unnest(@line_nos::integer[]),
           unnest(@skus::text[]),
           unnest(@names::text[]),
           unnest(@quantities::integer[]),
           unnest(@unit_prices_minor::bigint[])
    FROM go
), d AS (
    INSERT INTO notification_deliveries (id, order_id, template, recipient, idempotency_key, template_data, created_at, updated_at, trying_since, locale, owner_id, test)
    SELECT @delivery_id, @id, @template, @recipient, @idempotency_key, @template_data, @created_at, @created_at, @created_at, sqlc.narg(locale)::text, @owner_id::uuid, @test::boolean
    FROM go
    RETURNING id
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor)
    SELECT d.id, 'received', NULL, 'pending', 0, 'api' FROM d
), k AS (
    INSERT INTO idempotency_keys (scope, key, request_hash, response_body, expires_at)
    SELECT @scope::text, @key::text, @request_hash::bytea, @response_body::bytea, @expires_at::timestamptz
    FROM go
    RETURNING 1 AS one
)
SELECT (SELECT lk.locked FROM lk) AS locked,
       p.request_hash AS prior_request_hash, p.response_body AS prior_response_body, p.expires_at AS prior_expires_at,
       EXISTS (SELECT 1 FROM k) AS inserted
FROM (SELECT 1) AS one LEFT JOIN prior p ON true;

-- name: InsertShipment :one
-- A shipment of an order, unless the order has one of the same carrier
-- and tracking number: then nothing is written and no row returned (a
-- twin in flight is waited for), and GetShipment reads that one.
INSERT INTO shipments (id, order_id, carrier, tracking_number, shipped_at, key_id, owner_id, event_id)
VALUES (@id, @order_id, @carrier, @tracking_number, @shipped_at, @key_id, @owner_id, @event_id)
ON CONFLICT (order_id, carrier, tracking_number) DO NOTHING
RETURNING *;

-- name: GetShipment :one
SELECT * FROM shipments WHERE order_id = @order_id AND carrier = @carrier AND tracking_number = @tracking_number;

-- name: SetShipmentDelivery :exec
-- The e-mail a new shipment's transaction recorded.
UPDATE shipments SET delivery_id = @delivery_id WHERE id = @id;

-- name: ListShipments :many
SELECT * FROM shipments WHERE order_id = @order_id ORDER BY shipped_at, id;
