-- queue_controls: the hand-set state of each (forge, repository, base branch) merge queue.
-- paused (0/1): nothing is admitted, no car starts, nothing lands; draining (0/1): no new
-- admissions, what is queued runs to the end. set_by names the token that set it, set_at
-- when (UNIX seconds), epoch the merge lane token of the writer (the write is fenced like
-- every queue write). No row: neither paused nor draining. Each change is also an event
-- (kind 'control') in queue_events.
CREATE TABLE IF NOT EXISTS queue_controls (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    base TEXT NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    draining INTEGER NOT NULL DEFAULT 0,
    set_by TEXT NOT NULL,
    set_at REAL NOT NULL,
    epoch INTEGER NOT NULL,
    PRIMARY KEY (forge, repo, base)
);
