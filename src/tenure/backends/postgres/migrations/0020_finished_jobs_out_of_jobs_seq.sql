-- A completion wrote four index entries (the primary key's, jobs_queue_state's,
-- jobs_finished's and jobs_seq's); jobs_seq now leaves finished jobs out, as
-- it does active ones (migration 5): listings read finished jobs through
-- jobs_queue_state, each queue's and state's newest first (list_jobs). Server
-- CPU per job of a worker's cycle -3% (benchmarks/cycle_turns.py). Built in
-- the upgrade's transaction, which holds the table's lock meanwhile: it reads
-- the whole table, about a second per million jobs stored.
DROP INDEX {schema}.jobs_seq;
CREATE INDEX jobs_seq ON {schema}.jobs (seq) WHERE state IN ('scheduled', 'queued', 'waiting');
