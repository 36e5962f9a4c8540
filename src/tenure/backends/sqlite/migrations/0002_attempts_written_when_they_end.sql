-- An attempt's history row is written once, when the attempt ends; while it
-- runs, its start is kept on the job (started_at), with its worker, fence and
-- number. The claim inserted the row and the end updated it: a statement per
-- job more than needed, in a cycle that is the worker's own CPU.
ALTER TABLE jobs ADD COLUMN started_at REAL;
UPDATE jobs SET started_at = (
    SELECT a.started_at FROM attempts AS a
    WHERE a.job_id = jobs.id AND a.fence = jobs.fence AND a.ended_at IS NULL
) WHERE state = 'active';
DELETE FROM attempts
WHERE ended_at IS NULL AND EXISTS (
    SELECT 1 FROM jobs AS j
    WHERE j.id = attempts.job_id AND j.fence = attempts.fence AND j.state = 'active'
);
