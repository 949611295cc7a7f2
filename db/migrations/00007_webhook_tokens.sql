-- +goose Up
-- The tokens of the webhook signatures a provider signs without the event
-- (Mailgun signs its timestamp and a random token, not the event-data):
-- a token counts once, so a captured signature cannot carry a forged
-- event while its timestamp is still accepted. A row is needed only
-- until expires_at, when the verifier refuses the signature as too old;
-- the insert of a new token prunes the expired ones (RememberWebhookToken).
CREATE TABLE webhook_tokens (
    provider    TEXT        NOT NULL,
    token       TEXT        NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, token)
);
CREATE INDEX webhook_tokens_expires_at_idx ON webhook_tokens (expires_at);

-- +goose Down
DROP TABLE webhook_tokens;
