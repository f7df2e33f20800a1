-- What the bot did to a pull request's surroundings after merging it, one row per action
-- (docs/configuration.md: delete_head_branch_after_merge, close_linked_issues_after_merge):
-- kind is delete_head_branch or close_issue, target the branch name or "#N", result done,
-- skipped or failed, detail why (the forge's answer for a failure). head_sha is the merged
-- head; at is UNIX seconds (REAL). One row per (PR, kind, target): an action is tried once.
CREATE TABLE IF NOT EXISTS after_merge_actions (
    id INTEGER PRIMARY KEY,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    result TEXT NOT NULL,
    detail TEXT NOT NULL,
    at REAL NOT NULL,
    UNIQUE (forge, repo, number, kind, target)
);
