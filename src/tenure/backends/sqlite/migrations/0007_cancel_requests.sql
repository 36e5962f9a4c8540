-- A job may be cancelled while active (docs/aborting.md): the cancel marks it
-- (cancel_requested), its worker learns it from its next heartbeat and stops
-- the attempt, and whatever ends the attempt but a completion puts the job in
-- 'cancelled'. An attempt its worker stopped so ends 'cancelled'.
ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;

-- SQLite cannot change a CHECK constraint: the history is copied into a table
-- that admits the new outcome, in the upgrade's transaction.
CREATE TABLE attempts_new (
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    fence      INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    worker     TEXT,
    started_at REAL NOT NULL,
    ended_at   REAL,
    outcome    TEXT CHECK (outcome IN
                 ('completed', 'error', 'crashed', 'stalled', 'timeout', 'released',
                  'cancelled')),
    error      TEXT,
    PRIMARY KEY (job_id, fence)
) WITHOUT ROWID;
INSERT INTO attempts_new (job_id, fence, attempt, worker, started_at, ended_at, outcome, error)
SELECT job_id, fence, attempt, worker, started_at, ended_at, outcome, error FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_new RENAME TO attempts;
