-- A job may be cancelled while active (docs/aborting.md): the cancel marks it
-- (cancel_requested), its worker learns it from its next heartbeat and stops
-- the attempt, and whatever ends the attempt but a completion puts the job in
-- 'cancelled'. An attempt its worker stopped so ends 'cancelled'. A column with
-- a constant default is added without rewriting the table; the wider check is
-- NOT VALID: every stored row passed the narrower one, so none is scanned.
ALTER TABLE {schema}.jobs ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
ALTER TABLE {schema}.attempts DROP CONSTRAINT IF EXISTS attempts_outcome_check;
ALTER TABLE {schema}.attempts ADD CONSTRAINT attempts_outcome_check CHECK (outcome IN
    ('completed', 'error', 'crashed', 'stalled', 'timeout', 'released', 'cancelled')) NOT VALID;
