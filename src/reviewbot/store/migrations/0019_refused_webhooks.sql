-- Webhooks the acknowledgement path refused (a wrong signature, an unknown event, a body too
-- large...), so that `explain DELIVERY_ID` can say what happened to a delivery the bot saw
-- but never journalled. Only what the headers said is kept, never the body: delivery_id is
-- the forge's delivery header ('' without one), forge the route's name, code the refusal's
-- code and detail its sentence. received_at is UNIX seconds (REAL).
--
-- The newest retention.refused_webhooks rows are kept: each insert deletes what is older.
CREATE TABLE IF NOT EXISTS refused_webhooks (
    id INTEGER PRIMARY KEY,
    delivery_id TEXT NOT NULL,
    forge TEXT NOT NULL,
    event TEXT,
    code TEXT NOT NULL,
    detail TEXT NOT NULL,
    received_at REAL NOT NULL
);

CREATE INDEX IF NOT EXISTS refused_webhooks_by_delivery ON refused_webhooks (delivery_id, id);
