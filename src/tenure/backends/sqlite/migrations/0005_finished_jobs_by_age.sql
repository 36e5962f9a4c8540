-- Retention (the policy's keep_completed and keep_dead): the sweep finds a
-- queue's finished jobs of one state oldest first, reading only those it
-- deletes. Only finished jobs have an entry: a claim never writes one, a
-- job's end writes one (its entry in jobs_queue_state changes then anyway).
CREATE INDEX jobs_finished ON jobs (queue, state, finished_at)
    WHERE state IN ('completed', 'cancelled', 'dead');
