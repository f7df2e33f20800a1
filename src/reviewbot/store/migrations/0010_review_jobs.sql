-- The durable review intent: one job per eligible gate decision, written in the same
-- transaction as the decision, so an eligible head is reviewed even when the process stops
-- between the gate and the review.
--
-- A job is claimed (claimed_by, claim_until in seconds since the epoch) while a process
-- reviews it; a claim that lapses (kill -9, a shutdown that outlasted its grace) makes the
-- job claimable again. status: queued -> done.
CREATE TABLE IF NOT EXISTS review_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    decision_id INTEGER NOT NULL UNIQUE,
    delivery_id TEXT NOT NULL,
    source TEXT NOT NULL,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    head_sha TEXT,
    event TEXT,
    action TEXT,
    sender TEXT,
    status TEXT NOT NULL DEFAULT 'queued',
    attempts INTEGER NOT NULL DEFAULT 0,
    claimed_by TEXT,
    claim_until REAL NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at TEXT NOT NULL,
    finished_at TEXT
);

CREATE INDEX IF NOT EXISTS review_jobs_by_status ON review_jobs (status, claim_until);
