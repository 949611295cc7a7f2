-- +goose Up
-- Where the shop hears what happened to its notifications: endpoints that
-- receive signed events (Standard Webhooks). The secret is kept as given
-- ("whsec_" and base64), since signing needs it; during a rotation the
-- previous one signs too, until previous_expires_at.
CREATE TABLE webhook_endpoints (
    id                  UUID        PRIMARY KEY,
    url                 TEXT        NOT NULL,
    event_types         TEXT[]      NOT NULL,  -- empty: every type
    secret              TEXT        NOT NULL,
    previous_secret     TEXT,
    previous_expires_at TIMESTAMPTZ,
    description         TEXT        NOT NULL DEFAULT '',
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    disabled_at         TIMESTAMPTZ,
    disabled_reason     TEXT
);

-- The outbox: one row per event and endpoint, written by the statement
-- that records the event (the trigger below), so that an event is never
-- lost and never invented by a crash. msg_id is the webhook-id, the same
-- for every attempt and every endpoint: the event's history row.
CREATE TABLE webhook_messages (
    id              BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    msg_id          TEXT        NOT NULL,
    endpoint_id     UUID        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_type      TEXT        NOT NULL,
    payload         JSONB       NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempts        INTEGER     NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_error      TEXT,
    delivered_at    TIMESTAMPTZ,
    gave_up_at      TIMESTAMPTZ,
    UNIQUE (endpoint_id, msg_id)
);
CREATE INDEX webhook_messages_due_idx ON webhook_messages (next_attempt_at)
    WHERE delivered_at IS NULL AND gave_up_at IS NULL;
CREATE INDEX webhook_messages_created_idx ON webhook_messages (created_at);

-- The events the shop hears of, from the history row that records them:
-- a notification reaching sent, failed, held, suppressed or cancelled, and
-- a provider's delivered, bounced or complained. Nothing is written while
-- no endpoint wants the type.
-- +goose StatementBegin
CREATE FUNCTION webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER delivery_events_webhook_outbox
    AFTER INSERT ON delivery_events
    FOR EACH ROW
    WHEN (NEW.event IN ('delivered', 'bounced', 'complained')
          OR (NEW.to_status IN ('sent', 'failed', 'held', 'suppressed', 'cancelled')
              AND NEW.from_status IS DISTINCT FROM NEW.to_status))
    EXECUTE FUNCTION webhook_outbox();

-- +goose Down
DROP TRIGGER delivery_events_webhook_outbox ON delivery_events;
DROP FUNCTION webhook_outbox();
DROP TABLE webhook_messages;
DROP TABLE webhook_endpoints;
