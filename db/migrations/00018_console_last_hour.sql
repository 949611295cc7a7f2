-- +goose Up
-- The console's last hour (CountHistoryByMinute): the history rows that
-- move a delivery anywhere but to sending — recorded, sent, deferred,
-- failed, held, suppressed, cancelled — by time. Without it the console's
-- read was a scan of the whole history (5 million rows: 400 ms, every
-- page of the table); with it, the hour's rows only. Partial, so that of
-- a delivery's usual four rows (received, claimed, handed_over, sent)
-- two get an entry; `at` only grows, so each entry goes to the index's
-- last page.
--
-- Built in the migration's transaction, which holds writes to the
-- history while it builds: about 2 s for 5 million rows on the
-- development machine, during which transitions wait (none fails). Not
-- CONCURRENTLY: that waits for every transaction older than it, the
-- migration lock's own among them, and so for ever. A large history is
-- indexed beforehand by hand with CREATE INDEX CONCURRENTLY and this
-- definition (docs/deploy.md, Upgrading); IF NOT EXISTS then finds it.
CREATE INDEX IF NOT EXISTS delivery_events_flow_idx ON delivery_events (at)
    WHERE from_status IS DISTINCT FROM to_status AND to_status <> 'sending';

-- +goose Down
DROP INDEX IF EXISTS delivery_events_flow_idx;
