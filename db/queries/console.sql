-- name: CountHistoryByMinute :many
-- The console's last hour: the history rows of [since, until) by minute
-- (bins from since, which is on a minute), each counted under what it
-- did to its delivery. A row per minute that has any; every count is of
-- rows, so a delivery deferred twice counts twice. Kinds, from the state
-- table (docs/architecture.md):
--   received    a delivery recorded (→ pending)
--   sent        → sent: the worker, the reconciler, an operator's mark-sent
--   deferred    sending → pending: a provider deferred or refused us, or
--               the reconciler put back a dead worker's attempt
--   failed      → failed: refused for good, or expired
--   held, suppressed, cancelled
-- An operator's retry (→ pending) is in the activity, not here; rows
-- that change no status (a note, feedback) and claims and hand-overs
-- (→ sending) are not drawn. The WHERE repeats the predicate of
-- delivery_events_flow_idx, so the hour is a range of that index. Test
-- mode's notifications are not drawn (CountTestRecordedSince counts
-- them apart): the anti-join reads the test rows' own small index.
SELECT date_bin('1 minute', at, @since::timestamptz)::timestamptz AS minute,
       count(*) FILTER (WHERE event = 'received')::int                     AS received,
       count(*) FILTER (WHERE to_status = 'sent')::int                     AS sent,
       count(*) FILTER (WHERE to_status = 'pending' AND event <> 'received')::int AS deferred,
       count(*) FILTER (WHERE to_status = 'failed')::int                   AS failed,
       count(*) FILTER (WHERE to_status = 'held')::int                     AS held,
       count(*) FILTER (WHERE to_status = 'suppressed')::int               AS suppressed,
       count(*) FILTER (WHERE to_status = 'cancelled')::int                AS cancelled
FROM delivery_events
WHERE at >= @since::timestamptz AND at < @until::timestamptz
  AND from_status IS DISTINCT FROM to_status AND to_status <> 'sending'
  AND event <> 'operator_retry'
  AND NOT EXISTS (SELECT 1 FROM notification_deliveries t WHERE t.test AND t.id = delivery_events.delivery_id)
GROUP BY 1
ORDER BY 1;

-- name: CountTestRecordedSince :one
-- Test mode's notifications recorded since @since: what the console's
-- last hour shows apart from its curves. The test rows' own index.
SELECT count(*)::int AS n FROM notification_deliveries WHERE test AND created_at >= @since::timestamptz;
