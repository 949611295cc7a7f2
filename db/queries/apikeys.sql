-- name: InsertAPIKey :one
-- owner_id: the key's own id for a new line of keys, or the owner of
-- the key it replaces (rotation).
INSERT INTO api_keys (id, name, prefix, secret_hash, scopes, owner_id, test)
VALUES (@id, @name, @prefix, @secret_hash, @scopes::text[], @owner_id::uuid, @test::boolean)
RETURNING *;

-- name: GetAPIKey :one
SELECT * FROM api_keys WHERE id = @id;

-- name: CheckAPIKey :one
-- One row whatever the prefix: the key that has it (found), or, when no
-- key has, a stand-in of the same shape (a name, a scope) whose hash is
-- @stand_in_hash, which no token hashes to. A check of an unknown prefix
-- so runs, reads and compares what a check of a wrong secret does
-- (apikey.authenticate).
SELECT (k.id IS NOT NULL)::boolean AS found,
       coalesce(k.id, '00000000-0000-0000-0000-000000000000'::uuid)::uuid AS id,
       coalesce(k.name, '-')::text AS name,
       coalesce(k.prefix, @prefix::text)::text AS prefix,
       coalesce(k.secret_hash, @stand_in_hash::bytea)::bytea AS secret_hash,
       coalesce(k.scopes, '{none}'::text[])::text[] AS scopes,
       coalesce(k.created_at, now())::timestamptz AS created_at,
       k.revoked_at,
       coalesce(k.owner_id, '00000000-0000-0000-0000-000000000000'::uuid)::uuid AS owner_id,
       coalesce(k.test, false)::boolean AS test
FROM (VALUES (1)) AS one (n)
LEFT JOIN api_keys k ON k.prefix = @prefix::text;

-- name: ListAPIKeys :many
SELECT * FROM api_keys ORDER BY created_at, id;

-- name: RevokeAPIKey :one
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = @id
RETURNING *;
