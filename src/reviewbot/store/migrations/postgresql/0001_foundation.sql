-- reviewbot's own schema, part 1: the foundation.
--
-- Applied at start through the managed migration route, like every file in this folder
-- (in name order). Released files never change; a schema change is a new file.
--
-- This folder is the same schema in PostgreSQL's types, under the same file names. Every
-- moment is double precision seconds since the epoch from the start (SQLite got there with
-- 0013_timestamps_real, which therefore has no PostgreSQL counterpart).

-- Facts about this store itself (e.g. which reviewbot version created it), one row per key.
CREATE TABLE IF NOT EXISTS bot_meta (
    key text PRIMARY KEY,
    value text NOT NULL,
    updated_at double precision NOT NULL
);
