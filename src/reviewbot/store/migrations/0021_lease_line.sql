-- The line of workers waiting for a lease (reviewbot.core.lease_line): first come, first
-- served per target. A worker joins by acquiring with wait_s; when the target is free it is
-- granted to the first live waiter, whose row is then deleted in the same transaction. seq
-- is the arrival order within the target, handed out under the target's lock. seen_at is
-- the waiter's last acquire (UNIX seconds); a waiter whose seen_at and worker heartbeat are
-- both older than leases.line_ttl_s has left the line. head_sha, ttl_s and the details are
-- what the grant will give it.
CREATE TABLE IF NOT EXISTS lease_waiters (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('reviewer', 'merger')),
    worker TEXT NOT NULL,
    seq INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    ttl_s REAL,
    joined_at REAL NOT NULL,
    seen_at REAL NOT NULL,
    target_branch TEXT,
    target_sha TEXT,
    session_id TEXT,
    issue TEXT,
    blocker TEXT,
    PRIMARY KEY (forge, repo, number, role, worker)
);

CREATE UNIQUE INDEX IF NOT EXISTS lease_waiters_in_order ON lease_waiters (forge, repo, number, role, seq);
CREATE INDEX IF NOT EXISTS lease_waiters_by_worker ON lease_waiters (worker);

-- What a claim is for, as its holder declared it on acquire (all optional): the branch its
-- work targets and that branch's commit, the holder's session, the issue and the blocker.
-- The lease keeps them while it lives; the history row of its grant keeps them after.
ALTER TABLE leases ADD COLUMN target_branch TEXT;
ALTER TABLE leases ADD COLUMN target_sha TEXT;
ALTER TABLE leases ADD COLUMN session_id TEXT;
ALTER TABLE leases ADD COLUMN issue TEXT;
ALTER TABLE leases ADD COLUMN blocker TEXT;

ALTER TABLE lease_history ADD COLUMN target_branch TEXT;
ALTER TABLE lease_history ADD COLUMN target_sha TEXT;
ALTER TABLE lease_history ADD COLUMN session_id TEXT;
ALTER TABLE lease_history ADD COLUMN issue TEXT;
ALTER TABLE lease_history ADD COLUMN blocker TEXT;
