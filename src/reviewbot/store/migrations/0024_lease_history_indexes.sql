-- lease_history_indexes: two of the history's five B-trees go. Every grant and every end of
-- a claim appends a row, and each index is one more page in the write-ahead log of that
-- commit (an acquire wrote 9.6 pages, a release 8.5): more to copy back at each checkpoint,
-- which is what the slowest acquires waited on. by_holder was read by no query; a PR's rows
-- are found through by_claim (forge, repo, number, ...) and sorted, a few per PR.
DROP INDEX IF EXISTS lease_history_by_holder;
DROP INDEX IF EXISTS lease_history_by_pull;
