-- Named lanes: work that one process at a time may do across every process on the store
-- (the merges into one base branch, the reconcile sweep of one repository). A row is a
-- lease: holder (a process), token (raised by every grant, never lowered: it fences a
-- holder that was taken over), acquired_at and expires_at (seconds since the epoch). A
-- released lane keeps its row with expires_at 0, so the next grant's token is still higher.
CREATE TABLE IF NOT EXISTS lanes (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token INTEGER NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
