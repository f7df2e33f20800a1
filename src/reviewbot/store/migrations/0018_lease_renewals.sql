-- A lease renewal (a heartbeat, or an acquire by the holder) no longer appends a row to
-- lease_history: it sets renewed_at (and expires_at, the term it gave) on the row of the
-- grant it renews. Grants, takeovers, releases, expiries and supersessions stay one row
-- each, so one claim is a handful of rows however long it is held.
--
-- renewed_at is UNIX seconds (REAL), NULL until the first renewal. The 'renewed' rows
-- written before this migration stay as they are (no row is rewritten, so the upgrade needs
-- no snapshot) and age out with the rest.
ALTER TABLE lease_history ADD COLUMN renewed_at REAL;

-- Rows whose last activity is older than retention.lease_history_days are deleted, oldest
-- first, a bounded number at every grant: this index finds them without a scan.
CREATE INDEX IF NOT EXISTS lease_history_by_age ON lease_history (at);

-- A renewal finds its grant's row, and an end its claim's rows, by the claim itself.
CREATE INDEX IF NOT EXISTS lease_history_by_claim ON lease_history (forge, repo, number, role, epoch);
