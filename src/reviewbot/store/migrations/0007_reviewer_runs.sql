-- Findings of the external reviewers of a PR head, kept so that they run at most once per
-- (PR, head, round): a later evaluation of the same head (a check finishing, a label) reuses
-- them instead of running every reviewer again, and a review posted then still carries them.
-- round is the outbox's round (it grows when a human dismisses the bot's review at the head).
-- Only runs in which every reviewer succeeded are kept; a failed run is retried by the next
-- evaluation of the head. findings: JSON list of {"path", "line", "message", "severity",
-- "source"}, printed on stdout or recorded with record_finding.
CREATE TABLE IF NOT EXISTS review_reviewer_runs (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    round INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    findings TEXT NOT NULL DEFAULT '[]',
    ran_at TEXT NOT NULL,
    PRIMARY KEY (forge, repo, number, head_sha, round)
);
