-- name: TryLockIdempotencyKey :one
-- Held until the transaction ends; a second request with the same key
-- finds it taken and is told its twin is still in flight. The class id
-- 385697 keeps these locks apart from any other advisory lock.
SELECT pg_try_advisory_xact_lock(385697, hashtext(@scope::text || ' ' || @key::text));

-- name: GetIdempotencyKey :one
SELECT * FROM idempotency_keys WHERE scope = @scope AND key = @key;

-- name: DeleteIdempotencyKey :exec
DELETE FROM idempotency_keys WHERE scope = @scope AND key = @key;

-- name: InsertIdempotencyKey :exec
INSERT INTO idempotency_keys (scope, key, request_hash, response_body, expires_at)
VALUES (@scope, @key, @request_hash, @response_body, @expires_at);

-- name: DeleteExpiredIdempotencyKeys :execrows
-- Idempotency-Key records past their window, a batch at a time.
DELETE FROM idempotency_keys
WHERE (scope, key) IN (SELECT k.scope, k.key FROM idempotency_keys k
                       WHERE k.expires_at < now() LIMIT @batch);
