-- name: ClaimDelivery :one
-- Take the delivery for one attempt: a pending row, or a sending row whose
-- worker died before it handed the message over. Commits before anything
-- is sent; no row back means someone else owns it or it is done.
UPDATE notification_deliveries
SET status           = 'sending',
    lease_token      = @lease_token::uuid,
    lease_expires_at = now() + make_interval(secs => @lease_seconds::float8),
    handed_over_at   = NULL,
    attempts         = attempts + 1,
    updated_at       = now()
WHERE id = @id
  AND (status = 'pending'
       OR (status = 'sending' AND lease_expires_at < now() AND handed_over_at IS NULL))
RETURNING *;

-- name: HandOver :one
-- The last check before the data goes out: the lease is still ours and
-- unexpired. It also records that, from now on, the provider may have
-- the message.
UPDATE notification_deliveries
SET handed_over_at   = now(),
    lease_expires_at = now() + make_interval(secs => @lease_seconds::float8),
    updated_at       = now()
WHERE id = @id
  AND status = 'sending'
  AND lease_token = @lease_token::uuid
  AND lease_expires_at > now()
RETURNING handed_over_at;

-- name: ExtendLease :execrows
UPDATE notification_deliveries
SET lease_expires_at = now() + make_interval(secs => @lease_seconds::float8)
WHERE id = @id
  AND status = 'sending'
  AND lease_token = @lease_token::uuid
  AND lease_expires_at > now();

-- name: MarkSent :execrows
-- Fenced: only the worker whose lease this is may record the outcome.
UPDATE notification_deliveries
SET status              = 'sent',
    provider_message_id = @provider_message_id::text,
    sent_at             = now(),
    last_error          = NULL,
    updated_at          = now()
WHERE id = @id
  AND status = 'sending'
  AND lease_token = @lease_token::uuid;

-- name: ReleaseForRetry :execrows
-- A temporary failure before the provider could have accepted anything:
-- back to pending for the next attempt.
UPDATE notification_deliveries
SET status           = 'pending',
    last_error       = @last_error::text,
    lease_token      = NULL,
    lease_expires_at = NULL,
    handed_over_at   = NULL,
    updated_at       = now()
WHERE id = @id
  AND status = 'sending'
  AND lease_token = @lease_token::uuid;

-- name: MarkFailed :execrows
UPDATE notification_deliveries
SET status           = 'failed',
    last_error       = @last_error::text,
    lease_expires_at = NULL,
    updated_at       = now()
WHERE id = @id
  AND status = 'sending'
  AND lease_token = @lease_token::uuid;

-- name: MarkAmbiguous :execrows
-- The provider may or may not have accepted the message. The row stays
-- sending with the reason, and its lease ends now so the reconciler sees
-- it at once.
UPDATE notification_deliveries
SET last_error       = @last_error::text,
    lease_expires_at = now(),
    updated_at       = now()
WHERE id = @id
  AND status = 'sending'
  AND lease_token = @lease_token::uuid;

-- name: NoteAmbiguous :execrows
-- A worker found a row whose previous attempt died after handing the
-- message over; it records why it did not send, for the reconciler.
UPDATE notification_deliveries
SET last_error = @last_error::text,
    updated_at = now()
WHERE id = @id
  AND status = 'sending'
  AND handed_over_at IS NOT NULL
  AND lease_expires_at < now();
