-- Workflows ended, by outcome, since the database began (the counter
-- tenure_workflows_total): a record entering completed, failed or cancelled
-- counts once, in the statement that moves it; pruning it takes nothing
-- away, and a failed workflow that resumes (a DLQ retry) and ends again
-- counts again. One writer at a time here: the rows are no contention.
CREATE TABLE workflow_outcomes (
    outcome TEXT PRIMARY KEY,
    n       INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER workflow_ended AFTER UPDATE OF state ON workflows
WHEN new.state <> old.state AND new.state <> 'running'
BEGIN
    INSERT INTO workflow_outcomes (outcome, n) VALUES (new.state, 1)
    ON CONFLICT (outcome) DO UPDATE SET n = n + 1;
END;
