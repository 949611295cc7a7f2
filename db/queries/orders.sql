-- name: InsertOrder :exec
INSERT INTO orders (id, customer_email, customer_name, currency, total_minor, created_at)
VALUES (@id, @customer_email, @customer_name, @currency, @total_minor, @created_at);

-- name: InsertOrderItems :exec
-- All lines of one order in a single round trip; unnest in the select
-- list walks the arrays in step.
INSERT INTO order_items (order_id, line_no, sku, name, quantity, unit_price_minor)
SELECT @order_id::uuid,
       unnest(@line_nos::integer[]),
       unnest(@skus::text[]),
       unnest(@names::text[]),
       unnest(@quantities::integer[]),
       unnest(@unit_prices_minor::bigint[]);

-- name: GetOrder :one
SELECT * FROM orders WHERE id = @id;

-- name: ListOrderItems :many
SELECT * FROM order_items WHERE order_id = @order_id ORDER BY line_no;
