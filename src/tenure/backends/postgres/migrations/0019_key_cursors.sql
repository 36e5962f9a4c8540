-- Where the keyed walk of a queue whose claims do not lock its row (a
-- per-key limit only: see lock_keys in queries.sql) starts: after the key its
-- last claim served. Those claims share the queue's row (FOR SHARE), so they
-- cannot write queues.key_cursor; each writes this row if no other claim is
-- writing it, and never waits for it.
CREATE TABLE {schema}.key_cursors (
    queue  text PRIMARY KEY,
    cursor text COLLATE "C" NOT NULL
);
