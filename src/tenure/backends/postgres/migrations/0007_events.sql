-- Lifecycle events (tenure.core.events), written by the statement of the
-- transition they record: a row per statement, kind and queue (a worker's
-- cycle completes and starts tens of jobs: a row each cost the cycle a tenth
-- more), its events in order. Ids from a sequence commit out of order, so a reader
-- orders events by (xid, id): the writing transaction, then the order within
-- it, and reads only those of transactions older than every one still running
-- (pg_snapshot_xmin): that part of the order is final, and resuming after any
-- (xid, id) misses nothing.
CREATE TABLE {schema}.events (
    xid    xid8 NOT NULL DEFAULT pg_current_xact_id(),
    id     bigint GENERATED ALWAYS AS IDENTITY,
    queue  text NOT NULL,
    kind   text NOT NULL,
    at     double precision NOT NULL DEFAULT extract(epoch FROM now())::float8,
    jobs   json NOT NULL,  -- each event's job id
    data   json,           -- each event's data (null: none); NULL: none has any
    PRIMARY KEY (xid, id)
);

-- Whether the queue records events (its policy's "events", default true), read
-- by the statements that write them.
ALTER TABLE {schema}.queues
    ADD COLUMN events boolean NOT NULL
    GENERATED ALWAYS AS (coalesce((policy->>'events')::boolean, true)) STORED;
