-- +goose Up
-- The shop's own order number (issue 44): optional on the checkout,
-- shown in the e-mails, the API, the console and the webhooks. One
-- owner's orders never share one (the key's line, owner_id: its
-- rotations included), whoever writes the order; the public checkout
-- takes none. Only the orders that have one are indexed, and a new
-- column of NULLs rewrites no row.
ALTER TABLE orders ADD COLUMN reference TEXT
    CHECK (reference IS NULL OR (length(reference) BETWEEN 1 AND 64 AND reference = btrim(reference)));
CREATE UNIQUE INDEX orders_owner_reference_key ON orders (owner_id, reference) WHERE reference IS NOT NULL;

-- The shop's webhooks carry the order's number beside its id
-- ("order_reference", absent without one): a look-up of the order's row
-- by its primary key, made only for the endpoints that want the event.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    typ TEXT := CASE WHEN NEW.event IN ('delivered', 'bounced', 'complained') THEN 'notification.' || NEW.event
                     ELSE 'notification.' || NEW.to_status END;
BEGIN
    INSERT INTO webhook_messages (msg_id, endpoint_id, event_type, payload)
    SELECT 'msg_' || NEW.id, e.id, typ,
           jsonb_build_object(
               'type', typ,
               'timestamp', to_char(NEW.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'data', jsonb_strip_nulls(jsonb_build_object(
                   'notification_id', d.id,
                   'order_id', d.order_id,
                   'order_reference', (SELECT o.reference FROM orders o WHERE o.id = d.order_id),
                   'template', d.template,
                   'idempotency_key', d.idempotency_key,
                   'status', d.status,
                   'provider_message_id', d.provider_message_id,
                   'reason', CASE WHEN NEW.event IN ('delivered', 'bounced', 'complained') THEN NEW.detail->>'detail'
                                  WHEN NEW.to_status = 'sent' THEN NULL
                                  ELSE coalesce(NEW.detail->>'note', d.last_error) END,
                   'test', CASE WHEN d.test THEN true END)))
    FROM webhook_endpoints e, notification_deliveries d
    WHERE d.id = NEW.delivery_id
      AND e.disabled_at IS NULL
      AND (cardinality(e.event_types) = 0 OR typ = ANY(e.event_types));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    typ TEXT := CASE WHEN NEW.event IN ('delivered', 'bounced', 'complained') THEN 'notification.' || NEW.event
                     ELSE 'notification.' || NEW.to_status END;
BEGIN
    INSERT INTO webhook_messages (msg_id, endpoint_id, event_type, payload)
    SELECT 'msg_' || NEW.id, e.id, typ,
           jsonb_build_object(
               'type', typ,
               'timestamp', to_char(NEW.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'data', jsonb_strip_nulls(jsonb_build_object(
                   'notification_id', d.id,
                   'order_id', d.order_id,
                   'template', d.template,
                   'idempotency_key', d.idempotency_key,
                   'status', d.status,
                   'provider_message_id', d.provider_message_id,
                   'reason', CASE WHEN NEW.event IN ('delivered', 'bounced', 'complained') THEN NEW.detail->>'detail'
                                  WHEN NEW.to_status = 'sent' THEN NULL
                                  ELSE coalesce(NEW.detail->>'note', d.last_error) END,
                   'test', CASE WHEN d.test THEN true END)))
    FROM webhook_endpoints e, notification_deliveries d
    WHERE d.id = NEW.delivery_id
      AND e.disabled_at IS NULL
      AND (cardinality(e.event_types) = 0 OR typ = ANY(e.event_types));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
DROP INDEX IF EXISTS orders_owner_reference_key;
ALTER TABLE orders DROP COLUMN IF EXISTS reference;
