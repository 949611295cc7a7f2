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
-- Deliveries pinned before this column existed, and not finished for
-- good (an operator may retry failed, held and suppressed ones): their
-- earliest unknown attempt is not known, but it is no earlier than their
-- first recorded hand-over, or than the row itself, which errs on the
-- side of holding them.
UPDATE notification_deliveries d
SET unsettled_since = coalesce((SELECT min(e.at) FROM delivery_events e
                                WHERE e.delivery_id = d.id AND e.event = 'handed_over'), d.created_at)
WHERE d.provider_pinned AND d.status NOT IN ('sent', 'cancelled');

-- +goose Down
ALTER TABLE notification_deliveries DROP COLUMN unsettled_since;
