-- Leases with fencing epochs, and the worker identities that hold them.
--
-- Times are UNIX seconds (REAL) from one clock: the bot's. The rules live in
-- reviewbot.core.leases; reviewbot.store.leases runs each operation in one BEGIN IMMEDIATE
-- transaction.

-- Registered worker identities (NAME-YYYYMMDDTHHMMSSZ-SHA). Identities are unique; names,
-- clients and roles are not. Liveness is heartbeat freshness only.
CREATE TABLE IF NOT EXISTS workers (
    identity TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    client TEXT NOT NULL,
    session_id TEXT NOT NULL,
    role TEXT NOT NULL,
    registered_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL
);

-- The current lease of each target (forge, repo, PR, role); history is not kept here.
-- phase: claimed, released, expired, superseded. A claimed row past expires_at is expired.
-- writes counts the guarded writes made under this epoch.
CREATE TABLE IF NOT EXISTS leases (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('reviewer', 'merger')),
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL CHECK (epoch > 0),
    head_sha TEXT NOT NULL,
    phase TEXT NOT NULL CHECK (phase IN ('claimed', 'released', 'expired', 'superseded')),
    ttl_s REAL NOT NULL,
    acquired_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    writes INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (forge, repo, number, role)
);

CREATE INDEX IF NOT EXISTS leases_by_holder ON leases (holder);

-- The highest epoch ever granted per target. It outlives deleted lease rows. A restore of an
-- older backup lowers it too, so the store keeps a second copy in a file beside the
-- database and grants max(both) + 1.
CREATE TABLE IF NOT EXISTS lease_epochs (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    role TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    PRIMARY KEY (forge, repo, number, role)
);
