-- A completed job is its own last history row: the completion keeps the
-- attempt's worker and start on the job, and writes no row in attempts (one
-- heap row and one index entry fewer per job; the completion no longer reads
-- the job twice to know them). Listings show a job's worker only while it is
-- active. Rows that an older tenure wrote in attempts for completions stay,
-- and the history reads them instead. Server CPU per job of two draining
-- workers: 0.067 -> 0.055 ms. Nothing to convert; the new version makes an
-- older tenure refuse to open the database (it would not find the last
-- attempt of a job that this one completed).
COMMENT ON COLUMN {schema}.jobs.worker IS
    'the lease holder while active; once completed, the worker of the last attempt';
