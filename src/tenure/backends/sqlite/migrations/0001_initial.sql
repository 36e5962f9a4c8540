-- tenure on SQLite, schema version 1.
-- Times are epoch seconds (REAL) from the clock of the machine that holds the file.

CREATE TABLE queues (
    name   TEXT PRIMARY KEY,
    policy TEXT            -- JSON QueuePolicy; NULL: the defaults
) WITHOUT ROWID;

CREATE TABLE jobs (
    seq              INTEGER PRIMARY KEY,  -- insertion order: age, and the listing cursor
    id               TEXT NOT NULL UNIQUE,
    queue            TEXT NOT NULL,
    task             TEXT NOT NULL,
    args             TEXT NOT NULL,        -- JSON object
    state            TEXT NOT NULL CHECK (state IN
                       ('scheduled', 'queued', 'active', 'completed', 'dead', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    run_at           REAL NOT NULL,
    created_at       REAL NOT NULL,
    key              TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    stalls           INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER,              -- NULL: the queue's policy
    timeout          REAL,                 -- NULL: the queue's policy
    fence            INTEGER NOT NULL DEFAULT 0,
    worker           TEXT,                 -- lease holder while active
    lease_ttl        REAL,                 -- NULL while active: an at-most-once claim
    lease_expires_at REAL,
    result           TEXT,
    error            TEXT,
    dead_reason      TEXT,
    progress         TEXT,
    finished_at      REAL
);

-- key= is idempotent while the first job is unfinished.
CREATE UNIQUE INDEX jobs_key ON jobs (queue, key)
    WHERE key IS NOT NULL AND state IN ('scheduled', 'queued', 'active');
-- claim: due jobs, higher priority first, then older.
CREATE INDEX jobs_ready ON jobs (queue, priority DESC, run_at, seq) WHERE state = 'queued';
-- promotion of scheduled jobs that became due.
CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 'scheduled';
-- rescue: expired leases, and leases of dead workers.
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'active';
CREATE INDEX jobs_worker ON jobs (worker) WHERE state = 'active';
-- counts and listings.
CREATE INDEX jobs_queue_state ON jobs (queue, state, seq);

CREATE TABLE attempts (
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    fence      INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    worker     TEXT,
    started_at REAL NOT NULL,
    ended_at   REAL,
    outcome    TEXT CHECK (outcome IN
                 ('completed', 'error', 'crashed', 'stalled', 'timeout', 'released')),
    error      TEXT,
    PRIMARY KEY (job_id, fence)
) WITHOUT ROWID;

CREATE TABLE workers (
    id         TEXT PRIMARY KEY,
    hostname   TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    queues     TEXT NOT NULL,  -- JSON array
    started_at REAL NOT NULL,
    last_seen  REAL NOT NULL
) WITHOUT ROWID;

-- The fleet-wide sweep guard: one sweep per interval, taken under BEGIN IMMEDIATE.
CREATE TABLE sweeps (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    last_at REAL NOT NULL
);
INSERT INTO sweeps (id, last_at) VALUES (1, 0);
