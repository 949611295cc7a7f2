-- +goose Up
-- The customer's language (BCP 47, e.g. id-ID), given at checkout; NULL
-- means the service's default language. Each intent freezes it with its
-- template data, so that a later change of the order does not change an
-- e-mail already promised.
ALTER TABLE orders ADD COLUMN locale TEXT;
ALTER TABLE notification_deliveries ADD COLUMN locale TEXT;

-- +goose Down
ALTER TABLE notification_deliveries DROP COLUMN locale;
ALTER TABLE orders DROP COLUMN locale;
