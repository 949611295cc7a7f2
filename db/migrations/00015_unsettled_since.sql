-- +goose Up
-- unsettled_since: when the earliest attempt whose outcome is still
-- unknown was handed over (NULL: none is). A provider that refuses a
-- second message under our key (Resend) does so for a limited time,
-- counted from that attempt: once it has passed, sending again could
-- deliver a second e-mail, so neither the worker nor the reconciler
-- sends such a delivery again; it is held for an operator. Each later
-- attempt's own hand-over time is no measure: an earlier one may be the
-- one the provider took. Set with the pin (provider_pinned), cleared
-- when the provider's look-up says it has nothing or an operator retries
-- lifting the pin.
-- Not indexed: written only on the paths of an unknown outcome.
ALTER TABLE notification_deliveries ADD COLUMN unsettled_since TIMESTAMPTZ;
-- Deliveries pinned before this column existed: when their earliest
-- unknown attempt was handed over is not known, but not before their
-- tries began, which errs on the side of holding them.
UPDATE notification_deliveries SET unsettled_since = trying_since
WHERE provider_pinned AND status IN ('pending', 'sending', 'held');

-- +goose Down
ALTER TABLE notification_deliveries DROP COLUMN unsettled_since;
