-- Lease renewals set renewed_at on the grant's row instead of appending a row (the SQLite
-- migration of the same number says why); old rows age out by the retention setting.
ALTER TABLE lease_history ADD COLUMN renewed_at double precision;

CREATE INDEX IF NOT EXISTS lease_history_by_age ON lease_history (at);

CREATE INDEX IF NOT EXISTS lease_history_by_claim ON lease_history (forge, repo, number, role, epoch);
