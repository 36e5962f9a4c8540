-- A claim reads a queue's queued jobs through jobs_ready, in the order it
-- takes them, and its due scheduled jobs through jobs_scheduled. While
-- jobs_queue_state held queued and scheduled jobs too, a planner whose
-- statistics did not know of a backlog (a table not analyzed since it
-- filled: a new deployment, or a burst after quiet hours) estimated one
-- row, read every queued job of the queue through jobs_queue_state and
-- sorted them, at every claim: 40,000 queued jobs made a cycle 20-30 ms
-- (its sort spilled to disk) and halved a worker's drain until the next
-- ANALYZE. Only finished jobs have an entry there now; listings and counts
-- of queued and scheduled jobs read jobs_ready and jobs_scheduled. A claim
-- has one cheap path, whatever the statistics say, and an enqueue writes
-- one index entry less.
DROP INDEX {schema}.jobs_queue_state;
CREATE INDEX jobs_queue_state ON {schema}.jobs (queue, state, seq)
    WHERE state IN ('completed', 'cancelled', 'dead');
