-- +goose Up
-- Send later: a delivery is not claimed before not_before (NULL: at
-- once); DELIVERY_MAX_AGE counts from it (trying_since is set to it).
ALTER TABLE notification_deliveries ADD COLUMN not_before TIMESTAMPTZ;

-- cancelled: the shop (or an operator) called it off while it was still
-- pending; nothing was sent, and nothing will be.
ALTER TABLE notification_deliveries DROP CONSTRAINT notification_deliveries_status_check;
ALTER TABLE notification_deliveries ADD CONSTRAINT notification_deliveries_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'held', 'suppressed', 'cancelled'));
ALTER TABLE retired_deliveries DROP CONSTRAINT retired_deliveries_status_check;
ALTER TABLE retired_deliveries ADD CONSTRAINT retired_deliveries_status_check
    CHECK (status IN ('sent', 'failed', 'cancelled'));

-- +goose Down
DELETE FROM retired_deliveries WHERE status = 'cancelled';
ALTER TABLE retired_deliveries DROP CONSTRAINT retired_deliveries_status_check;
ALTER TABLE retired_deliveries ADD CONSTRAINT retired_deliveries_status_check
    CHECK (status IN ('sent', 'failed'));
UPDATE notification_deliveries SET status = 'failed', last_error = 'cancelled (downgrade)' WHERE status = 'cancelled';
ALTER TABLE notification_deliveries DROP CONSTRAINT notification_deliveries_status_check;
ALTER TABLE notification_deliveries ADD CONSTRAINT notification_deliveries_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'held', 'suppressed'));
ALTER TABLE notification_deliveries DROP COLUMN not_before;
