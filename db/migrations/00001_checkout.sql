-- +goose Up
-- Orders as the checkout API records them. Amounts are integer minor units
-- of the order's ISO 4217 currency.
CREATE TABLE orders (
    id             UUID PRIMARY KEY,
    customer_email TEXT        NOT NULL,
    customer_name  TEXT        NOT NULL,
    currency       TEXT        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    total_minor    BIGINT      NOT NULL CHECK (total_minor >= 0),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE order_items (
    order_id         UUID    NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    line_no          INTEGER NOT NULL CHECK (line_no >= 1),
    sku              TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    quantity         INTEGER NOT NULL CHECK (quantity > 0),
    unit_price_minor BIGINT  NOT NULL CHECK (unit_price_minor >= 0),
    PRIMARY KEY (order_id, line_no)
);

-- One row per e-mail the service has promised to send: the intent is
-- written in the same transaction as the business event that causes it,
-- and its idempotency key makes a second intent for the same event
-- impossible. The worker moves it pending -> sending -> sent (or failed).
CREATE TABLE notification_deliveries (
    id                  UUID        PRIMARY KEY,
    order_id            UUID        NOT NULL REFERENCES orders (id),
    template            TEXT        NOT NULL,
    recipient           TEXT        NOT NULL,
    idempotency_key     TEXT        NOT NULL UNIQUE,
    status              TEXT        NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'sending', 'sent', 'failed')),
    attempts            INTEGER     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error          TEXT,
    -- Fencing: a worker that claims the row writes a fresh lease_token and
    -- every later write of that worker is conditional on it.
    lease_token         UUID,
    lease_expires_at    TIMESTAMPTZ,
    -- Set, under a valid lease, right before the message data goes to the
    -- provider; cleared by every claim. A sending row whose lease expired
    -- with this set may have been accepted: only the reconciler, asking
    -- the provider, may decide whether to send it again.
    handed_over_at      TIMESTAMPTZ,
    provider_message_id TEXT,
    -- What the template renders, frozen at the moment of the event.
    template_data       JSONB       NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at             TIMESTAMPTZ,
    CONSTRAINT sending_has_lease
        CHECK (status <> 'sending' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT sent_has_sent_at
        CHECK (status <> 'sent' OR sent_at IS NOT NULL)
);

CREATE INDEX notification_deliveries_order_id_idx ON notification_deliveries (order_id);
-- The reconciler's two scans: old pending rows and expired leases.
CREATE INDEX notification_deliveries_pending_idx
    ON notification_deliveries (created_at) WHERE status = 'pending';
CREATE INDEX notification_deliveries_sending_idx
    ON notification_deliveries (lease_expires_at) WHERE status = 'sending';

-- Requests remembered for the Idempotency-Key HTTP header: a fingerprint
-- of the request, to tell a retry from a reuse of the key for something
-- else, and the response body, kept as the exact bytes first sent.
CREATE TABLE idempotency_keys (
    scope           TEXT        NOT NULL,
    key             TEXT        NOT NULL,
    request_hash    BYTEA       NOT NULL,
    response_body   BYTEA       NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE notification_deliveries;
DROP TABLE order_items;
DROP TABLE orders;
