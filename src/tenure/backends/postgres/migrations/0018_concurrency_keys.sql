-- Concurrency keys (issue 39). The columns are nullable without a default:
-- adding them rewrites nothing, and a job without a key stores none. Keys are
-- compared in byte order (COLLATE "C"): a claim walks a queue's keys in that
-- order, and jobs without a key sort as E'\x01', before any key (a key has no
-- control characters).
ALTER TABLE {schema}.jobs
    ADD COLUMN concurrency_key text COLLATE "C",
    ADD COLUMN debounce double precision,
    ADD COLUMN unique_for double precision;
-- The key the last claim of a fair queue served: the next one starts after it.
ALTER TABLE {schema}.queues ADD COLUMN key_cursor text COLLATE "C";

-- A keyed claim walks the distinct keys of a queue's queued jobs (an index
-- seek per key) and takes each key's best jobs; only jobs with a key have an
-- entry, so a queue without keys writes nothing more.
CREATE INDEX jobs_key_ready ON {schema}.jobs
    (queue, concurrency_key, priority DESC, run_at, seq)
    WHERE state = 'queued' AND concurrency_key IS NOT NULL;
-- A key's active jobs, counted by a claim against max_active_per_key.
CREATE INDEX jobs_key_active ON {schema}.jobs (queue, concurrency_key)
    WHERE state = 'active' AND concurrency_key IS NOT NULL;
-- A job finished within its unique_for window, found by its key= at enqueue.
CREATE INDEX jobs_key_finished ON {schema}.jobs (queue, key, finished_at)
    WHERE unique_for IS NOT NULL AND state IN ('completed', 'cancelled', 'dead');

-- A debounced job that started no longer holds its key=: an enqueue with the
-- key makes a new job (debounced in turn) while it runs.
CREATE UNIQUE INDEX jobs_key_held ON {schema}.jobs (queue, key)
    WHERE key IS NOT NULL AND state IN ('scheduled', 'queued', 'active')
      AND (state <> 'active' OR debounce IS NULL);
DROP INDEX {schema}.jobs_key;
ALTER INDEX {schema}.jobs_key_held RENAME TO jobs_key;

-- The token bucket of each key of a queue with rate_limit_per_key (one never
-- stored is full), as queues.rate_tokens is the queue's.
CREATE TABLE {schema}.key_buckets (
    queue  text NOT NULL,
    key    text COLLATE "C" NOT NULL,
    tokens double precision NOT NULL,
    at     double precision NOT NULL,
    PRIMARY KEY (queue, key)
);
