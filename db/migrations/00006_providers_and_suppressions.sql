-- +goose Up
-- suppressed: the recipient is on the suppression list (a hard bounce, a
-- spam complaint, or an operator's decision); nothing was sent.
ALTER TABLE notification_deliveries DROP CONSTRAINT notification_deliveries_status_check;
ALTER TABLE notification_deliveries ADD CONSTRAINT notification_deliveries_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'held', 'suppressed'));

-- Providers' webhooks name a message by their id or by our Message-ID.
CREATE INDEX notification_deliveries_provider_message_id_idx ON notification_deliveries (provider_message_id)
    WHERE provider_message_id IS NOT NULL;
CREATE INDEX notification_deliveries_message_id_idx ON notification_deliveries (message_id)
    WHERE message_id IS NOT NULL;

-- Addresses the service will not send to: sending to a dead or
-- complaining address hurts the shop's sender reputation.
CREATE TABLE suppressions (
    recipient  TEXT        PRIMARY KEY,
    source     TEXT        NOT NULL CHECK (source IN ('bounce', 'complaint', 'operator')),
    reason     TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The story of the list: every addition and removal, with who and why.
CREATE TABLE suppression_events (
    id        BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recipient TEXT        NOT NULL,
    at        TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    action    TEXT        NOT NULL CHECK (action IN ('added', 'removed')),
    source    TEXT        NOT NULL,
    actor     TEXT        NOT NULL,
    note      TEXT        NOT NULL
);
CREATE INDEX suppression_events_recipient_idx ON suppression_events (recipient, id);

-- Every provider event accepted, by its id: the same event twice (a
-- provider's retry, a replay) changes nothing the second time.
CREATE TABLE provider_events (
    provider    TEXT        NOT NULL,
    event_id    TEXT        NOT NULL,
    kind        TEXT        NOT NULL,
    delivery_id UUID        REFERENCES notification_deliveries (id) ON DELETE SET NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, event_id)
);
CREATE INDEX provider_events_received_at_idx ON provider_events (received_at);

-- +goose Down
DROP TABLE provider_events;
DROP TABLE suppression_events;
DROP TABLE suppressions;
DROP INDEX notification_deliveries_message_id_idx;
DROP INDEX notification_deliveries_provider_message_id_idx;
UPDATE notification_deliveries SET status = 'failed', last_error = 'suppressed (downgrade)' WHERE status = 'suppressed';
ALTER TABLE notification_deliveries DROP CONSTRAINT notification_deliveries_status_check;
ALTER TABLE notification_deliveries ADD CONSTRAINT notification_deliveries_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'held'));
