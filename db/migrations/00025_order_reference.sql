-- +goose Up
-- The shop's own order number (issue 44): optional on the checkout,
-- shown in the e-mails, the API, the console and the webhooks. One
-- owner's orders never share one (the key's line, owner_id: its
-- rotations included), whoever writes the order; the public checkout
-- takes none. Only the orders that have one are indexed, and a new
-- column of NULLs rewrites no row.
ALTER TABLE orders ADD COLUMN reference TEXT
    CHECK (reference IS NULL OR (length(reference) BETWEEN 1 AND 64 AND reference = btrim(reference)));
CREATE UNIQUE INDEX orders_owner_reference_key ON orders (owner_id, reference) WHERE reference IS NOT NULL;
-- The webhooks carry it as order_reference: 00027 redefines the outbox's
-- function once for this and the recipient.

-- +goose Down
DROP INDEX IF EXISTS orders_owner_reference_key;
ALTER TABLE orders DROP COLUMN IF EXISTS reference;
