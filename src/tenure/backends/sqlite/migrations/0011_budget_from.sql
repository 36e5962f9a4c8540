-- A job retried from the DLQ keeps counting its attempts; its budget counts
-- from the attempts it had made then (Job.budget_from).
ALTER TABLE jobs ADD COLUMN budget_from INTEGER NOT NULL DEFAULT 0;
