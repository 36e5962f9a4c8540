-- An events row of a large enqueue holds a thousand job ids and as many
-- data objects: tens of kilobytes, which PostgreSQL compressed (pglz) on the
-- way into TOAST, in the enqueuing transaction. Rows live only until the
-- events are trimmed: stored as they are, an enqueue spends no time
-- compressing them (a catalog change, no rewrite).
ALTER TABLE {schema}.events
    ALTER COLUMN jobs SET STORAGE EXTERNAL,
    ALTER COLUMN data SET STORAGE EXTERNAL;
