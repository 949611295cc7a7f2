-- +goose Up
-- Who may stop a notification: the API key that made it, or a key made
-- to replace that one. owner_id names a line of keys: a new key's own
-- id, or, for a key made to replace another (rotation), the owner of the
-- key it replaces, so that what a key made stays its successor's to
-- cancel once the old key is revoked.
ALTER TABLE api_keys ADD COLUMN owner_id UUID;
UPDATE api_keys SET owner_id = id;
ALTER TABLE api_keys ALTER COLUMN owner_id SET NOT NULL;

-- The owner of the key that placed an order, and of the key that made a
-- notification (a checkout's confirmation: the order's). The all-zero
-- UUID is the public checkout's (no key: only an operator may cancel its
-- confirmation). NULL: recorded before owners were (any backend key with
-- the scope may cancel it, as every key could then). Not indexed: read
-- only with the row it belongs to, and an unindexed column keeps the
-- worker's updates HOT.
ALTER TABLE orders ADD COLUMN owner_id UUID;
ALTER TABLE notification_deliveries ADD COLUMN owner_id UUID;

-- +goose Down
ALTER TABLE notification_deliveries DROP COLUMN owner_id;
ALTER TABLE orders DROP COLUMN owner_id;
ALTER TABLE api_keys DROP COLUMN owner_id;
