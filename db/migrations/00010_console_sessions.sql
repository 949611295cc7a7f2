-- +goose Up
-- The operator console's sign-ins: an operator signs in with an API key
-- of the admin scope and gets a session cookie, of which only the SHA-256
-- is stored. A session ends when it expires, when the operator signs
-- out, or with its key (revoked: no longer valid; deleted: gone with it).
-- csrf_token is the token every form of the session carries.
CREATE TABLE console_sessions (
    token_hash  BYTEA       PRIMARY KEY,
    key_id      UUID        NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    csrf_token  TEXT        NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);

-- +goose Down
DROP TABLE console_sessions;
