-- reviewbot's own schema, part 1: the foundation.
--
-- Applied at start through the managed migration route, like every file in this folder
-- (in name order). Released files never change; a schema change is a new file.

-- Facts about this store itself (e.g. which reviewbot version created it), one row per key.
CREATE TABLE IF NOT EXISTS bot_meta (
    key text PRIMARY KEY,
    value text NOT NULL,
    updated_at text NOT NULL
);
