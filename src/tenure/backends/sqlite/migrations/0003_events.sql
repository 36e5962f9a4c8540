-- Lifecycle events (tenure.core.events), written in the transaction of the
-- transition they record. A row holds the events of one kind, queue and
-- statement (a worker's cycle completes and starts tens of jobs: a row each
-- would cost the cycle a fifth more); its events are numbered id - n + 1 ..
-- id, in order. One writer at a time (the write lock): numbers commit in
-- order. Retention never deletes the newest row, so numbers never go back.
CREATE TABLE events (
    id    INTEGER PRIMARY KEY,  -- the number of the row's last event
    n     INTEGER NOT NULL,     -- how many events the row holds
    queue TEXT NOT NULL,
    kind  TEXT NOT NULL,
    at    REAL NOT NULL,
    jobs  TEXT NOT NULL,        -- JSON array: each event's job id
    data  TEXT                  -- JSON array: each event's data (null: none); NULL: none has any
);

-- Whether the queue records events (its policy's "events", default true), read
-- by the statements that write them.
ALTER TABLE queues ADD COLUMN events INTEGER
    GENERATED ALWAYS AS (coalesce(policy ->> '$.events', 1)) VIRTUAL;
