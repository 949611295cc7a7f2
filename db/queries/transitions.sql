-- Every write that changes a delivery's status, grouped as the state
-- table of internal/notify/transitions.go: who makes it, from which status
-- to which. Each writes its delivery_events row in the same statement (a
-- data-modifying CTE), so the history can never disagree with the row,
-- and each is conditional on the status (and, for an attempt, on the
-- lease) it moves from: a transition that no longer applies changes
-- nothing.
--
-- Whether a provider may hold a delivery's message is unsettled_since,
-- and PostgreSQL keeps it (migration 00021, trigger delivery_settlement):
-- a hand-over sets it, sent clears it, and nothing else clears it without
-- naming its evidence (settled_by: 'answer', 'lookup' or 'operator'); no
-- status that says "not sent" (failed, suppressed, cancelled) can stand
-- beside it. A statement below that would break that fails.

-- ---- The API: an intent is recorded (-> pending). ----

-- name: InsertDelivery :one
-- A second intent for the same event meets the unique key and changes
-- nothing; the caller then reads the row that was there first. A key
-- whose delivery retention has retired is refused the same way: the
-- tombstone is committed before its delivery is deleted, so this
-- statement sees one or the other.
WITH ins AS (
    INSERT INTO notification_deliveries (id, order_id, template, recipient, idempotency_key, template_data, created_at, updated_at,
                                         trying_since, locale, not_before, owner_id, test)
    SELECT @id, @order_id, @template, @recipient, @idempotency_key, @template_data, @created_at, @created_at,
           greatest(@created_at, sqlc.narg(not_before)::timestamptz), sqlc.narg(locale)::text, sqlc.narg(not_before)::timestamptz,
           sqlc.narg(owner_id)::uuid, @test::boolean
    WHERE NOT EXISTS (SELECT 1 FROM retired_deliveries r
                      WHERE r.key_hash = sha256(convert_to(@idempotency_key::text, 'UTF8')))
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING *
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor)
    SELECT ins.id, 'received', NULL, 'pending', 0, @actor::text FROM ins
)
SELECT id, order_id, template, recipient, idempotency_key, status, attempts, last_error,
       lease_token, lease_expires_at, handed_over_at, provider_message_id, template_data,
       created_at, updated_at, sent_at, message_id, trying_since, locale, not_before, provider, provider_pinned, unsettled_since, owner_id, handover_batch, test, settled_by, settled_at,
       provider_event, provider_event_at, bounced_or_complained_at
FROM ins;

-- ---- The worker: one attempt (pending -> sending -> sent, pending, failed or held). ----

-- name: ClaimDeliveries :many
-- Take deliveries for one attempt each: all the claims a worker asked for
-- while its previous claim ran (smart batching), one statement and one
-- commit for all. Each row is judged on its own, under its row lock (rows
-- locked in id order, so that two workers' claims never wait on each
-- other in a circle), and the verdict is the one place that says when a
-- delivery may be attempted; the worker decides from it what to do with
-- a row it did not take (decide.go), and never restates it:
--
--   not_task          the task's key hash is not the row's
--   settled           sent, failed, held or suppressed: nothing to do
--   leased            another worker's lease is live
--   handed_over       a lease ran out after its hand-over: the provider
--                     may have the message; the reconciler asks it
--   not_yet           pending, to be sent later (not_before)
--   unknown_template  a template this worker does not have
--   too_old           pending longer than the max age
--   suppressed        the recipient is on the suppression list (of its mode)
--   unsubscribed      a subscription template, and the recipient left
--                     subscription mail (one-click unsubscribe)
--                     (these three: delivery_held_back, 00021; by mode, 00023)
--   blocked           an operator's block holds it back
--   pinned_elsewhere  pinned to a provider (its outcome there unknown)
--                     that is not among the worker's usable ones now
--                     (down, or not in its list): it waits, unwritten
--   claimed           taken: pending, or sending under a lease that ran
--                     out before its hand-over (the worker died)
--
-- The ids must be distinct: a row asked for twice would be locked again
-- after this statement's own update and left out (claimAll asks once). A
-- row that does not exist is not returned. Commits before anything is sent,
-- without waiting for the WAL flush: a claim PostgreSQL forgot is a
-- pending row again, never a message sent.
WITH nosync AS (
    SELECT set_config('synchronous_commit', 'off', true)
), input AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@key_hashes::text[]) AS key_hash, unnest(@lease_tokens::uuid[]) AS lease_token,
           unnest(@message_ids::text[]) AS message_id, unnest(@task_ids::text[]) AS task_id
), judged AS (
    SELECT n.*, i.lease_token AS input_lease, i.message_id AS input_message_id, i.task_id,
           CASE
               WHEN encode(substring(sha256(convert_to(n.idempotency_key, 'UTF8')) FROM 1 FOR 16), 'hex') <> i.key_hash THEN 'not_task'
               WHEN n.status NOT IN ('pending', 'sending') THEN 'settled'
               WHEN n.status = 'sending' AND n.lease_expires_at >= now() THEN 'leased'
               WHEN n.status = 'sending' AND n.handed_over_at IS NOT NULL THEN 'handed_over'
               WHEN n.status = 'pending' AND n.not_before > now() THEN 'not_yet'
               WHEN NOT (n.template = ANY(@templates::text[])) THEN 'unknown_template'
               WHEN h.reason IS NOT NULL THEN h.reason
               WHEN EXISTS (SELECT 1 FROM delivery_blocks b
                            WHERE b.expires_at > now()
                              AND ((b.kind = 'key' AND b.value = n.idempotency_key)
                                OR (b.kind = 'recipient' AND b.value = n.recipient))) THEN 'blocked'
               WHEN n.provider_pinned AND n.provider IS NOT NULL
                    AND NOT (n.provider = ANY(coalesce(@usable_providers::text[], '{}'))) THEN 'pinned_elsewhere'
               ELSE 'claim'
           END AS verdict
    FROM nosync, input i JOIN notification_deliveries n ON n.id = i.id
         CROSS JOIN LATERAL delivery_held_back(n.status, n.recipient, n.template, n.trying_since,
                                               @max_age_seconds::float8, @subscription_templates::text[], n.test) AS h (reason)
    WHERE n.id = ANY(@ids::uuid[])
    ORDER BY n.id
    FOR UPDATE OF n
), claimed AS (
    UPDATE notification_deliveries d
    SET status           = 'sending',
        lease_token      = j.input_lease,
        lease_expires_at = now() + make_interval(secs => @lease_seconds::float8),
        handed_over_at   = NULL,
        message_id       = coalesce(d.message_id, j.input_message_id),
        attempts         = d.attempts + 1,
        updated_at       = now()
    FROM judged j
    WHERE d.id = j.id
      AND j.verdict = 'claim'
    RETURNING d.*, j.status AS from_status, j.task_id
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
    SELECT id, 'claimed', from_status, 'sending', attempts, @actor::text,
           jsonb_build_object('task_id', task_id)
    FROM claimed
)
SELECT c.id, c.order_id, c.template, c.recipient, c.idempotency_key, c.status, c.attempts, c.last_error,
       c.lease_token, c.lease_expires_at, c.handed_over_at, c.provider_message_id, c.template_data,
       c.created_at, c.updated_at, c.sent_at, c.message_id, c.trying_since, c.locale, c.not_before,
       c.provider, c.provider_pinned, c.unsettled_since, c.handover_batch, c.test, c.from_status, 'claimed'::text AS verdict
FROM claimed c
UNION ALL
SELECT j.id, j.order_id, j.template, j.recipient, j.idempotency_key, j.status, j.attempts, j.last_error,
       j.lease_token, j.lease_expires_at, j.handed_over_at, j.provider_message_id, j.template_data,
       j.created_at, j.updated_at, j.sent_at, j.message_id, j.trying_since, j.locale, j.not_before,
       j.provider, j.provider_pinned, j.unsettled_since, j.handover_batch, j.test, j.status, j.verdict
FROM judged j
WHERE NOT EXISTS (SELECT 1 FROM claimed c WHERE c.id = j.id);

-- name: HandOverDeliveries :many
-- The last check before the data goes out, for every attempt of a worker
-- that reached it while its previous hand-over ran: each lease still
-- ours and unexpired. It also records that, from now on, the provider
-- named for each row may have its message, and in the history what that
-- message is: its subject, language and the digest of the template
-- version that rendered it (template_versions), so that the console
-- shows what went out, not today's template. It changes no indexed column
-- (not even updated_at, which says when the status changed): a HOT
-- update. Committed waiting for the WAL flush, one flush for the batch:
-- a hand-over PostgreSQL forgot would let the reconciler send again what
-- the provider may have. Returns the rows handed over; an attempt whose
-- row is missing lost its lease and must send nothing.
--
-- A row handed over in a batch at the provider (batch_keys, '' for a
-- message sent alone) records the batch's key, and the batch its
-- members in order — those whose lease held, which are what the request
-- carries — unless a batch of that key is recorded already (the same
-- batch handed over again, identical).
WITH input AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@lease_tokens::uuid[]) AS lease_token, unnest(@providers::text[]) AS provider,
           unnest(@subjects::text[]) AS subject, unnest(@languages::text[]) AS language,
           unnest(@template_versions::text[]) AS template_version, unnest(@batch_keys::text[]) AS batch_key,
           generate_series(1, cardinality(@ids::uuid[])) AS ord
), upd AS (
    UPDATE notification_deliveries d
    SET handed_over_at   = now(),
        provider         = i.provider,
        handover_batch   = NULLIF(i.batch_key, ''),
        lease_expires_at = now() + make_interval(secs => @lease_seconds::float8)
    FROM input i
    WHERE d.id = ANY(@ids::uuid[])
      AND d.id = i.id
      AND d.status = 'sending'
      AND d.lease_token = i.lease_token
      AND d.lease_expires_at > now()
    RETURNING d.id, d.attempts, d.lease_token, i.provider, i.subject, i.language, i.template_version, i.batch_key, i.ord
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
    SELECT id, 'handed_over', 'sending', 'sending', attempts, @actor::text,
           jsonb_strip_nulls(jsonb_build_object('provider', provider, 'subject', subject, 'language', language,
                                                'template_version', template_version, 'batch', NULLIF(batch_key, '')))
    FROM upd
), batches AS (
    INSERT INTO delivery_batches (key, provider, members)
    SELECT batch_key, min(provider), array_agg(id ORDER BY ord)
    FROM upd
    WHERE batch_key <> ''
    GROUP BY batch_key
    ON CONFLICT (key) DO NOTHING
)
SELECT id, lease_token FROM upd;

-- name: ExtendLeases :exec
-- The heartbeat of a task: every lease it holds renewed in one
-- statement, each only while it is still its own and unexpired.
UPDATE notification_deliveries d
SET lease_expires_at = now() + make_interval(secs => @lease_seconds::float8)
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@lease_tokens::uuid[]) AS lease_token) i
WHERE d.id = ANY(@ids::uuid[])
  AND d.id = i.id
  AND d.status = 'sending'
  AND d.lease_token = i.lease_token
  AND d.lease_expires_at > now();

-- name: CompleteDeliveries :many
-- The outcome of every attempt of a task, in one statement: each row on
-- its own lease (a row another worker or the reconciler took is left as
-- it is, and not returned), each with its own history event.
--
--   sent       the provider accepted it (its id, the language it went in)
--   retry      back to pending for a later attempt: refused before the
--              data, the provider refusing us, deferred, paced; refund:
--              the attempt does not count (it never reached the
--              recipient's acceptance); pin: the provider may have taken
--              it all the same (an HTTP 5xx after the request went out),
--              so the next attempts go there alone. Without pin, the
--              answer settles this attempt (settled_by 'answer'); an
--              earlier unknown one (pinned) stays unknown.
--   failed     refused for good, or deferred past DELIVERY_MAX_AGE: the
--              answer settles this attempt; an earlier unknown one
--              (pinned) is not settled by it, and the database refuses
--              failed beside it (the worker holds such a row instead)
--   held       it cannot go ahead until an operator acts (the template
--              cannot render its data; a resend window passed)
--   ambiguous  no answer after the data: left sending for the
--              reconciler, its lease one more @lease_seconds long
--
-- Committed without waiting for the WAL flush when every outcome is
-- sent (@async): if PostgreSQL crashes before the flush, a row is back
-- to sending and handed over — what a worker crash after the provider's
-- acceptance leaves — and the reconciler settles it by asking the
-- provider. Any other outcome waits for the flush.
WITH nosync AS (
    SELECT set_config('synchronous_commit', CASE WHEN @async::boolean THEN 'off' ELSE 'on' END, true)
), input AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@lease_tokens::uuid[]) AS lease_token, unnest(@outcomes::text[]) AS outcome,
           unnest(@reasons::text[]) AS reason, unnest(@refunds::boolean[]) AS refund, unnest(@pins::boolean[]) AS pin,
           unnest(@provider_message_ids::text[]) AS provider_message_id, unnest(@languages::text[]) AS language,
           unnest(@providers::text[]) AS provider
), upd AS (
    UPDATE notification_deliveries d
    SET status              = CASE i.outcome WHEN 'retry' THEN 'pending' WHEN 'ambiguous' THEN 'sending' ELSE i.outcome END,
        attempts            = d.attempts - CASE WHEN i.outcome = 'retry' AND i.refund THEN 1 ELSE 0 END,
        provider_pinned     = d.provider_pinned OR (i.outcome = 'retry' AND i.pin),
        unsettled_since     = CASE i.outcome
                                  WHEN 'retry' THEN CASE WHEN d.provider_pinned OR i.pin THEN coalesce(d.unsettled_since, d.handed_over_at) END
                                  WHEN 'failed' THEN CASE WHEN d.provider_pinned THEN d.unsettled_since END
                                  ELSE d.unsettled_since END,
        settled_by          = CASE WHEN i.outcome IN ('retry', 'failed') AND d.unsettled_since IS NOT NULL
                                        AND NOT (d.provider_pinned OR (i.outcome = 'retry' AND i.pin))
                                   THEN 'answer' ELSE d.settled_by END,
        settled_at          = CASE WHEN i.outcome IN ('retry', 'failed') AND d.unsettled_since IS NOT NULL
                                        AND NOT (d.provider_pinned OR (i.outcome = 'retry' AND i.pin))
                                   THEN now() ELSE d.settled_at END,
        last_error          = CASE WHEN i.outcome = 'sent' THEN NULL ELSE i.reason END,
        provider_message_id = CASE WHEN i.outcome = 'sent' THEN i.provider_message_id ELSE d.provider_message_id END,
        sent_at             = CASE WHEN i.outcome = 'sent' THEN now() ELSE d.sent_at END,
        lease_token         = CASE WHEN i.outcome IN ('retry', 'held') THEN NULL ELSE d.lease_token END,
        lease_expires_at    = CASE i.outcome WHEN 'sent' THEN d.lease_expires_at
                                             WHEN 'ambiguous' THEN now() + make_interval(secs => @lease_seconds::float8) END,
        handed_over_at      = CASE WHEN i.outcome = 'retry' THEN NULL ELSE d.handed_over_at END,
        updated_at          = now()
    FROM nosync, input i
    WHERE d.id = ANY(@ids::uuid[])
      AND d.id = i.id
      AND d.status = 'sending'
      AND d.lease_token = i.lease_token
    RETURNING d.id, d.attempts, d.status, d.provider AS handed_to, i.outcome, i.reason, i.provider, i.provider_message_id, i.language
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
    SELECT id, CASE outcome WHEN 'retry' THEN 'retry_scheduled' ELSE outcome END, 'sending', status, attempts, @actor::text,
           CASE outcome
               WHEN 'sent' THEN jsonb_build_object('provider_message_id', provider_message_id, 'language', language, 'provider', handed_to)
               WHEN 'held' THEN jsonb_build_object('error', reason)
               ELSE jsonb_strip_nulls(jsonb_build_object('error', reason, 'provider', nullif(provider, '')))
           END
    FROM upd
)
SELECT id FROM upd;

-- name: NoteAmbiguous :execrows
-- A worker found a row whose previous attempt died after handing the
-- message over; it records why it did not send, for the reconciler.
WITH upd AS (
    UPDATE notification_deliveries d
    SET last_error = @last_error::text,
        updated_at = now()
    WHERE d.id = @id
      AND d.status = 'sending'
      AND d.handed_over_at IS NOT NULL
      AND d.lease_expires_at < now()
    RETURNING d.id, d.attempts
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT id, 'left_for_reconciler', 'sending', 'sending', attempts, @actor::text,
       jsonb_build_object('error', @last_error::text)
FROM upd;

-- name: ExpirePending :execrows
-- A pending delivery whose tries began longer ago than DELIVERY_MAX_AGE
-- (the provider refused us, or no worker knew its template, all that
-- time): given up without another try. Not one that may have been sent:
-- its expiry waits for the reconciler's settlement (the database refuses
-- failed beside an unknown outcome).
WITH upd AS (
    UPDATE notification_deliveries d
    SET status     = 'failed',
        last_error = @last_error::text,
        updated_at = now()
    WHERE d.id = @id
      AND d.status = 'pending'
      AND d.trying_since < now() - make_interval(secs => @max_age_seconds::float8)
    RETURNING d.id, d.attempts
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT id, 'expired', 'pending', 'failed', attempts, @actor::text,
       jsonb_build_object('error', @last_error::text)
FROM upd;

-- name: SuppressPending :execrows
-- A delivery to a recipient on the suppression list, pending or left
-- sending by an attempt that died before its hand-over (nothing was
-- sent): not sent, and kept visible with the reason. Not one that may
-- have been sent: that waits for the reconciler's settlement.
WITH prev AS (
    SELECT n.id, n.status FROM notification_deliveries n WHERE n.id = @id FOR UPDATE
), upd AS (
    UPDATE notification_deliveries d
    SET status           = 'suppressed',
        last_error       = 'suppressed: ' || s.reason,
        lease_token      = NULL,
        lease_expires_at = NULL,
        updated_at       = now()
    FROM prev, suppressions s
    WHERE d.id = prev.id
      AND (d.status = 'pending' OR (d.status = 'sending' AND d.lease_expires_at < now() AND d.handed_over_at IS NULL))
      AND s.recipient = d.recipient AND s.test = d.test
    RETURNING d.id, d.attempts, prev.status AS from_status, s.source, s.reason
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT id, 'suppressed', from_status, 'suppressed', attempts, @actor::text,
       jsonb_build_object('source', source, 'reason', reason)
FROM upd;

-- name: SuppressUnsubscribed :execrows
-- A delivery of a subscription template to a recipient who unsubscribed
-- from that mail, pending or left sending by an attempt that died before
-- its hand-over: not sent, kept visible with the reason. Not one that
-- may have been sent, as SuppressPending.
WITH prev AS (
    SELECT n.id, n.status FROM notification_deliveries n WHERE n.id = @id FOR UPDATE
), upd AS (
    UPDATE notification_deliveries d
    SET status           = 'suppressed',
        last_error       = 'unsubscribed: the recipient left subscription mail',
        lease_token      = NULL,
        lease_expires_at = NULL,
        updated_at       = now()
    FROM prev
    WHERE d.id = prev.id
      AND (d.status = 'pending' OR (d.status = 'sending' AND d.lease_expires_at < now() AND d.handed_over_at IS NULL))
      AND EXISTS (SELECT 1 FROM unsubscribes u WHERE u.recipient = d.recipient AND u.category = 'subscription' AND u.test = d.test)
    RETURNING d.id, d.attempts, prev.status AS from_status
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT id, 'suppressed', from_status, 'suppressed', attempts, @actor::text,
       jsonb_build_object('source', 'unsubscribe', 'reason', 'the recipient unsubscribed from subscription mail')
FROM upd;

-- ---- The provider's report: what it says it has settles the doubt. ----

-- name: SettleByReport :execrows
-- A provider reported about a delivery's message (delivered, deferred,
-- bounced, complained): it took it. A delivery in doubt that no attempt
-- is sending now (pending, waiting to be sent again under its key, or
-- held for an operator) is sent: what the provider has is the truth,
-- whatever else holds it back. provider_message_id is the report's, where
-- the lost answer never gave one.
WITH upd AS (
    UPDATE notification_deliveries d
    SET status              = 'sent',
        provider_message_id = coalesce(d.provider_message_id, nullif(@provider_message_id::text, '')),
        sent_at             = now(),
        last_error          = NULL,
        lease_token         = NULL,
        lease_expires_at    = NULL,
        updated_at          = now()
    WHERE d.id = @id
      AND d.status IN ('pending', 'held')
      AND d.unsettled_since IS NOT NULL
    RETURNING d.id, d.attempts, d.provider
), prev AS (
    SELECT n.status FROM notification_deliveries n WHERE n.id = @id
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT upd.id, 'reconciled', prev.status, 'sent', upd.attempts, @actor::text,
       jsonb_build_object('decision', 'reported_by_provider', 'report', @kind::text, 'provider', upd.provider)
FROM upd, prev;

-- ---- The shop or an operator: called off before it was sent. ----

-- name: CancelDelivery :one
-- pending -> cancelled: only a pending row, so that a cancel and a
-- worker's claim (which locks the row and re-reads its status) end in one
-- of the two, never both; and only one no provider may hold: cancelled
-- says nothing was sent, so a row with an attempt whose outcome is
-- unknown (pinned after a provider's 5xx, or put back to pending by the
-- reconciler while pinned) is not cancelled on our word — only on an
-- operator's, who checked the provider's log (not_at_provider, as a
-- retry's unpin; the history names the provider checked). Who may:
-- may_cancel (migration 22), the one rule of every cancel. No row: not
-- pending, not cancellable, not the caller's, or not there (notify.Cancel
-- tells which).
WITH upd AS (
    UPDATE notification_deliveries d
    SET status          = 'cancelled',
        unsettled_since = NULL,
        provider_pinned = false,
        settled_by      = CASE WHEN d.unsettled_since IS NULL THEN d.settled_by ELSE 'operator' END,
        settled_at      = CASE WHEN d.unsettled_since IS NULL THEN d.settled_at ELSE now() END,
        updated_at      = now()
    WHERE d.id = @id AND d.status = 'pending'
      AND (d.unsettled_since IS NULL OR (@by_operator::boolean AND @not_at_provider::boolean))
      AND may_cancel(d.owner_id, d.order_id, d.test, @by_operator::boolean, @owner::uuid, @test::boolean)
    RETURNING d.*
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
    SELECT upd.id, 'cancelled', 'pending', 'cancelled', upd.attempts, @actor::text,
           nullif(jsonb_strip_nulls(jsonb_build_object(
               'note', nullif(@note::text, ''),
               'not_at_provider', CASE WHEN upd.settled_at = now() AND upd.settled_by = 'operator' THEN coalesce(upd.provider, '') END)),
               '{}'::jsonb)
    FROM upd
)
SELECT id, order_id, template, recipient, idempotency_key, status, attempts, last_error,
       lease_token, lease_expires_at, handed_over_at, provider_message_id, template_data,
       created_at, updated_at, sent_at, message_id, trying_since, locale, not_before, provider, provider_pinned, unsettled_since, owner_id, handover_batch, test, settled_by, settled_at,
       provider_event, provider_event_at, bounced_or_complained_at
FROM upd;

-- name: CancelPendingOfTemplate :execrows
-- Every pending delivery of one template for one order that the caller
-- may cancel -> cancelled (the order was paid: no reminder), as
-- CancelDelivery does each, under the same conditions. Returns how many.
WITH upd AS (
    UPDATE notification_deliveries d
    SET status = 'cancelled', updated_at = now()
    WHERE d.order_id = @order_id AND d.template = @template AND d.status = 'pending'
      AND d.unsettled_since IS NULL
      AND may_cancel(d.owner_id, d.order_id, d.test, @by_operator::boolean, @owner::uuid, @test::boolean)
    RETURNING d.id, d.attempts
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor)
SELECT id, 'cancelled', 'pending', 'cancelled', attempts, @actor::text
FROM upd;

-- ---- An operator (admin API). ----

-- name: OperatorRetry :one
-- A failed or held delivery gets a fresh set of attempts under the same
-- idempotency key. A delivery pinned to a provider stays pinned (its
-- outcome there is unknown), unless the operator says, with unpin, that
-- the provider does not hold the message: then failover may take it
-- elsewhere; that also settles the unknown attempts (unsettled_since).
-- A retry that keeps the pin keeps them unknown: past the provider's
-- deduplication window the worker holds the delivery again, so a bulk
-- retry, which checks no provider's log, cannot send a second copy.
WITH prev AS (
    SELECT n.id, n.status, n.provider_pinned FROM notification_deliveries n WHERE n.id = @id FOR UPDATE
), upd AS (
    UPDATE notification_deliveries d
    SET status           = 'pending',
        provider_pinned  = d.provider_pinned AND NOT @unpin::boolean,
        unsettled_since  = CASE WHEN @unpin::boolean THEN NULL ELSE d.unsettled_since END,
        settled_by       = CASE WHEN @unpin::boolean AND d.unsettled_since IS NOT NULL THEN 'operator' ELSE d.settled_by END,
        settled_at       = CASE WHEN @unpin::boolean AND d.unsettled_since IS NOT NULL THEN now() ELSE d.settled_at END,
        attempts         = 0,
        lease_token      = NULL,
        lease_expires_at = NULL,
        handed_over_at   = NULL,
        trying_since     = now(),
        updated_at       = now()
    FROM prev
    WHERE d.id = prev.id AND d.status IN ('failed', 'held', 'suppressed')
    RETURNING d.*, prev.status AS from_status, prev.provider_pinned AS was_pinned
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
    SELECT upd.id, 'operator_retry', upd.from_status, 'pending', 0, @actor::text,
           jsonb_strip_nulls(jsonb_build_object('note', @note::text,
               'unpinned', CASE WHEN upd.was_pinned AND @unpin::boolean THEN upd.provider END))
    FROM upd
)
SELECT id, order_id, template, recipient, idempotency_key, status, attempts, last_error,
       lease_token, lease_expires_at, handed_over_at, provider_message_id, template_data,
       created_at, updated_at, sent_at, message_id, trying_since, locale, not_before, provider, provider_pinned, unsettled_since, owner_id, handover_batch, test, settled_by, settled_at,
       provider_event, provider_event_at, bounced_or_complained_at
FROM upd;

-- name: OperatorMarkSent :one
-- A held delivery the operator found at the provider.
WITH upd AS (
    UPDATE notification_deliveries d
    SET status              = 'sent',
        provider_message_id = @provider_message_id::text,
        sent_at             = now(),
        last_error          = NULL,
        updated_at          = now()
    WHERE d.id = @id AND d.status = 'held'
    RETURNING d.*
), ev AS (
    INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
    SELECT upd.id, 'operator_mark_sent', 'held', 'sent', upd.attempts, @actor::text,
           jsonb_build_object('provider_message_id', @provider_message_id::text, 'note', @note::text)
    FROM upd
)
SELECT id, order_id, template, recipient, idempotency_key, status, attempts, last_error,
       lease_token, lease_expires_at, handed_over_at, provider_message_id, template_data,
       created_at, updated_at, sent_at, message_id, trying_since, locale, not_before, provider, provider_pinned, unsettled_since, owner_id, handover_batch, test, settled_by, settled_at,
       provider_event, provider_event_at, bounced_or_complained_at
FROM upd;

-- ---- The reconciler: a sending row whose lease expired, or a pending
-- ---- one that may have been sent and is held back (its settlement). ----

-- name: ReconcileToPending :execrows
-- The reconciler's three writes are each fenced on the row as it read
-- it (GetStaleSending, ListHeldBackUnsettled), before it asked the
-- provider, holding no lock in between: in the status it was read in,
-- under the lease it saw expire and still expired (a pending row has
-- none), with updated_at and every column its decision read (the
-- hand-over, the provider and its pin, the earliest unknown attempt) as
-- they were. A row that changed meanwhile (a late worker recorded its
-- outcome, another reconciler decided first) is left as it is: no row,
-- no history. provider is the one the reconciler judged the row at;
-- pinned, whether its next attempts must go there alone (the outcome
-- there is still unknown). Unpinning a row whose outcome was unknown
-- names its evidence ('lookup': the provider's search has no such
-- message); without it the database refuses the write.
WITH upd AS (
    UPDATE notification_deliveries d
    SET status           = 'pending',
        lease_token      = NULL,
        lease_expires_at = NULL,
        handed_over_at   = NULL,
        provider         = nullif(@provider::text, ''),
        provider_pinned  = @pinned::boolean,
        unsettled_since  = CASE WHEN @pinned::boolean THEN coalesce(d.unsettled_since, d.handed_over_at) END,
        settled_by       = CASE WHEN @pinned::boolean OR d.unsettled_since IS NULL THEN d.settled_by ELSE nullif(@evidence::text, '') END,
        settled_at       = CASE WHEN @pinned::boolean OR d.unsettled_since IS NULL THEN d.settled_at ELSE now() END,
        last_error       = @reason::text,
        updated_at       = now()
    WHERE d.id = @id
      AND d.status = @seen_status::text
      AND d.lease_token IS NOT DISTINCT FROM sqlc.narg(seen_lease_token)::uuid
      AND (d.status = 'pending' OR d.lease_expires_at < now())
      AND d.updated_at = @seen_updated_at::timestamptz
      AND d.handed_over_at IS NOT DISTINCT FROM sqlc.narg(seen_handed_over_at)::timestamptz
      AND coalesce(d.provider, '') = @seen_provider::text
      AND d.provider_pinned = @seen_pinned::boolean
      AND d.unsettled_since IS NOT DISTINCT FROM sqlc.narg(seen_unsettled_since)::timestamptz
    RETURNING d.id, d.attempts
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT id, 'reconciled', @seen_status::text, 'pending', attempts, @actor::text,
       jsonb_build_object('decision', @decision::text, 'reason', @reason::text, 'provider', @provider::text, 'pinned', @pinned::boolean)
FROM upd;

-- name: ReconcileToSent :execrows
WITH upd AS (
    UPDATE notification_deliveries d
    SET status              = 'sent',
        provider_message_id = @provider_message_id::text,
        provider            = nullif(@provider::text, ''),
        sent_at             = now(),
        last_error          = NULL,
        lease_expires_at    = NULL,
        updated_at          = now()
    WHERE d.id = @id
      AND d.status = @seen_status::text
      AND d.lease_token IS NOT DISTINCT FROM sqlc.narg(seen_lease_token)::uuid
      AND (d.status = 'pending' OR d.lease_expires_at < now())
      AND d.updated_at = @seen_updated_at::timestamptz
      AND d.handed_over_at IS NOT DISTINCT FROM sqlc.narg(seen_handed_over_at)::timestamptz
      AND coalesce(d.provider, '') = @seen_provider::text
      AND d.provider_pinned = @seen_pinned::boolean
      AND d.unsettled_since IS NOT DISTINCT FROM sqlc.narg(seen_unsettled_since)::timestamptz
    RETURNING d.id, d.attempts
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT id, 'reconciled', @seen_status::text, 'sent', attempts, @actor::text,
       jsonb_build_object('decision', @decision::text, 'provider_message_id', @provider_message_id::text, 'provider', @provider::text)
FROM upd;

-- name: ReconcileToHeld :execrows
-- The outcome at provider stays unknown: an operator's retry goes there
-- alone (pinned).
WITH upd AS (
    UPDATE notification_deliveries d
    SET status           = 'held',
        lease_token      = NULL,
        lease_expires_at = NULL,
        provider         = nullif(@provider::text, ''),
        provider_pinned  = true,
        unsettled_since  = coalesce(d.unsettled_since, d.handed_over_at),
        last_error       = @reason::text,
        updated_at       = now()
    WHERE d.id = @id
      AND d.status = @seen_status::text
      AND d.lease_token IS NOT DISTINCT FROM sqlc.narg(seen_lease_token)::uuid
      AND (d.status = 'pending' OR d.lease_expires_at < now())
      AND d.updated_at = @seen_updated_at::timestamptz
      AND d.handed_over_at IS NOT DISTINCT FROM sqlc.narg(seen_handed_over_at)::timestamptz
      AND coalesce(d.provider, '') = @seen_provider::text
      AND d.provider_pinned = @seen_pinned::boolean
      AND d.unsettled_since IS NOT DISTINCT FROM sqlc.narg(seen_unsettled_since)::timestamptz
    RETURNING d.id, d.attempts
)
INSERT INTO delivery_events (delivery_id, event, from_status, to_status, attempt, actor, detail)
SELECT id, 'reconciled', @seen_status::text, 'held', attempts, @actor::text,
       jsonb_build_object('decision', @decision::text, 'reason', @reason::text, 'provider', @provider::text)
FROM upd;
