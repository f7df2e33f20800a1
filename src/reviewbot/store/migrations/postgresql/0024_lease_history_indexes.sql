-- lease_history_indexes: two of the history's indexes go (the SQLite migration of the same
-- number says why, and what finds a PR's rows instead).
DROP INDEX IF EXISTS lease_history_by_holder;
DROP INDEX IF EXISTS lease_history_by_pull;
