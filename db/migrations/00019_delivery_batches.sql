-- +goose Up
-- Batches at the provider (issue 34): a request that carried many
-- messages (Resend's /emails/batch, under one Idempotency-Key for the
-- whole request; Postmark's /email/batch). What a batch was — its key,
-- its provider, its members in order — is written with the hand-over,
-- before the request leaves, so that a batch whose answer was lost is
-- sent again identical under its key (Resend then answers the first
-- request's ids) and never re-composed, and so that no member of it is
-- ever sent alone under a key of its own while the batch's outcome is
-- unknown.
--
-- handover_batch names the batch of a row's last hand-over (NULL: it
-- was sent alone). Not indexed, so that the hand-over stays a HOT
-- update; a batch's members are found through delivery_batches.
ALTER TABLE notification_deliveries ADD COLUMN handover_batch TEXT;

CREATE TABLE delivery_batches (
    key        TEXT PRIMARY KEY,
    provider   TEXT NOT NULL,
    members    UUID[] NOT NULL CHECK (cardinality(members) > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- The reconciler's clean-up deletes batches older than the deliveries'
-- retention by this.
CREATE INDEX delivery_batches_created_at_idx ON delivery_batches (created_at);

-- +goose Down
DROP TABLE IF EXISTS delivery_batches;
ALTER TABLE notification_deliveries DROP COLUMN IF EXISTS handover_batch;
