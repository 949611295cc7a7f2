-- name: InsertConsoleSession :exec
INSERT INTO console_sessions (token_hash, key_id, csrf_token, expires_at)
VALUES (@token_hash, @key_id, @csrf_token, @expires_at);

-- name: GetConsoleSession :one
-- A live session of a live key, with the key.
SELECT s.csrf_token, s.expires_at, k.*
FROM console_sessions s JOIN api_keys k ON k.id = s.key_id
WHERE s.token_hash = @token_hash AND s.expires_at > now() AND k.revoked_at IS NULL;

-- name: DeleteConsoleSession :exec
DELETE FROM console_sessions WHERE token_hash = @token_hash;

-- name: DeleteExpiredConsoleSessions :execrows
DELETE FROM console_sessions WHERE expires_at <= now();
