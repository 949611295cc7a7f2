-- name: KeepTemplateVersion :exec
-- A template version a worker loaded, written once: the first worker
-- with it stores it, the others find it there.
INSERT INTO template_versions (digest, template, paths, contents)
VALUES (@digest, @template, @paths::text[], @contents::bytea[])
ON CONFLICT (digest) DO NOTHING;

-- name: GetTemplateVersion :one
SELECT * FROM template_versions WHERE digest = @digest;
