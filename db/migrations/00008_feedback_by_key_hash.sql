-- +goose Up
-- A provider's event that names neither its id for the message nor our
-- Message-ID is matched by the key hash it echoes from our metadata
-- (sekali-key). Our Message-ID is "<key hash>@<domain>" (notify.MessageID),
-- so the hash is its local part, whatever the domain was at the time.
CREATE INDEX notification_deliveries_message_id_key_hash_idx
    ON notification_deliveries (split_part(message_id, '@', 1))
    WHERE message_id IS NOT NULL;

-- +goose Down
DROP INDEX notification_deliveries_message_id_key_hash_idx;
