-- name: InsertAPIKey :one
-- owner_id: the key's own id for a new line of keys, or the owner of
-- the key it replaces (rotation).
INSERT INTO api_keys (id, name, prefix, secret_hash, scopes, owner_id)
VALUES (@id, @name, @prefix, @secret_hash, @scopes::text[], @owner_id::uuid)
RETURNING *;

-- name: GetAPIKey :one
SELECT * FROM api_keys WHERE id = @id;

-- name: GetAPIKeyByPrefix :one
SELECT * FROM api_keys WHERE prefix = @prefix;

-- name: ListAPIKeys :many
SELECT * FROM api_keys ORDER BY created_at, id;

-- name: RevokeAPIKey :one
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = @id
RETURNING *;
