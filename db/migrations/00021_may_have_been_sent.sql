-- +goose Up
-- "May have been sent" is a state PostgreSQL keeps, not a flag each
-- transition must remember to read (issue 40). unsettled_since (00015)
-- becomes its one column: set while any attempt's outcome at a provider
-- is unknown — from the hand-over on, through a pin, a hold — and
-- cleared only by the provider's acceptance (sent) or by evidence that
-- it did not take the message. No statement, today's or a later one,
-- can then tell the shop "not sent" of a message a provider may hold.
--
-- settled_by, settled_at: the evidence of the last settlement of an
-- unknown outcome as "not taken", and when: 'answer' (the provider's
-- answer to the request, or the request never written, says nothing was
-- taken), 'lookup' (the provider's search has no such message), or
-- 'operator' (an operator checked the provider's log). Neither column
-- is indexed: the worker's updates stay HOT.
ALTER TABLE notification_deliveries
    ADD COLUMN settled_by TEXT CHECK (settled_by IN ('answer', 'lookup', 'operator')),
    ADD COLUMN settled_at TIMESTAMPTZ;

-- The rows as they stand, made true before the rules hold them so:
-- a sent row has nothing unknown; a hand-over not yet settled is
-- unknown from its time; an operator's cancel of a pinned row was
-- settled by the operator; and a row that was failed or suppressed
-- while an attempt's outcome was unknown (the fault issue 40 found) is
-- held for an operator, who alone can tell what the provider has.
UPDATE notification_deliveries
SET unsettled_since = NULL
WHERE status = 'sent' AND unsettled_since IS NOT NULL;
UPDATE notification_deliveries
SET unsettled_since = coalesce(unsettled_since, handed_over_at, created_at)
WHERE (status = 'sending' AND handed_over_at IS NOT NULL AND unsettled_since IS NULL)
   OR (provider_pinned AND unsettled_since IS NULL AND status <> 'sent');
UPDATE notification_deliveries
SET unsettled_since = NULL, provider_pinned = false, settled_by = 'operator', settled_at = updated_at
WHERE status = 'cancelled' AND (unsettled_since IS NOT NULL OR provider_pinned);
WITH reopened AS (
    UPDATE notification_deliveries d
    SET status = 'held', provider_pinned = true, updated_at = now(),
        last_error = 'held: it was ' || d.status || ' while an attempt at provider ' || coalesce(d.provider, 'unknown')
                     || ' had no known outcome; check that provider''s log, then mark sent, or retry with unpin'
    WHERE d.status IN ('failed', 'suppressed') AND d.unsettled_since IS NOT NULL
    RETURNING d.id, d.attempts, d.last_error
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT r.id, 'reopened', e.to_status, 'held', r.attempts, 'migration-00021', jsonb_build_object('reason', r.last_error)
FROM reopened r
CROSS JOIN LATERAL (SELECT to_status FROM delivery_events WHERE delivery_id = r.id ORDER BY id DESC LIMIT 1) e;

-- A status that says "not sent" never stands beside an unknown outcome,
-- and a pin (the next attempts go to that provider alone) always has
-- one, until it is sent (a sent row keeps its pin: it was sent there).
ALTER TABLE notification_deliveries
    ADD CONSTRAINT delivery_unknown_is_not_final
        CHECK (unsettled_since IS NULL OR status IN ('pending', 'sending', 'held')),
    ADD CONSTRAINT delivery_pin_is_unknown
        CHECK (NOT provider_pinned OR unsettled_since IS NOT NULL OR status = 'sent');

-- Every update passes here. A hand-over makes the outcome unknown from
-- its time (the earliest unknown attempt's stays); the provider's
-- acceptance (sent) settles it; anything else that clears it must name
-- fresh evidence (settled_by, with a settled_at of its own), or the
-- statement fails. The earliest unknown attempt never moves later.
-- +goose StatementBegin
CREATE FUNCTION delivery_settlement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'sending' AND NEW.handed_over_at IS NOT NULL AND NEW.handed_over_at IS DISTINCT FROM OLD.handed_over_at THEN
        NEW.unsettled_since := least(NEW.unsettled_since, NEW.handed_over_at); -- least ignores NULL
    END IF;
    IF NEW.status = 'sent' THEN
        NEW.unsettled_since := NULL;
    ELSIF OLD.unsettled_since IS NOT NULL AND NEW.unsettled_since IS NULL
          AND (NEW.settled_by IS NULL OR NEW.settled_at IS NOT DISTINCT FROM OLD.settled_at) THEN
        RAISE EXCEPTION 'delivery %: an attempt handed over at % may have reached the provider; only its acceptance or evidence that it was not taken (settled_by) settles it',
            OLD.id, OLD.unsettled_since
            USING ERRCODE = 'check_violation', CONSTRAINT = 'delivery_settled_with_evidence';
    ELSIF NEW.unsettled_since > OLD.unsettled_since THEN
        RAISE EXCEPTION 'delivery %: its earliest unknown attempt (%) cannot move later', OLD.id, OLD.unsettled_since
            USING ERRCODE = 'check_violation', CONSTRAINT = 'delivery_settled_with_evidence';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER delivery_settlement BEFORE UPDATE ON notification_deliveries
    FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status
       OR NEW.handed_over_at IS DISTINCT FROM OLD.handed_over_at
       OR NEW.unsettled_since IS DISTINCT FROM OLD.unsettled_since
       OR NEW.provider_pinned IS DISTINCT FROM OLD.provider_pinned)
    EXECUTE FUNCTION delivery_settlement();

-- What holds a delivery back from another attempt although its time has
-- come: tried longer than the max age, its recipient suppressed, or a
-- subscription template's recipient unsubscribed (a max age of 0: no
-- max age). The claim's verdict
-- (ClaimDeliveries) and the reconciler's settlement of a row that may
-- have been sent (ListHeldBackUnsettled) both ask this one function. A
-- set-returning SQL function, so that the planner inlines it into either
-- statement (LATERAL) and the claim pays nothing for the call.
-- +goose StatementBegin
CREATE FUNCTION delivery_held_back(status TEXT, recipient TEXT, template TEXT, trying_since TIMESTAMPTZ,
                                   max_age_seconds FLOAT8, subscription_templates TEXT[])
RETURNS TABLE (reason TEXT) LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN delivery_held_back.status = 'pending' AND delivery_held_back.max_age_seconds > 0
             AND delivery_held_back.trying_since <= now() - make_interval(secs => delivery_held_back.max_age_seconds) THEN 'too_old'
        WHEN EXISTS (SELECT 1 FROM suppressions s WHERE s.recipient = delivery_held_back.recipient) THEN 'suppressed'
        WHEN delivery_held_back.template = ANY(delivery_held_back.subscription_templates)
             AND EXISTS (SELECT 1 FROM unsubscribes u
                         WHERE u.recipient = delivery_held_back.recipient AND u.category = 'subscription') THEN 'unsubscribed'
    END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION delivery_held_back(TEXT, TEXT, TEXT, TIMESTAMPTZ, FLOAT8, TEXT[]);
DROP TRIGGER delivery_settlement ON notification_deliveries;
DROP FUNCTION delivery_settlement();
ALTER TABLE notification_deliveries
    DROP CONSTRAINT delivery_pin_is_unknown,
    DROP CONSTRAINT delivery_unknown_is_not_final,
    DROP COLUMN settled_at,
    DROP COLUMN settled_by;
