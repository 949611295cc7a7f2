-- name: RecordOperatorAction :exec
-- What an operator did, in the transaction of the change it records.
INSERT INTO operator_actions (actor, action, target, detail)
VALUES (@actor, @action, @target, @detail);

-- name: ListOperatorActions :many
-- The newest actions first, max_rows of them, older than the action
-- before when it is set: a page at a time.
SELECT * FROM operator_actions
WHERE sqlc.narg(before)::bigint IS NULL OR id < sqlc.narg(before)::bigint
ORDER BY id DESC
LIMIT @max_rows;
