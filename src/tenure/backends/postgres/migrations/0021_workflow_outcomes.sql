-- Workflows ended, by outcome, since the database began (the counter
-- tenure_workflows_total): a record entering completed, failed or cancelled
-- is a row of workflow_ends, in the transaction that moves it; pruning it
-- takes nothing away, and a failed workflow that resumes (a DLQ retry) and
-- ends again counts again. Appended, not counted in place: one row per
-- outcome updated by every transaction that ends a workflow would serialize
-- them on it (and two statements ending two outcomes in opposite orders
-- would deadlock). A read folds the rows into workflow_outcomes
-- (queries.sql: workflow_outcomes).
CREATE TABLE {schema}.workflow_ends (outcome text NOT NULL);
CREATE TABLE {schema}.workflow_outcomes (
    outcome text PRIMARY KEY,
    n       bigint NOT NULL
);

CREATE FUNCTION {schema}.workflow_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.workflow_ends (outcome) VALUES (NEW.state);
    RETURN NULL;
END $$;

CREATE TRIGGER workflow_ended AFTER UPDATE OF state ON {schema}.workflows
FOR EACH ROW WHEN (NEW.state <> OLD.state AND NEW.state <> 'running')
EXECUTE FUNCTION {schema}.workflow_ended();
