-- +goose Up
-- What operators did, and who did it: each action of the admin API, the
-- console and `api keys create` that changes something (the queue,
-- blocks, the suppression list, API keys, webhook endpoints, the
-- workers' concurrency, a delivery's retry, cancel or mark-sent). It is
-- written in the transaction of the change it records, or right after
-- it for what lives in Redis (pausing the queue, the concurrency).
--   actor   as the delivery history names people: operator:<key name>
--           (<key prefix>), admin:<request id> (ADMIN_TOKEN), cli:<user>@<host>
--   action  what was done: queue.pause, block.add, api_key.revoke, ...
--   target  what it was done to: delivery:<id>, recipient:<address>,
--           api_key:<prefix>, webhook_endpoint:<id>, block:<id>, queue:<name>
--   detail  the rest: the note, the values set
-- Few rows (people's actions), kept; listed newest first by id.
CREATE TABLE operator_actions (
    id     BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor  TEXT        NOT NULL,
    action TEXT        NOT NULL,
    target TEXT        NOT NULL DEFAULT '',
    detail JSONB       NOT NULL DEFAULT '{}'
);

-- The versions of the templates the workers loaded, by digest (a
-- SHA-256 of the template's name and files: mailtemplate.Version), each
-- written once, when a worker that has it starts. Each hand-over records
-- the digest of the version that rendered its message, with its subject
-- and language (in its delivery_events row), so that the console shows
-- a delivery's e-mail as it went out, after the template has changed.
-- A few kilobytes a version; kept.
CREATE TABLE template_versions (
    digest     TEXT        PRIMARY KEY,
    template   TEXT        NOT NULL,
    paths      TEXT[]      NOT NULL,  -- relative to the template's directory
    contents   BYTEA[]     NOT NULL,  -- the files' bytes, in the order of paths
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (cardinality(paths) = cardinality(contents))
);

-- A replay gives an outbound webhook message a new series of tries:
-- WEBHOOK_MAX_AGE counts from replayed_at when it is set, from the
-- message's creation otherwise.
ALTER TABLE webhook_messages ADD COLUMN replayed_at TIMESTAMPTZ;

-- +goose Down
DROP TABLE operator_actions;
DROP TABLE template_versions;
ALTER TABLE webhook_messages DROP COLUMN replayed_at;
