-- +goose Up
-- message_id: the Message-ID the delivery's first attempt built, kept so
-- that every later attempt and the reconciler's look-up use the same one,
-- whatever MAIL_FROM says by then. NULL until the first claim.
ALTER TABLE notification_deliveries ADD COLUMN message_id TEXT;

-- trying_since: when the current series of tries began (the recording, or
-- an operator's retry). A delivery keeps trying while it is younger than
-- DELIVERY_MAX_AGE counted from here; nothing else makes it give up on a
-- provider that is only having a bad minute.
ALTER TABLE notification_deliveries ADD COLUMN trying_since TIMESTAMPTZ NOT NULL DEFAULT now();
UPDATE notification_deliveries SET trying_since = created_at;

-- What retention leaves of a finished delivery: enough to refuse its
-- idempotency key for ever (so that a repeated business event cannot be
-- recorded, and sent, a second time), and nothing that names the
-- recipient: the key itself, which holds the address, is kept only as its
-- SHA-256.
CREATE TABLE retired_deliveries (
    key_hash    BYTEA       PRIMARY KEY,
    delivery_id UUID        NOT NULL,
    order_id    UUID        NOT NULL,
    template    TEXT        NOT NULL,
    status      TEXT        NOT NULL CHECK (status IN ('sent', 'failed')),
    sent_at     TIMESTAMPTZ,
    retired_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX retired_deliveries_order_id_idx ON retired_deliveries (order_id);

-- +goose Down
DROP TABLE retired_deliveries;
ALTER TABLE notification_deliveries DROP COLUMN trying_since;
ALTER TABLE notification_deliveries DROP COLUMN message_id;
