-- An attempt's history row is written once, when the attempt ends; while it
-- runs, its start is kept on the job (started_at), with its worker, fence and
-- number. The claim inserted the row and the end updated it: two writes per
-- job where one does, and the update's generic plan, made while attempts was
-- nearly empty, scanned the whole table each cycle.
ALTER TABLE {schema}.jobs ADD COLUMN started_at double precision;
UPDATE {schema}.jobs AS j SET started_at = a.started_at
FROM {schema}.attempts AS a
WHERE j.state = 'active' AND a.job_id = j.id AND a.fence = j.fence AND a.ended_at IS NULL;
DELETE FROM {schema}.attempts AS a USING {schema}.jobs AS j
WHERE j.state = 'active' AND a.job_id = j.id AND a.fence = j.fence AND a.ended_at IS NULL;
