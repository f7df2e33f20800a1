-- Merges made under a merger lease, and every merge attempt with how it ended.
--
-- Every row is written in the same transaction as the fencing check of the (holder, epoch)
-- that made it (reviewbot.store.merges), so a superseded holder records nothing.

-- merged_pulls: one row per merged pull request, with the head it was merged at and
-- the forge's merge commit.
CREATE TABLE IF NOT EXISTS merged_pulls (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    merge_commit_sha TEXT,
    method TEXT NOT NULL,
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    merged_at REAL NOT NULL,
    PRIMARY KEY (forge, repo, number)
);

-- Each attempt: status is 'sending' while the merge call is out, then merged, refused,
-- head_moved, not_mergeable or unknown (the forge failed and the re-read could not tell).
-- codes is a comma-separated list of refusal codes.
CREATE TABLE IF NOT EXISTS merge_attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    method TEXT NOT NULL,
    status TEXT NOT NULL,
    codes TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT '',
    started_at REAL NOT NULL,
    finished_at REAL
);

CREATE INDEX IF NOT EXISTS merge_attempts_by_pull ON merge_attempts (forge, repo, number, id);
