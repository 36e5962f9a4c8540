-- Workflows (tenure.core.workflows): a job may be a workflow's step, in the new
-- state 'waiting' until the steps it waits for ended.
--
-- SQLite cannot change a CHECK constraint, so jobs is copied into a table that
-- admits 'waiting' (with the workflow's id, NULL for every other job), in the
-- upgrade's transaction. Dropping jobs would delete every attempt through the
-- foreign key's cascade (foreign keys are on, and cannot be turned off inside
-- a transaction): the history is kept aside first, and comes back once jobs is
-- the new table.
CREATE TABLE jobs_new (
    seq              INTEGER PRIMARY KEY,  -- insertion order: age, and the listing cursor
    id               TEXT NOT NULL UNIQUE,
    queue            TEXT NOT NULL,
    task             TEXT NOT NULL,
    args             TEXT NOT NULL,        -- JSON object
    state            TEXT NOT NULL CHECK (state IN
                       ('waiting', 'scheduled', 'queued', 'active', 'completed', 'dead',
                        'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    run_at           REAL NOT NULL,        -- waiting: the earliest it may run
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
    finished_at      REAL,
    started_at       REAL,
    recovered_from   REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    traceparent      TEXT,
    budget_from      INTEGER NOT NULL DEFAULT 0,
    workflow         TEXT                  -- a step's workflow (steps holds the rest); NULL: none
);
INSERT INTO jobs_new (seq, id, queue, task, args, state, priority, run_at, created_at, key,
                      attempts, stalls, max_attempts, timeout, fence, worker, lease_ttl,
                      lease_expires_at, result, error, dead_reason, progress, finished_at,
                      started_at, recovered_from, cancel_requested, traceparent, budget_from)
SELECT seq, id, queue, task, args, state, priority, run_at, created_at, key,
       attempts, stalls, max_attempts, timeout, fence, worker, lease_ttl,
       lease_expires_at, result, error, dead_reason, progress, finished_at,
       started_at, recovered_from, cancel_requested, traceparent, budget_from
FROM jobs;
CREATE TABLE attempts_kept AS SELECT * FROM attempts;
DROP TABLE attempts;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
CREATE TABLE attempts (
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    fence      INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    worker     TEXT,
    started_at REAL NOT NULL,
    ended_at   REAL,
    outcome    TEXT CHECK (outcome IN
                 ('completed', 'error', 'crashed', 'stalled', 'timeout', 'released',
                  'cancelled')),
    error      TEXT,
    PRIMARY KEY (job_id, fence)
) WITHOUT ROWID;
INSERT INTO attempts (job_id, fence, attempt, worker, started_at, ended_at, outcome, error)
SELECT job_id, fence, attempt, worker, started_at, ended_at, outcome, error FROM attempts_kept;
DROP TABLE attempts_kept;

-- The indexes of jobs, as migrations 1 and 5 made them.
CREATE UNIQUE INDEX jobs_key ON jobs (queue, key)
    WHERE key IS NOT NULL AND state IN ('scheduled', 'queued', 'active');
CREATE INDEX jobs_ready ON jobs (queue, priority DESC, run_at, seq) WHERE state = 'queued';
CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 'scheduled';
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'active';
CREATE INDEX jobs_worker ON jobs (worker) WHERE state = 'active';
CREATE INDEX jobs_queue_state ON jobs (queue, state, seq);
CREATE INDEX jobs_finished ON jobs (queue, state, finished_at)
    WHERE state IN ('completed', 'cancelled', 'dead');
-- A workflow's steps, in the order they were stored. A plain job has no entry.
CREATE INDEX jobs_workflow ON jobs (workflow, seq) WHERE workflow IS NOT NULL;

-- A workflow's record. Its sinks are edges to it (edges.dependent is its id),
-- counted as a step counts its own: pending (not done) and blocked (failed).
CREATE TABLE workflows (
    id          TEXT PRIMARY KEY,
    key         TEXT,
    state       TEXT NOT NULL CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),
    created_at  REAL NOT NULL,
    finished_at REAL,
    many        INTEGER NOT NULL,       -- its result is the list of its sinks'
    pending     INTEGER NOT NULL,
    blocked     INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
-- key=: a workflow with the key that is running is returned instead of a new one.
CREATE INDEX workflows_key ON workflows (key) WHERE key IS NOT NULL AND state = 'running';

-- What a step has that a plain job has not: the fan-in's counters (its edges
-- not done, and failed), how long it waits once released (its spec's delay),
-- why it was cancelled if not by hand, and its spawns (spawns: the last seq it
-- made; spawned_by, spawn_seq: which spawn made this one).
CREATE TABLE steps (
    job_id        TEXT PRIMARY KEY,
    may_fail      INTEGER NOT NULL DEFAULT 0,
    pending       INTEGER NOT NULL,
    blocked       INTEGER NOT NULL DEFAULT 0,
    delay         REAL NOT NULL DEFAULT 0,
    cancel_reason TEXT,
    spawns        INTEGER NOT NULL DEFAULT 0,
    spawned_by    TEXT,
    spawn_seq     INTEGER
) WITHOUT ROWID;
CREATE INDEX steps_spawned ON steps (spawned_by, spawn_seq) WHERE spawned_by IS NOT NULL;

-- An edge per (upstream step, dependent): a dependent's upstream is its edges
-- in ord order; a step's end moves its open edges (through edges_upstream).
CREATE TABLE edges (
    dependent TEXT NOT NULL,  -- a step's job id, or its workflow's id (a sink's edge)
    ord       TEXT NOT NULL,  -- tenure.core.workflows.edge_ord, spawn_ord
    upstream  TEXT NOT NULL,
    state     TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'done', 'failed')),
    PRIMARY KEY (dependent, ord)
) WITHOUT ROWID;
CREATE INDEX edges_upstream ON edges (upstream, state);

-- A step's rows go with it (prune, purge, a queue's deletion), and its
-- workflow's record with the last of its steps, once it ended.
CREATE TRIGGER steps_go_with_their_jobs AFTER DELETE ON jobs WHEN old.workflow IS NOT NULL
BEGIN
    DELETE FROM steps WHERE job_id = old.id;
    DELETE FROM edges WHERE upstream = old.id;
    DELETE FROM edges WHERE dependent = old.id;
    DELETE FROM workflows WHERE id = old.workflow AND state <> 'running'
        AND NOT EXISTS (SELECT 1 FROM jobs WHERE workflow = old.workflow);
END;
