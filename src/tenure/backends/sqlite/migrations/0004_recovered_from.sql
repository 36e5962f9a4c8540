-- When the sweeper recovers an attempt, the moment its lease was last proven
-- (the worker's last heartbeat or the lease's last renewal), kept on the job
-- until its next attempt ends: the claim that starts it again returns it, and
-- its worker observes the recovery's latency. A column of the row the claim
-- reads anyway: no statement, no index more.
ALTER TABLE jobs ADD COLUMN recovered_from REAL;
