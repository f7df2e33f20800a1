-- The lease audit trail: one row per grant, renewal, release, expiry, takeover and
-- supersession of a lease (see reviewbot.core.lease_history). Rows are only ever appended,
-- in the same transaction as the lease change they describe.
--
-- at and expires_at are UNIX seconds (REAL) from the bot's clock; for an expiry, at is the
-- moment the claim lapsed (its own term, or its worker's heartbeat), not when it was noticed.
-- actor is the caller: an API token by name and id (and session), "cli" or "reviewbot".
CREATE TABLE IF NOT EXISTS lease_history (
    id INTEGER PRIMARY KEY,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    role TEXT NOT NULL,
    event TEXT NOT NULL,
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    at REAL NOT NULL,
    expires_at REAL,
    reason TEXT NOT NULL DEFAULT '',
    actor TEXT NOT NULL DEFAULT '',
    previous_holder TEXT
);

CREATE INDEX IF NOT EXISTS lease_history_by_pull ON lease_history (forge, repo, number, id);
CREATE INDEX IF NOT EXISTS lease_history_by_holder ON lease_history (holder, id);
