-- +goose Up
-- One-click unsubscribes (RFC 8058): a recipient who left a category of
-- mail (subscription) gets none of its templates again; the transactional
-- ones (an order's confirmation) still go out. The suppression list, by
-- contrast, stops everything.
CREATE TABLE unsubscribes (
    recipient  TEXT        NOT NULL,
    category   TEXT        NOT NULL CHECK (category IN ('subscription')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (recipient, category)
);

-- +goose Down
DROP TABLE unsubscribes;
