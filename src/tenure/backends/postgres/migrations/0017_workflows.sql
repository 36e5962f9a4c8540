-- Workflows (tenure.core.workflows): a step is a job with `workflow` set; the
-- columns are nullable without a default, so adding them rewrites nothing and
-- a plain job stores none of them. A step that waits counts its edges not
-- done (`pending`) and failed (`blocked`): the fan-in is a counter. Its
-- spec's delay (`release_delay`) counts from its release; its run_at, until
-- then, is the spec's, or its enqueue's time. The wider check is NOT VALID:
-- every stored row passed the narrower one, so none is scanned.
ALTER TABLE {schema}.jobs
    ADD COLUMN workflow text,
    ADD COLUMN may_fail boolean,
    ADD COLUMN cancel_reason text,
    ADD COLUMN pending integer,
    ADD COLUMN blocked integer,
    ADD COLUMN release_delay double precision;
ALTER TABLE {schema}.jobs DROP CONSTRAINT IF EXISTS jobs_state_check;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_state_check CHECK (state IN
    ('waiting', 'scheduled', 'queued', 'active', 'completed', 'dead', 'cancelled')) NOT VALID;

-- A workflow's steps, in the order they were written (plain jobs have no entry).
CREATE INDEX jobs_workflow ON {schema}.jobs (workflow, seq) WHERE workflow IS NOT NULL;
-- Counts and listings of a queue's waiting steps.
CREATE INDEX jobs_waiting ON {schema}.jobs (queue, seq) WHERE state = 'waiting';

-- The workflow's record; it is the dependent of its sinks' edges, counted as
-- a step counts its own.
CREATE TABLE {schema}.workflows (
    id          text PRIMARY KEY,
    key         text,
    state       text NOT NULL CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),
    created_at  double precision NOT NULL,
    finished_at double precision,
    many        boolean NOT NULL,
    pending     integer NOT NULL,
    blocked     integer NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX workflows_key ON {schema}.workflows (key)
    WHERE key IS NOT NULL AND state = 'running';

-- An edge from a step to a step that waits for it, or to its workflow (a
-- sink's); a dependent's upstream is its edges in `ord` order (byte order:
-- the keys are digits and dots, see core.workflows.edge_ord).
CREATE TABLE {schema}.edges (
    upstream  text NOT NULL,
    dependent text NOT NULL,
    ord       text COLLATE "C" NOT NULL,
    state     text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'done', 'failed')),
    PRIMARY KEY (upstream, dependent)
);
CREATE INDEX edges_dependent ON {schema}.edges (dependent, ord);

-- The spawns a step made (Backend.spawn), by its own numbering: a spawn made
-- again (its handler ran again) returns these jobs.
CREATE TABLE {schema}.spawns (
    spawner text NOT NULL,
    seq     integer NOT NULL,
    jobs    text[] NOT NULL,
    PRIMARY KEY (spawner, seq)
);
