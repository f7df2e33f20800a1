-- Leases with fencing epochs, and the worker identities that hold them.
--
-- Times are UNIX seconds (double precision) from one clock: the bot's. The rules live in
-- reviewbot.core.leases; reviewbot.store.leases runs each operation in one transaction.

-- Registered worker identities (NAME-YYYYMMDDTHHMMSSZ-SHA). Identities are unique; names,
-- clients and roles are not. Liveness is heartbeat freshness only.
CREATE TABLE IF NOT EXISTS workers (
    identity text PRIMARY KEY,
    name text NOT NULL,
    client text NOT NULL,
    session_id text NOT NULL,
    role text NOT NULL,
    registered_at double precision NOT NULL,
    heartbeat_at double precision NOT NULL
);

-- The current lease of each target (forge, repo, PR, role); history is not kept here.
-- phase: claimed, released, expired, superseded. A claimed row past expires_at is expired.
-- writes counts the guarded writes made under this epoch.
CREATE TABLE IF NOT EXISTS leases (
    forge text NOT NULL,
    repo text NOT NULL,
    number bigint NOT NULL,
    role text NOT NULL CHECK (role IN ('reviewer', 'merger')),
    holder text NOT NULL,
    epoch bigint NOT NULL CHECK (epoch > 0),
    head_sha text NOT NULL,
    phase text NOT NULL CHECK (phase IN ('claimed', 'released', 'expired', 'superseded')),
    ttl_s double precision NOT NULL,
    acquired_at double precision NOT NULL,
    heartbeat_at double precision NOT NULL,
    expires_at double precision NOT NULL,
    writes bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (forge, repo, number, role)
);

CREATE INDEX IF NOT EXISTS leases_by_holder ON leases (holder);

-- The highest epoch ever granted per target. It outlives deleted lease rows. A restore of an
-- older backup lowers it too (see docs/scaling.md on restoring a PostgreSQL store).
CREATE TABLE IF NOT EXISTS lease_epochs (
    forge text NOT NULL,
    repo text NOT NULL,
    number bigint NOT NULL,
    role text NOT NULL,
    epoch bigint NOT NULL,
    PRIMARY KEY (forge, repo, number, role)
);
