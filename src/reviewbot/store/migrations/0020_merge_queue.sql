-- The merge queue of each (forge, repository, base branch). Every write is fenced by the
-- branch's merge lane (migration 0017, lane 'merge:<forge>:<repo>:<base>'): epoch is the
-- lane token the writer held. Times are UNIX seconds (REAL); lists are JSON arrays.
--
-- queue_entries: one row per admission. head_sha is the head pinned at admission, keys the
-- areas its changed paths touch, train the train it rides in. state is queued, merged, left
-- or ejected; reason the reason code it ended with; strikes the times it was retried as a
-- suspected flake. A PR has at most one queued entry per repository.
CREATE TABLE IF NOT EXISTS queue_entries (
    id INTEGER PRIMARY KEY,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    base TEXT NOT NULL,
    number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    keys TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    reason TEXT,
    strikes INTEGER NOT NULL DEFAULT 0,
    train TEXT NOT NULL,
    enqueued_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    epoch INTEGER NOT NULL
);

CREATE UNIQUE INDEX IF NOT EXISTS queue_entries_live ON queue_entries (forge, repo, number)
    WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS queue_entries_by_base ON queue_entries (forge, repo, base, state);

-- queue_cars: one row per car. car is the car's number inside its train, batch and ahead the
-- PR numbers it adds and sits on, split_of the car whose batch it halves. branch is the queue
-- branch it is pushed to, base_sha the base it was built on, tested_sha the commit CI tests
-- (and the base lands on). status: building, testing, green, failed, timed_out, cancelled,
-- landed or passed (a half of a failed batch that passed; it never lands); check_name and
-- check_url name a failing check.
CREATE TABLE IF NOT EXISTS queue_cars (
    id INTEGER PRIMARY KEY,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    base TEXT NOT NULL,
    train TEXT NOT NULL,
    car INTEGER NOT NULL,
    batch TEXT NOT NULL,
    ahead TEXT NOT NULL,
    split_of INTEGER,
    branch TEXT NOT NULL,
    base_sha TEXT,
    tested_sha TEXT,
    status TEXT NOT NULL,
    check_name TEXT,
    check_url TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    epoch INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS queue_cars_by_train ON queue_cars (forge, repo, base, train, car);
CREATE INDEX IF NOT EXISTS queue_cars_by_status ON queue_cars (forge, repo, base, status);

-- queue_trains: the state of each train's machine (core.queue_train.TrainState as JSON) and
-- the keys it covers, written with the cars it changes, so a restarted replica resumes it.
CREATE TABLE IF NOT EXISTS queue_trains (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    base TEXT NOT NULL,
    train TEXT NOT NULL,
    keys TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL,
    epoch INTEGER NOT NULL,
    PRIMARY KEY (forge, repo, base, train)
);

-- queue_events: the append-only log. number is the PR (NULL for an event of a car alone),
-- car the queue_cars row, kind what happened (enqueued, left, car_built, car_passed,
-- car_failed, car_timed_out, car_cancelled, ejected, landed), code its reason code, sha the
-- commit it concerns (landed: the merged SHA, equal to the tested SHA), evidence a JSON
-- object (the failing check and its link, the car's composition).
CREATE TABLE IF NOT EXISTS queue_events (
    id INTEGER PRIMARY KEY,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    base TEXT NOT NULL,
    number INTEGER,
    car INTEGER,
    kind TEXT NOT NULL,
    code TEXT,
    detail TEXT NOT NULL,
    sha TEXT,
    evidence TEXT,
    epoch INTEGER NOT NULL,
    at REAL NOT NULL
);

CREATE INDEX IF NOT EXISTS queue_events_by_pull ON queue_events (forge, repo, number, id);
CREATE INDEX IF NOT EXISTS queue_events_by_base ON queue_events (forge, repo, base, id);
