-- +goose Up
-- Credentials of the shop's backend: a key is shown once, when it is
-- created, and stored only as its SHA-256. prefix (the key's public part)
-- finds the row; several keys may be valid at once, so that one can be
-- rotated without downtime.
CREATE TABLE api_keys (
    id          UUID        PRIMARY KEY,
    name        TEXT        NOT NULL,
    prefix      TEXT        NOT NULL UNIQUE,
    secret_hash BYTEA       NOT NULL,
    scopes      TEXT[]      NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at  TIMESTAMPTZ
);

-- A capability to read one order: the checkout answers with a token that
-- the storefront may keep to show the order to its customer; only its
-- SHA-256 is stored. Orders recorded before this column have none.
ALTER TABLE orders ADD COLUMN access_token_hash BYTEA;

-- +goose Down
ALTER TABLE orders DROP COLUMN access_token_hash;
DROP TABLE api_keys;
