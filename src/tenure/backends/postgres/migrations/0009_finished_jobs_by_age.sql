-- Retention (the policy's keep_completed and keep_dead): the sweep finds a
-- queue's finished jobs of one state oldest first, reading only those it
-- deletes. Only finished jobs have an entry: a claim (queued -> active)
-- never writes one; a job's end writes one. Built in the upgrade's
-- transaction, which holds the table's lock meanwhile: about a second per
-- million finished jobs stored.
CREATE INDEX jobs_finished ON {schema}.jobs (queue, state, finished_at)
    WHERE state IN ('completed', 'cancelled', 'dead');
