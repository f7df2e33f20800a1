-- Repositories the bot knows, one row per repository identity. repo is the canonical key
-- (lowercase OWNER/NAME) that every other table's repo column holds; display_name is the
-- spelling the forge last used in a signed webhook (shown in answers, never used for
-- lookups); forge_id is the forge's numeric repository id, which a rename or a transfer
-- keeps; updated_at is when the spelling or id last changed. signed says a signed webhook named it, which puts it in the reconcile sweep.
CREATE TABLE IF NOT EXISTS repositories (
    forge text NOT NULL,
    repo text NOT NULL,
    display_name text NOT NULL,
    forge_id bigint,
    signed bigint NOT NULL DEFAULT 0,
    first_seen double precision NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (forge, repo)
);
CREATE UNIQUE INDEX IF NOT EXISTS repositories_by_forge_id ON repositories (forge, forge_id);
-- The keys a renamed or transferred repository had before: each resolves to the current
-- key, so a caller naming the old name reaches the same rows, leases and records.
CREATE TABLE IF NOT EXISTS repository_aliases (
    forge text NOT NULL,
    old_repo text NOT NULL,
    repo text NOT NULL,
    renamed_at double precision NOT NULL,
    PRIMARY KEY (forge, old_repo)
);
