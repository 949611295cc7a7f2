-- name: InsertAPIKey :one
INSERT INTO api_keys (id, name, prefix, secret_hash, scopes)
VALUES (@id, @name, @prefix, @secret_hash, @scopes::text[])
RETURNING *;

-- name: GetAPIKeyByPrefix :one
SELECT * FROM api_keys WHERE prefix = @prefix;

-- name: ListAPIKeys :many
SELECT * FROM api_keys ORDER BY created_at, id;

-- name: RevokeAPIKey :one
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = @id
RETURNING *;
