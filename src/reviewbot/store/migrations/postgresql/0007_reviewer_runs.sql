-- Findings of the external reviewers of a PR head, kept so that they run at most once per
-- (PR, head, round): a later evaluation of the same head (a check finishing, a label) reuses
-- them instead of running every reviewer again, and a review posted then still carries them.
-- round is the outbox's round (it grows when a human dismisses the bot's review at the head).
-- Only runs in which every reviewer succeeded are kept; a failed run is retried by the next
-- evaluation of the head. findings: JSON list of {"path", "line", "message", "severity",
-- "source"}, printed on stdout or recorded with record_finding.
CREATE TABLE IF NOT EXISTS review_reviewer_runs (
    forge text NOT NULL,
    repo text NOT NULL,
    number bigint NOT NULL,
    head_sha text NOT NULL,
    round bigint NOT NULL,
    run_id text NOT NULL,
    findings text NOT NULL DEFAULT '[]',
    ran_at double precision NOT NULL,
    PRIMARY KEY (forge, repo, number, head_sha, round)
);
