-- +goose Up
-- The shop's webhooks carry the order's number (order_reference, 00025's
-- column; absent without one: a look-up of the order's row by its primary
-- key, made only for the endpoints that want the event) and name the
-- notification's recipient (issue 44): a shop no longer splits
-- idempotency_key to learn whom an event is about. The address is already
-- in that key, so nothing is disclosed that was not; it is the
-- notification's own recipient, trimmed and lower-cased as it was
-- recorded.
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
                   'recipient', d.recipient,
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

-- What the receiver answered to a message's latest attempt, which the
-- console shows beside it: its HTTP status (NULL: no answer, such as a
-- refused connection or a timeout, which last_error says), and when.
-- last_error stays what it was: why the latest attempt did not deliver.
ALTER TABLE webhook_messages ADD COLUMN last_status SMALLINT;
ALTER TABLE webhook_messages ADD COLUMN last_attempt_at TIMESTAMPTZ;

-- +goose Down
ALTER TABLE webhook_messages DROP COLUMN IF EXISTS last_attempt_at;
ALTER TABLE webhook_messages DROP COLUMN IF EXISTS last_status;
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
