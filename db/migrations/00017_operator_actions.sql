-- +goose Up
-- A replay gives an outbound webhook message a new series of tries:
-- WEBHOOK_MAX_AGE counts from replayed_at when it is set, from the
-- message's creation otherwise.
ALTER TABLE webhook_messages ADD COLUMN replayed_at TIMESTAMPTZ;

-- +goose Down
ALTER TABLE webhook_messages DROP COLUMN replayed_at;
