-- +goose Up
-- Fewer index entries per delivery, and the last lease check a HOT
-- update (docs/performance.md, "Row versions"). A non-HOT update writes
-- an entry into every index of the table, so each index a transition
-- does not need costs three entries per delivery; an update that changes
-- no indexed column, and finds room on its page, writes none.
--
-- Unused since the pending scan orders by updated_at (status_idx):
DROP INDEX notification_deliveries_pending_idx;
-- Our Message-ID is "<key hash>@<domain>": the key hash index finds it
-- (FindDeliveryForFeedback), so the message_id index was a second copy.
DROP INDEX notification_deliveries_message_id_idx;
-- The reconciler's scan of sending rows keyed by something no attempt
-- changes: keyed by lease_expires_at, the hand-over and every heartbeat
-- had to write a new index entry. Sending rows are the few in flight;
-- the scan filters and orders them by their lease in the heap.
DROP INDEX notification_deliveries_sending_idx;
CREATE INDEX notification_deliveries_sending_idx
    ON notification_deliveries (id) WHERE status = 'sending';
-- Room on each page for the HOT versions of its rows.
ALTER TABLE notification_deliveries SET (fillfactor = 80);

-- +goose Down
ALTER TABLE notification_deliveries RESET (fillfactor);
DROP INDEX notification_deliveries_sending_idx;
CREATE INDEX notification_deliveries_sending_idx
    ON notification_deliveries (lease_expires_at) WHERE status = 'sending';
CREATE INDEX notification_deliveries_message_id_idx ON notification_deliveries (message_id)
    WHERE message_id IS NOT NULL;
CREATE INDEX notification_deliveries_pending_idx
    ON notification_deliveries (created_at) WHERE status = 'pending';
