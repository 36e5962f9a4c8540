-- A row of events holds a transaction's events of one queue, of any kinds (a
-- worker's cycle: its completions, then its claims), not one row per kind:
-- each row written is one more page in the transaction's commit. kinds: a JSON
-- array of [kind, count] runs, in the events' order; NULL (every row written
-- before): all of the row's events are of its kind.
ALTER TABLE events ADD COLUMN kinds TEXT;
