-- +goose Up
-- Issue 40: what a provider's feedback leaves, each where it belongs.
--
-- 1. Test and live apart in the suppression list and the unsubscribes
-- (docs/testmode.md). An entry has the mode of what put it there: the
-- test provider's report about a test notification makes a test entry;
-- a real provider's report, an operator and a one-click link make live
-- ones. A delivery meets only the entries of its own mode
-- (ClaimDeliveries, SuppressPending, SuppressUnsubscribed): a test key
-- learns nothing of the live list, and writes nothing to it.
--
-- The keys stay as they were, so that the previous release's statements
-- (ON CONFLICT (recipient)) still run during a roll: an address is on
-- one list, the first to take it. Only test mode reports about its magic
-- addresses, and only test keys reach them, so the lists meet only where
-- an operator put a magic address on the live list by hand. The entries
-- already there of those addresses (its domain) are test mode's, as its
-- retention already took them to be.
ALTER TABLE suppressions ADD COLUMN test BOOLEAN NOT NULL DEFAULT false;
UPDATE suppressions SET test = true WHERE recipient LIKE '%@sekali.test';
ALTER TABLE suppression_events ADD COLUMN test BOOLEAN NOT NULL DEFAULT false;
UPDATE suppression_events SET test = true WHERE recipient LIKE '%@sekali.test';
ALTER TABLE unsubscribes ADD COLUMN test BOOLEAN NOT NULL DEFAULT false;
UPDATE unsubscribes SET test = true WHERE recipient LIKE '%@sekali.test';

-- The one judgement of what holds a delivery back (00021), now of the
-- delivery's mode: its list entries only. A seventh argument, so that
-- the six-argument one stays for the previous release's statements
-- during a roll (it reads both modes' entries, as that release did); a
-- later migration drops it.
-- +goose StatementBegin
CREATE FUNCTION delivery_held_back(status TEXT, recipient TEXT, template TEXT, trying_since TIMESTAMPTZ,
                                   max_age_seconds FLOAT8, subscription_templates TEXT[], test BOOLEAN)
RETURNS TABLE (reason TEXT) LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN delivery_held_back.status = 'pending' AND delivery_held_back.max_age_seconds > 0
             AND delivery_held_back.trying_since <= now() - make_interval(secs => delivery_held_back.max_age_seconds) THEN 'too_old'
        WHEN EXISTS (SELECT 1 FROM suppressions s
                     WHERE s.recipient = delivery_held_back.recipient AND s.test = delivery_held_back.test) THEN 'suppressed'
        WHEN delivery_held_back.template = ANY(delivery_held_back.subscription_templates)
             AND EXISTS (SELECT 1 FROM unsubscribes u
                         WHERE u.recipient = delivery_held_back.recipient AND u.category = 'subscription'
                           AND u.test = delivery_held_back.test) THEN 'unsubscribed'
    END
$$;
-- +goose StatementEnd

-- 2. What the provider reported last about a message it took
-- (RecordFeedback): delivered, deferred, bounced or complained, and when
-- by the provider's clock, shown beside the status to the shop and to
-- operators; and when it first reported a bounce or a complaint, which
-- the console filters by. NULL on every existing row (no rewrite); the
-- CHECK is NOT VALID because those rows have nothing to validate and a
-- scan would hold the table's lock for it: every write from now on is
-- checked.
ALTER TABLE notification_deliveries
    ADD COLUMN provider_event TEXT,
    ADD COLUMN provider_event_at TIMESTAMPTZ,
    ADD COLUMN bounced_or_complained_at TIMESTAMPTZ,
    ADD CONSTRAINT notification_deliveries_provider_event_check
        CHECK ((provider_event IN ('delivered', 'deferred', 'bounced', 'complained') AND provider_event_at IS NOT NULL)
               OR (provider_event IS NULL AND provider_event_at IS NULL AND bounced_or_complained_at IS NULL)) NOT VALID;

-- The console's bounced or complained deliveries, by the order its list
-- has (updated_at): a page is a page of this index. Nothing indexes the
-- last report itself: a delivered report arrives for nearly every
-- delivery, and its update is HOT only while it changes no indexed
-- column (an index on provider_event made every report's update write an
-- entry into each of the table's indexes: docs/performance.md). A bounce
-- or a complaint, rare, pays that. Empty when built (the column is new),
-- but building it reads the table in the migration's transaction, which
-- holds the deliveries' writes meanwhile: one to two seconds per million
-- deliveries on the development machine (docs/deploy.md, Upgrading).
CREATE INDEX IF NOT EXISTS notification_deliveries_bounced_idx ON notification_deliveries (updated_at)
    WHERE bounced_or_complained_at IS NOT NULL;

-- +goose Down
DROP FUNCTION delivery_held_back(TEXT, TEXT, TEXT, TIMESTAMPTZ, FLOAT8, TEXT[], BOOLEAN);
DROP INDEX IF EXISTS notification_deliveries_bounced_idx;
ALTER TABLE notification_deliveries
    DROP CONSTRAINT IF EXISTS notification_deliveries_provider_event_check,
    DROP COLUMN IF EXISTS bounced_or_complained_at,
    DROP COLUMN IF EXISTS provider_event_at,
    DROP COLUMN IF EXISTS provider_event;
ALTER TABLE unsubscribes DROP COLUMN test;
ALTER TABLE suppression_events DROP COLUMN test;
ALTER TABLE suppressions DROP COLUMN test;
