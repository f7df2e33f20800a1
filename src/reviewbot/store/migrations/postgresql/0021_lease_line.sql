-- The line of workers waiting for a lease, and what a claim is for (the SQLite migration of
-- the same number says what each column holds). Times are seconds since the epoch.
CREATE TABLE IF NOT EXISTS lease_waiters (
    forge text NOT NULL,
    repo text NOT NULL,
    number bigint NOT NULL,
    role text NOT NULL CHECK (role IN ('reviewer', 'merger')),
    worker text NOT NULL,
    seq bigint NOT NULL,
    head_sha text NOT NULL,
    ttl_s double precision,
    joined_at double precision NOT NULL,
    seen_at double precision NOT NULL,
    target_branch text,
    target_sha text,
    session_id text,
    issue text,
    blocker text,
    PRIMARY KEY (forge, repo, number, role, worker)
);

CREATE UNIQUE INDEX IF NOT EXISTS lease_waiters_in_order ON lease_waiters (forge, repo, number, role, seq);
CREATE INDEX IF NOT EXISTS lease_waiters_by_worker ON lease_waiters (worker);

ALTER TABLE leases ADD COLUMN target_branch text;
ALTER TABLE leases ADD COLUMN target_sha text;
ALTER TABLE leases ADD COLUMN session_id text;
ALTER TABLE leases ADD COLUMN issue text;
ALTER TABLE leases ADD COLUMN blocker text;

ALTER TABLE lease_history ADD COLUMN target_branch text;
ALTER TABLE lease_history ADD COLUMN target_sha text;
ALTER TABLE lease_history ADD COLUMN session_id text;
ALTER TABLE lease_history ADD COLUMN issue text;
ALTER TABLE lease_history ADD COLUMN blocker text;
