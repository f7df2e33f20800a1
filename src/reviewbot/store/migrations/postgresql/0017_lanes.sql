-- Named lanes (the SQLite migration of the same number says what each column holds): one
-- holder at a time across every replica, for a term, fenced by a token raised by each grant.
CREATE TABLE IF NOT EXISTS lanes (
    name text PRIMARY KEY,
    holder text NOT NULL,
    token bigint NOT NULL,
    acquired_at double precision NOT NULL,
    expires_at double precision NOT NULL
);
