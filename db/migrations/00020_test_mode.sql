-- +goose Up
-- Test mode (issue 35): test keys, whose orders and notifications run
-- the whole pipeline but never reach a provider (the worker's built-in
-- test provider takes them; docs/testmode.md). The mode is the key's,
-- and is copied onto every order it places and every notification of
-- that order, in the transaction that records them, so that nothing
-- downstream needs the key to tell test from live. A constant default:
-- no table is rewritten, and existing rows are live.
ALTER TABLE api_keys ADD COLUMN test BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE orders ADD COLUMN test BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE notification_deliveries ADD COLUMN test BOOLEAN NOT NULL DEFAULT false;

-- The test rows alone, by a column no update changes: live rows never
-- get an entry, and the worker's updates stay as HOT as they were (test
-- is never written after the insert). What reads them: the test
-- provider's feedback (the reconciler) and the test retention.
CREATE INDEX notification_deliveries_test_idx ON notification_deliveries (created_at) WHERE test;
-- The console's last hour leaves the test rows' history out through this
-- one (CountHistoryByMinute's anti-join).
CREATE INDEX notification_deliveries_test_id_idx ON notification_deliveries (id) WHERE test;
CREATE INDEX orders_test_idx ON orders (created_at) WHERE test;

-- The shop's webhooks say which events are of test mode: "test": true
-- in the data of a test notification's event (absent for live ones,
-- whose events are as they were).
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
                                  ELSE coalesce(NEW.detail->>'note', d.last_error) END)))
    FROM webhook_endpoints e, notification_deliveries d
    WHERE d.id = NEW.delivery_id
      AND e.disabled_at IS NULL
      AND (cardinality(e.event_types) = 0 OR typ = ANY(e.event_types));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
DROP INDEX IF EXISTS orders_test_idx;
DROP INDEX IF EXISTS notification_deliveries_test_id_idx;
DROP INDEX IF EXISTS notification_deliveries_test_idx;
ALTER TABLE notification_deliveries DROP COLUMN IF EXISTS test;
ALTER TABLE orders DROP COLUMN IF EXISTS test;
ALTER TABLE api_keys DROP COLUMN IF EXISTS test;
