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
