-- Lifecycle events (tenure.core.events), written in the transaction of the
-- transition they record. AUTOINCREMENT: an id is never used twice, even
-- after retention deleted every row, so a reader's cursor stays valid; one
-- writer at a time (the write lock) makes ids commit in order.
CREATE TABLE events (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    queue  TEXT NOT NULL,
    kind   TEXT NOT NULL,
    job_id TEXT NOT NULL,
    at     REAL NOT NULL,
    data   TEXT            -- JSON object; NULL: no data
);

-- Whether the queue records events (its policy's "events", default true), read
-- by the statements that write them.
ALTER TABLE queues ADD COLUMN events INTEGER
    GENERATED ALWAYS AS (coalesce(policy ->> '$.events', 1)) VIRTUAL;
