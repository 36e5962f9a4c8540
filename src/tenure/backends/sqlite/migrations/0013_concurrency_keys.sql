-- Concurrency keys (QueuePolicy's _per_key limits and fair turns; JobSpec's
-- concurrency_key, debounce and unique_for): a job's key and windows, the
-- indexes the claim reads a key's jobs by, a fair queue's cursor and each
-- key's rate bucket.
ALTER TABLE jobs ADD COLUMN concurrency_key TEXT;  -- NULL: none
ALTER TABLE jobs ADD COLUMN debounce REAL;         -- enqueued with debounce= (its seconds)
ALTER TABLE jobs ADD COLUMN unique_for REAL;       -- enqueued with unique_for= (its seconds)
-- The last key a fair queue's claims served ('': the jobs without a key;
-- NULL: none yet).
ALTER TABLE queues ADD COLUMN key_cursor TEXT;

-- A key's due jobs, in claim order, and its active ones: a claim reads a key's
-- next jobs and counts its places through them. Jobs without a key are in
-- neither: a queue without per-key fields pays nothing for them.
CREATE INDEX jobs_keyed_ready ON jobs (queue, concurrency_key, priority DESC, run_at, seq)
    WHERE state = 'queued' AND concurrency_key IS NOT NULL;
CREATE INDEX jobs_keyed_active ON jobs (queue, concurrency_key)
    WHERE state = 'active' AND concurrency_key IS NOT NULL;

-- key= stays idempotent while the first job is unfinished, but a debounced
-- job that started leaves its key to the next debounced one (the enqueue
-- looks both up, under the write lock).
DROP INDEX jobs_key;
CREATE UNIQUE INDEX jobs_key ON jobs (queue, key)
    WHERE key IS NOT NULL AND state IN ('scheduled', 'queued', 'active') AND debounce IS NULL;
CREATE INDEX jobs_key_debounced ON jobs (queue, key)
    WHERE key IS NOT NULL AND state IN ('scheduled', 'queued', 'active')
      AND debounce IS NOT NULL;
-- unique_for=: a key's jobs that finished, newest last.
CREATE INDEX jobs_key_finished ON jobs (queue, key, finished_at)
    WHERE key IS NOT NULL AND finished_at IS NOT NULL;

-- Each key's rate bucket (tenure.core.limits), written by the claims that
-- take from it. None stored: a full bucket.
CREATE TABLE key_buckets (
    queue  TEXT NOT NULL,
    key    TEXT NOT NULL,
    tokens REAL NOT NULL,
    at     REAL NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
