-- Concurrency keys (QueuePolicy's _per_key limits and fair turns; JobSpec's
-- concurrency_key, debounce and unique_for): a job's key and windows, the
-- indexes the claim reads a key's jobs by, a fair queue's cursor and each
-- key's rate bucket.
ALTER TABLE jobs ADD COLUMN concurrency_key TEXT;  -- NULL: none
ALTER TABLE jobs ADD COLUMN debounce REAL;         -- enqueued with debounce= (its seconds)
ALTER TABLE jobs ADD COLUMN unique_for REAL;       -- enqueued with unique_for= (its seconds)
-- The last key served by claims that took turns across keys (a fair queue's,
-- or one whose held keys filled a claim's window); '': the jobs without a
-- key; NULL: none yet.
ALTER TABLE queues ADD COLUMN key_cursor TEXT;
-- Whether its policy is keyed (QueuePolicy.keyed): its jobs without a key
-- are stored under '' (the insert reads it, not the policy's JSON).
ALTER TABLE queues ADD COLUMN keyed INTEGER NOT NULL DEFAULT 0;

-- A keyed job's state while queued or active (NULL else): a statement that
-- names one value reads that value's rows of jobs_keyed (with "state IN
-- ('queued', 'active')" in its predicate, the planner read both, and a key's
-- active jobs were counted through all its queued ones).
ALTER TABLE jobs ADD COLUMN key_state TEXT GENERATED ALWAYS AS (
    CASE WHEN concurrency_key IS NOT NULL AND state IN ('queued', 'active') THEN state END
) VIRTUAL;
-- A key's due jobs in claim order, and its active ones: a claim reads a key's
-- next jobs and counts its places through it. Jobs without a key are not in
-- it (nor in jobs_by_key): a queue without per-key fields pays for neither
-- but a false predicate per change of a job's state (one index, not one per
-- use: each index on state costs every claim and completion that much).
CREATE INDEX jobs_keyed ON jobs (queue, concurrency_key, key_state, priority DESC, run_at, seq)
    WHERE key_state IS NOT NULL;

-- key= stays idempotent while the first job is unfinished, but a debounced
-- job that started leaves its key to the next debounced one (the enqueue
-- looks them up through jobs_by_key, under the write lock).
DROP INDEX jobs_key;
CREATE UNIQUE INDEX jobs_key ON jobs (queue, key)
    WHERE key IS NOT NULL AND state IN ('scheduled', 'queued', 'active') AND debounce IS NULL;
-- A key's jobs, unfinished first (finished_at NULL), then by when they
-- finished: debounce= and unique_for= look them up. Its predicate does not
-- name state: a claim does not touch it.
CREATE INDEX jobs_by_key ON jobs (queue, key, finished_at) WHERE key IS NOT NULL;

-- Each key's rate bucket (tenure.core.limits), written by the claims that
-- take from it. None stored: a full bucket.
CREATE TABLE key_buckets (
    queue  TEXT NOT NULL,
    key    TEXT NOT NULL,
    tokens REAL NOT NULL,
    at     REAL NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
