-- +goose Up
-- held: the reconciler could not tell whether the provider accepted a
-- message and the template's policy says an operator must decide.
ALTER TABLE notification_deliveries DROP CONSTRAINT notification_deliveries_status_check;
ALTER TABLE notification_deliveries ADD CONSTRAINT notification_deliveries_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'held'));
CREATE INDEX notification_deliveries_status_idx ON notification_deliveries (status, updated_at);

-- The story of every delivery: one row per transition or decision,
-- written in the same statement or transaction as the change itself.
CREATE TABLE delivery_events (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id UUID        NOT NULL REFERENCES notification_deliveries (id) ON DELETE CASCADE,
    at          TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    event       TEXT        NOT NULL,
    from_status TEXT,
    to_status   TEXT,
    attempt     INTEGER     NOT NULL DEFAULT 0,
    actor       TEXT        NOT NULL,
    detail      JSONB
);
CREATE INDEX delivery_events_delivery_idx ON delivery_events (delivery_id, id);

-- The runbook's temporary filter: deliveries to a blocked idempotency key
-- or recipient are not sent while the block lasts; they wait as pending.
CREATE TABLE delivery_blocks (
    id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       TEXT        NOT NULL CHECK (kind IN ('key', 'recipient')),
    value      TEXT        NOT NULL,
    reason     TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    CHECK (expires_at > created_at)
);
CREATE INDEX delivery_blocks_value_idx ON delivery_blocks (kind, value, expires_at);

-- +goose Down
DROP TABLE delivery_blocks;
DROP TABLE delivery_events;
DROP INDEX notification_deliveries_status_idx;
UPDATE notification_deliveries SET status = 'failed', last_error = 'held (downgrade)' WHERE status = 'held';
ALTER TABLE notification_deliveries DROP CONSTRAINT notification_deliveries_status_check;
ALTER TABLE notification_deliveries ADD CONSTRAINT notification_deliveries_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed'));
