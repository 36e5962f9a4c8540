-- Periodic jobs (tenure.core.schedules): the last tick of each schedule that a
-- job was made for. A tick's job is inserted only in the transaction that
-- moves its schedule's tick forward (advance_tick), so that however many
-- workers tick, each tick makes one job.
CREATE TABLE schedules (
    queue  TEXT NOT NULL,
    name   TEXT NOT NULL,
    tick   REAL NOT NULL,  -- seconds since the epoch
    job_id TEXT NOT NULL,  -- the tick's job
    PRIMARY KEY (queue, name)
) WITHOUT ROWID;
