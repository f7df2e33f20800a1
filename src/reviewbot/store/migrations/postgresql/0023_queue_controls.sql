-- queue_controls: the hand-set state of each merge queue (the SQLite migration of the same
-- number says what each column holds).
CREATE TABLE IF NOT EXISTS queue_controls (
    forge text NOT NULL,
    repo text NOT NULL,
    base text NOT NULL,
    paused bigint NOT NULL DEFAULT 0,
    draining bigint NOT NULL DEFAULT 0,
    set_by text NOT NULL,
    set_at double precision NOT NULL,
    epoch bigint NOT NULL,
    PRIMARY KEY (forge, repo, base)
);
