-- Attempts no longer reference their job through a foreign key: its check, a
-- key-share lock on the job row for each attempt a claim inserts, cost about
-- a quarter of the server's time per job in a draining worker's cycle. The
-- attempts are written only with their job (the cycle inserts them from the
-- rows it claims), and purge_dead deletes them with it.
ALTER TABLE {schema}.attempts DROP CONSTRAINT IF EXISTS attempts_job_id_fkey;
