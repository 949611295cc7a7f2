-- +goose Up
-- What the shop said when an order shipped (issue 40): one row per
-- shipment, so that the carrier and tracking number a key recorded are
-- kept whatever happens to the e-mail. A second parcel is a second
-- shipment with an e-mail of its own, keyed by the shipment
-- (order-shipped:<orderId>:<shipment id>:<email>, event_id below); the
-- same carrier and tracking number again is the same shipment. key_id and
-- owner_id: the API key that recorded it and its owner line.
CREATE TABLE shipments (
    id              UUID        PRIMARY KEY,
    order_id        UUID        NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    carrier         TEXT        NOT NULL,
    tracking_number TEXT        NOT NULL,
    shipped_at      TIMESTAMPTZ NOT NULL,
    key_id          UUID,
    owner_id        UUID,
    -- The event id of its e-mail's idempotency key; NULL for a shipment
    -- recorded before shipments were, whose e-mail's key has none.
    event_id        TEXT,
    delivery_id     UUID,
    UNIQUE (order_id, carrier, tracking_number)
);

-- The shipments recorded before, from their e-mails: an order shipped
-- once, its e-mail keyed order-shipped:<orderId>:<email> to the customer.
-- Their key_id is NULL (the migration's), their owner the e-mail's. So a
-- shipment retried across the upgrade is the same shipment, not a second
-- e-mail. Such an e-mail may have been another key's, through the generic
-- trigger: then this row says what that e-mail said, and the shop's own
-- shipment is another one, with an e-mail of its own.
INSERT INTO shipments (id, order_id, carrier, tracking_number, shipped_at, key_id, owner_id, event_id, delivery_id)
SELECT gen_random_uuid(), d.order_id, d.template_data->>'carrier', d.template_data->>'tracking_number',
       d.created_at, NULL, d.owner_id, NULL, d.id
FROM notification_deliveries d JOIN orders o ON o.id = d.order_id
WHERE d.template = 'order-shipped' AND d.recipient = o.customer_email
  AND d.idempotency_key = 'order-shipped:' || d.order_id::text || ':' || d.recipient
  AND d.template_data->>'carrier' IS NOT NULL AND d.template_data->>'tracking_number' IS NOT NULL
ON CONFLICT DO NOTHING;

-- Who may call a notification off, in one place for every statement that
-- does or asks (CancelDelivery, CancelPendingOfTemplate, the reads of
-- what a caller may cancel): an operator any; an API key one of its own
-- mode (test: docs/testmode.md) that its owner line made, or that is on
-- an order its owner line placed, whichever key made it, or that was
-- recorded before owners were (owner NULL). Nobody's key is the
-- all-zero owner (the public checkout's): its orders and notifications
-- are an operator's alone to stop.
-- +goose StatementBegin
CREATE FUNCTION may_cancel(delivery_owner UUID, delivery_order UUID, delivery_test BOOLEAN,
                           by_operator BOOLEAN, key_owner UUID, key_test BOOLEAN) RETURNS BOOLEAN
LANGUAGE sql STABLE AS $$
    SELECT by_operator OR (delivery_test = key_test AND (delivery_owner IS NULL
        OR (key_owner <> '00000000-0000-0000-0000-000000000000'
            AND (delivery_owner = key_owner
                 OR EXISTS (SELECT 1 FROM orders o WHERE o.id = delivery_order AND o.owner_id = key_owner)))))
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION may_cancel(UUID, UUID, BOOLEAN, BOOLEAN, UUID, BOOLEAN);
DROP TABLE shipments;
