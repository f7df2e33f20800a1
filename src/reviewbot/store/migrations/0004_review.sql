-- The review pipeline: its decisions per PR head, the outbox of native reviews to post, the
-- checks seen missing (for the grace-period comment) and the canonical PR state comment.

-- One row per evaluation (or outcome of posting) of one PR head.
-- decision: approve, request_changes, waiting, no_required_checks, head_moved, author_is_bot,
-- superseded, reopened, posted, error. blockers/pending/missing/failed are JSON lists.
CREATE TABLE IF NOT EXISTS review_decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    decision TEXT NOT NULL,
    reason_code TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    blockers TEXT NOT NULL DEFAULT '[]',
    pending TEXT NOT NULL DEFAULT '[]',
    missing TEXT NOT NULL DEFAULT '[]',
    failed TEXT NOT NULL DEFAULT '[]',
    delivery_id TEXT,
    source TEXT,
    worker TEXT,
    epoch INTEGER,
    outbox_id INTEGER,
    decided_at TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS review_decisions_by_pr ON review_decisions (forge, repo, number, id);

-- Native reviews to post. One row per (PR, head, verdict, round): the unique key is what
-- makes a second review for the same verdict impossible. round grows when a human dismisses
-- the bot's review at that head, which re-opens the evaluation.
-- status: pending -> posted | dropped (head moved, PR closed) | failed (terminal error)
CREATE TABLE IF NOT EXISTS review_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    verdict TEXT NOT NULL,
    round INTEGER NOT NULL DEFAULT 0,
    event TEXT NOT NULL,
    body TEXT NOT NULL,
    comments TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    last_error TEXT,
    forge_review_id INTEGER,
    decision_id INTEGER,
    worker TEXT,
    epoch INTEGER,
    created_at TEXT NOT NULL,
    created_ts REAL NOT NULL DEFAULT 0,
    finished_at TEXT,
    UNIQUE (forge, repo, number, head_sha, verdict, round)
);

CREATE INDEX IF NOT EXISTS review_outbox_by_status ON review_outbox (status, next_attempt_at);

CREATE INDEX IF NOT EXISTS review_outbox_by_pr ON review_outbox (forge, repo, number, id);

-- When a required check was first seen missing at a head (seconds since the epoch).
CREATE TABLE IF NOT EXISTS review_missing_checks (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    name TEXT NOT NULL,
    first_seen REAL NOT NULL,
    PRIMARY KEY (forge, repo, number, head_sha, name)
);

-- The canonical state comment of each PR and the SHA-256 of the body last written.
CREATE TABLE IF NOT EXISTS pr_state_comments (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    comment_id INTEGER NOT NULL,
    body_sha256 TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (forge, repo, number)
);
