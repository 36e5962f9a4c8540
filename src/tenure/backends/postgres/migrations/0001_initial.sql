-- tenure on PostgreSQL, schema version 1. {schema} is the configured schema,
-- quoted. Times are epoch seconds (double precision) from the server's clock.

CREATE TABLE {schema}.queues (
    name   text PRIMARY KEY,
    policy jsonb            -- QueuePolicy; NULL: the defaults
);

CREATE TABLE {schema}.jobs (
    id               text PRIMARY KEY,
    seq              bigint GENERATED ALWAYS AS IDENTITY,  -- insertion order; listing cursor
    queue            text NOT NULL,
    task             text NOT NULL,
    args             jsonb NOT NULL,
    state            text NOT NULL CHECK (state IN
                       ('scheduled', 'queued', 'active', 'completed', 'dead', 'cancelled')),
    priority         integer NOT NULL DEFAULT 0,
    run_at           double precision NOT NULL,
    created_at       double precision NOT NULL,
    key              text,
    attempts         integer NOT NULL DEFAULT 0,
    stalls           integer NOT NULL DEFAULT 0,
    max_attempts     integer,
    timeout          double precision,
    fence            bigint NOT NULL DEFAULT 0,
    worker           text,
    lease_ttl        double precision,  -- NULL while active: an at-most-once claim
    lease_expires_at double precision,
    result           jsonb,
    error            text,
    dead_reason      text,
    progress         jsonb,
    finished_at      double precision
);

CREATE UNIQUE INDEX jobs_key ON {schema}.jobs (queue, key)
    WHERE key IS NOT NULL AND state IN ('scheduled', 'queued', 'active');
CREATE INDEX jobs_ready ON {schema}.jobs (queue, priority DESC, run_at, seq)
    WHERE state = 'queued';
CREATE INDEX jobs_scheduled ON {schema}.jobs (queue, run_at) WHERE state = 'scheduled';
CREATE INDEX jobs_lease ON {schema}.jobs (lease_expires_at) WHERE state = 'active';
CREATE INDEX jobs_worker ON {schema}.jobs (worker) WHERE state = 'active';
CREATE INDEX jobs_queue_state ON {schema}.jobs (queue, state, seq);
CREATE INDEX jobs_seq ON {schema}.jobs (seq);

CREATE TABLE {schema}.attempts (
    job_id     text NOT NULL REFERENCES {schema}.jobs (id) ON DELETE CASCADE,
    fence      bigint NOT NULL,
    attempt    integer NOT NULL,
    worker     text,
    started_at double precision NOT NULL,
    ended_at   double precision,
    outcome    text CHECK (outcome IN
                 ('completed', 'error', 'crashed', 'stalled', 'timeout', 'released')),
    error      text,
    PRIMARY KEY (job_id, fence)
);

-- A worker proves it is alive by holding the session advisory lock
-- (namespace, lock_no) on a connection of its own for its whole life.
CREATE SEQUENCE {schema}.worker_locks AS integer;
CREATE TABLE {schema}.workers (
    id         text PRIMARY KEY,
    lock_no    integer NOT NULL,
    hostname   text NOT NULL,
    pid        integer NOT NULL,
    queues     jsonb NOT NULL,
    started_at double precision NOT NULL,
    last_seen  double precision NOT NULL
);

-- The fleet-wide sweep guard: the row is updated at most once per interval,
-- under pg_try_advisory_xact_lock.
CREATE TABLE {schema}.sweeps (
    id      integer PRIMARY KEY CHECK (id = 1),
    last_at double precision NOT NULL
);
INSERT INTO {schema}.sweeps (id, last_at) VALUES (1, 0);
