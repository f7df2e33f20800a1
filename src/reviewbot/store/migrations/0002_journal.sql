-- The delivery journal, the gate's decisions, semantic-replay claims and API tokens.

-- Every accepted delivery, stored before it is acknowledged.
-- status: queued -> processing -> done | failed
CREATE TABLE IF NOT EXISTS deliveries (
    delivery_id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    forge TEXT,
    event TEXT,
    headers TEXT NOT NULL DEFAULT '{}',
    received_at TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued',
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    finished_at TEXT
);

-- The body exactly as received, apart from the row whose status changes (so a status
-- change does not rewrite the body).
CREATE TABLE IF NOT EXISTS delivery_bodies (
    delivery_id TEXT PRIMARY KEY,
    body BLOB NOT NULL
);

CREATE INDEX IF NOT EXISTS deliveries_by_status ON deliveries (status, received_at);

-- One row per delivery and pull request (at least one per delivery). reasons holds every
-- blocking reason as a JSON list of {"code", "detail"}; reason_code/detail are the first.
CREATE TABLE IF NOT EXISTS pr_gate_decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id TEXT NOT NULL,
    source TEXT NOT NULL,
    forge TEXT,
    repo TEXT,
    number INTEGER,
    head_sha TEXT,
    event TEXT,
    action TEXT,
    decision TEXT NOT NULL,
    reason_code TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    reasons TEXT NOT NULL DEFAULT '[]',
    semantic_key TEXT,
    decided_at TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS pr_gate_decisions_by_pr ON pr_gate_decisions (forge, repo, number, id);

CREATE INDEX IF NOT EXISTS pr_gate_decisions_by_delivery ON pr_gate_decisions (delivery_id);

-- The first delivery that acted on a semantic key; a later delivery with the same key is a replay.
CREATE TABLE IF NOT EXISTS delivery_semantic_keys (
    semantic_key TEXT PRIMARY KEY,
    delivery_id TEXT NOT NULL,
    claimed_at TEXT NOT NULL
);

-- Bearer tokens: only the SHA-256 of the token is stored.
CREATE TABLE IF NOT EXISTS api_tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    scopes TEXT NOT NULL,
    repo TEXT,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);

CREATE INDEX IF NOT EXISTS api_tokens_by_name ON api_tokens (name);
