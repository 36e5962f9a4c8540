-- A job retried from the DLQ keeps counting its attempts; its budget counts
-- from the attempts it had made then (Job.budget_from). A constant default:
-- no table rewrite.
ALTER TABLE {schema}.jobs ADD COLUMN budget_from integer NOT NULL DEFAULT 0;
