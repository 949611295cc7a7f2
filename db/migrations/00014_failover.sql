-- +goose Up
-- Failover across an ordered list of providers (PROVIDERS): which one a
-- delivery's message went to, and whether it must stay there.
--
-- provider is the provider of the latest hand-over, written by the
-- hand-over itself: the reconciler asks that provider about a send whose
-- outcome is unknown. NULL: never handed over since this column exists
-- (the reconciler then asks the first of the list).
--
-- provider_pinned: a hand-over's outcome at provider is still unknown
-- (the reconciler sent it again under the provider's key, or by policy,
-- or held it): every later attempt goes to that provider alone, waiting
-- for it if it is down, since another one could deliver a second copy.
-- Cleared only when that provider's look-up says it does not have the
-- message. Neither column is indexed: writing them keeps the updates HOT.
ALTER TABLE notification_deliveries
    ADD COLUMN provider        TEXT,
    ADD COLUMN provider_pinned BOOLEAN NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE notification_deliveries
    DROP COLUMN provider_pinned,
    DROP COLUMN provider;
