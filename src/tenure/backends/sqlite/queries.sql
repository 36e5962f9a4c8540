-- Named queries of the SQLite backend. Every transition runs inside
-- BEGIN IMMEDIATE, so a query sees and writes under the database's write lock.

-- name: job_columns
id, task, queue, args, state, priority, run_at, created_at, attempts, stalls,
max_attempts, timeout, fence, key, worker, lease_expires_at, result, error,
dead_reason, progress, finished_at, traceparent, cancel_requested, recovered_from,
budget_from, concurrency_key

-- name: ensure_queue
INSERT OR IGNORE INTO queues (name, policy) VALUES (?, NULL)

-- name: find_unfinished_by_key
-- Each with its seq, through jobs_by_key (an unfinished job has no finished_at).
SELECT {job_columns}, seq FROM jobs
WHERE queue = ?1 AND key = ?2 AND finished_at IS NULL AND state IN ('scheduled', 'queued', 'active')

-- name: find_finished_by_key
-- unique_for=: the job of the key that finished last, after ?3 (through
-- jobs_by_key).
SELECT {job_columns} FROM jobs
WHERE queue = ?1 AND key = ?2 AND finished_at > ?3
ORDER BY finished_at DESC LIMIT 1

-- name: debounce_job
-- debounce=: a job of the key not started yet takes the new args and starts
-- at ?2.
UPDATE jobs SET args = ?1, run_at = ?2, state = 'scheduled' WHERE seq = ?3
RETURNING {job_columns}

-- name: advance_tick
-- A schedule's last tick moves to ? (with its job's id) only forward: no row
-- changes when it is there already, or past it (another worker's tick).
INSERT INTO schedules (queue, name, tick, job_id) VALUES (?, ?, ?, ?)
ON CONFLICT (queue, name) DO UPDATE SET tick = excluded.tick, job_id = excluded.job_id
WHERE excluded.tick > schedules.tick

-- name: last_ticks
-- ?: a JSON array of [queue, name]
SELECT s.queue, s.name, s.tick, s.job_id FROM schedules AS s
JOIN json_each(?) AS e ON s.queue = e.value ->> 0 AND s.name = e.value ->> 1

-- name: insert_job
-- Nothing if the id is stored already (a retried enqueue). Without a key, in
-- a keyed queue: the key '' ({stored_key}).
INSERT INTO jobs (id, queue, task, args, state, priority, run_at, created_at, key,
                  max_attempts, timeout, traceparent, concurrency_key, debounce, unique_for)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, {stored_key}, ?14, ?15)
ON CONFLICT (id) DO NOTHING

-- name: stored_key
-- The key ?13 a job of queue ?2 is stored under.
coalesce(?13, (SELECT '' FROM queues WHERE name = ?2 AND keyed))

-- name: promote_due
-- scheduled -> queued for jobs whose run_at has passed (cost: the jobs promoted).
UPDATE jobs SET state = 'queued' WHERE state = 'scheduled' AND run_at <= ?

-- name: claimable
-- Due jobs of the given queues, best first (in the FROM: claimable_in_queue, or
-- claimable_in_queue_skipping, once per queue, joined by UNION ALL). Each queue is read through its own index, up to
-- the limit: a claim costs the same at any backlog (with "queue IN (...)",
-- SQLite sorted every queued job of the queues: 53 ms at 2 x 100,000).
SELECT seq, queue FROM ({each}) ORDER BY priority DESC, run_at, seq LIMIT ?

-- name: claimable_in_queue
SELECT * FROM (SELECT seq, queue, priority, run_at FROM jobs
               WHERE state = 'queued' AND queue = ?
               ORDER BY priority DESC, run_at, seq LIMIT ?)

-- name: claimable_in_queue_skipping
-- claimable_in_queue, passing over the jobs of the tasks the second parameter
-- lists (a JSON array), which the worker has no handler for (a rolling
-- deploy): they stay in their place for a worker that knows them. The index
-- still gives the order; a job passed over costs a row read.
SELECT * FROM (SELECT seq, queue, priority, run_at FROM jobs
               WHERE state = 'queued' AND queue = ? AND task NOT IN (SELECT value FROM json_each(?))
               ORDER BY priority DESC, run_at, seq LIMIT ?)

-- name: active_in_queue
-- How many jobs of a queue with max_active are active (through jobs_queue_state).
SELECT count(*) FROM jobs WHERE queue = ? AND state = 'active'

-- name: rate_bucket
SELECT rate_tokens, rate_at FROM queues WHERE name = ?

-- name: take_from_bucket
UPDATE queues SET rate_tokens = ?, rate_at = ? WHERE name = ?

-- Concurrency keys (keys.py): a keyed queue's claim reads its keys' due jobs
-- and counts their places through jobs_keyed (by key_state). In a keyed
-- queue, a job without a key is stored under the key '' (no key is empty):
-- one key of its own, in that index too.

-- name: keyed_window
-- The queue's next due jobs in claim order (through jobs_ready), each with its
-- key, passing over the tasks the JSON array ?2 lists.
SELECT seq, concurrency_key, priority, run_at FROM jobs
WHERE state = 'queued' AND queue = ?1 AND task NOT IN (SELECT value FROM json_each(?2))
ORDER BY priority DESC, run_at, seq LIMIT ?3

-- name: key_jobs
-- keyed_window, of key ?2 only.
SELECT seq, concurrency_key, priority, run_at FROM jobs
WHERE key_state = 'queued' AND queue = ?1 AND concurrency_key = ?2
  AND task NOT IN (SELECT value FROM json_each(?3))
ORDER BY priority DESC, run_at, seq LIMIT ?4

-- name: keys_after
-- Up to ?3 keys of the queue with due jobs after key ?2, in order, each with
-- its active jobs and its next due job passing over the tasks the JSON array
-- ?4 lists (NULL: none but those): a few seeks each, however many jobs a key has.
WITH RECURSIVE walk(key) AS (
    SELECT (SELECT concurrency_key FROM jobs
            WHERE key_state = 'queued' AND queue = ?1 AND concurrency_key > ?2
            ORDER BY concurrency_key LIMIT 1)
    UNION ALL
    SELECT (SELECT concurrency_key FROM jobs
            WHERE key_state = 'queued' AND queue = ?1 AND concurrency_key > walk.key
            ORDER BY concurrency_key LIMIT 1)
    FROM walk WHERE walk.key IS NOT NULL
    LIMIT ?3
)
SELECT key,
       (SELECT count(*) FROM jobs
        WHERE key_state = 'active' AND queue = ?1 AND concurrency_key = walk.key),
       (SELECT seq FROM jobs
        WHERE key_state = 'queued' AND queue = ?1 AND concurrency_key = walk.key
          AND task NOT IN (SELECT value FROM json_each(?4))
        ORDER BY priority DESC, run_at, seq LIMIT 1)
FROM walk WHERE key IS NOT NULL

-- name: active_of_keys
-- The active jobs of each key the JSON array ?2 lists that has any.
SELECT concurrency_key, count(*) FROM jobs
WHERE key_state = 'active' AND queue = ?1 AND concurrency_key IN (SELECT value FROM json_each(?2))
GROUP BY concurrency_key

-- name: key_buckets
-- The stored buckets of the keys the JSON array ?2 lists.
SELECT key, tokens, at FROM key_buckets
WHERE queue = ?1 AND key IN (SELECT value FROM json_each(?2))

-- name: take_from_key_bucket
INSERT INTO key_buckets (queue, key, tokens, at) VALUES (?, ?, ?, ?)
ON CONFLICT (queue, key) DO UPDATE SET tokens = excluded.tokens, at = excluded.at

-- name: trim_key_buckets
-- The sweep's: a bucket last taken from rate_interval_per_key ago or more is
-- full again, as good as none (a key seen once leaves no row for ever).
DELETE FROM key_buckets
WHERE at < ?1 - coalesce((SELECT policy ->> '$.rate_interval_per_key' FROM queues
                          WHERE name = key_buckets.queue), 1.0)

-- name: key_cursor
SELECT key_cursor FROM queues WHERE name = ?

-- name: set_key_cursor
UPDATE queues SET key_cursor = ? WHERE name = ?

-- name: key_the_unkeyed
-- The queue became keyed: its jobs without a key that may yet run take the
-- key '' (once, through jobs_queue_state).
UPDATE jobs SET concurrency_key = ''
WHERE queue = ? AND concurrency_key IS NULL
  AND state IN ('waiting', 'scheduled', 'queued', 'active', 'dead')

-- name: set_keyed
UPDATE queues SET keyed = ? WHERE name = ?

-- name: key_counts
-- Jobs queued and active by key ('' and NULL: without one).
SELECT concurrency_key, sum(state = 'queued'), sum(state = 'active') FROM jobs
WHERE queue = ? AND state IN ('queued', 'active') GROUP BY concurrency_key

-- name: take_leases
-- queued -> active for the jobs ?3 lists (a JSON array of [seq, lease_ttl]), in
-- one statement: a new fence, a new attempt and a lease (none when lease_ttl is
-- null). The attempt's history row is written when it ends (end_attempts);
-- until then its start is kept on the job. Rows come back in no set order.
UPDATE jobs
SET state = 'active', fence = fence + 1, attempts = attempts + 1, worker = ?1,
    lease_ttl = t.value ->> 1, lease_expires_at = ?2 + (t.value ->> 1), progress = NULL,
    started_at = ?2
FROM json_each(?3) AS t
WHERE jobs.seq = t.value ->> 0 AND jobs.state = 'queued'
RETURNING {job_columns}, seq, workflow

-- name: renew_leases
-- The leases one worker presents (a JSON array of [id, fence]), in one
-- statement; returns those it still holds, each with whether its job's cancel
-- was requested. A lease the worker does not know of (a claim whose reply it
-- never got) is not renewed: it expires and is recovered.
UPDATE jobs
SET lease_expires_at = CASE WHEN lease_ttl IS NULL THEN NULL ELSE ? + lease_ttl END
WHERE worker = ? AND state = 'active'
  AND (id, fence) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))
RETURNING id, fence, cancel_requested

-- name: touch_worker
UPDATE workers SET last_seen = ? WHERE id = ?

-- name: set_progress
UPDATE jobs SET progress = ? WHERE id = ? AND fence = ? AND state = 'active'

-- name: complete_each
-- active -> completed for the leases ?2 lists (a JSON array of [id, fence,
-- result]) that are still held, in one statement; returns those completed,
-- each with its workflow (NULL: a plain job).
UPDATE jobs
SET state = 'completed', result = t.value -> 2, finished_at = ?1, worker = NULL,
    lease_ttl = NULL, lease_expires_at = NULL, recovered_from = NULL
FROM json_each(?2) AS t
WHERE jobs.id = t.value ->> 0 AND jobs.fence = t.value ->> 1 AND jobs.state = 'active'
RETURNING jobs.id, jobs.fence, jobs.queue, jobs.workflow

-- name: requeue
-- active -> queued | scheduled after a failed attempt, as decided by tenure.core.
-- A job queued again at once keeps its run_at, hence its place in line. A
-- recovery records when the lost attempt's lease was last proven (NULL else).
-- Not a job whose cancel was requested (requeue, bury and release): end_cancelled.
UPDATE jobs
SET state = ?, run_at = coalesce(?, run_at), error = ?, stalls = stalls + ?, worker = NULL, lease_ttl = NULL,
    lease_expires_at = NULL, recovered_from = ?
WHERE id = ? AND fence = ? AND state = 'active' AND NOT cancel_requested

-- name: bury
-- active -> dead, as decided by tenure.core; returns the job's workflow.
UPDATE jobs
SET state = 'dead', dead_reason = ?, error = ?, stalls = stalls + ?, finished_at = ?,
    worker = NULL, lease_ttl = NULL, lease_expires_at = NULL, recovered_from = NULL
WHERE id = ? AND fence = ? AND state = 'active' AND NOT cancel_requested
RETURNING workflow

-- name: end_cancelled
-- active -> cancelled: the job was cancelled while its attempt ran, and that
-- attempt ended other than completed. Returns the job's workflow.
UPDATE jobs
SET state = 'cancelled', error = coalesce(?, error), finished_at = ?, worker = NULL,
    lease_ttl = NULL, lease_expires_at = NULL, recovered_from = NULL
WHERE id = ? AND fence = ? AND state = 'active'
RETURNING workflow

-- name: release
-- active -> queued without penalty, in its place in line: the attempt is
-- given back.
UPDATE jobs
SET state = 'queued', attempts = attempts - 1, worker = NULL,
    lease_ttl = NULL, lease_expires_at = NULL, recovered_from = NULL
WHERE id = ? AND fence = ? AND state = 'active' AND NOT cancel_requested

-- name: end_attempts
-- The history row of each attempt that ends, for the leases ?4 lists (a JSON
-- array whose items start with [id, fence]), with outcome ?2 and error ?3:
-- written once, as it ends, from the job as it stands (its worker, start and
-- number), so before the write that ends it (nothing for a job no longer
-- active with that fence). An open row that a claim of schema version 1 wrote
-- is closed instead.
INSERT INTO attempts (job_id, fence, attempt, worker, started_at, ended_at, outcome, error)
SELECT jobs.id, jobs.fence, attempts, worker, coalesce(started_at, ?1), ?1, ?2, ?3
FROM json_each(?4) AS t JOIN jobs ON jobs.id = t.value ->> 0 AND jobs.fence = t.value ->> 1
WHERE jobs.state = 'active'
ON CONFLICT (job_id, fence) DO UPDATE
SET ended_at = excluded.ended_at, outcome = excluded.outcome, error = excluded.error

-- name: job_exists
SELECT 1 FROM jobs WHERE id = ?

-- name: sweep_guard
SELECT last_at FROM sweeps WHERE id = 1

-- name: sweep_mark
UPDATE sweeps SET last_at = ? WHERE id = 1

-- name: expired_leases
-- Each with when its lease was last renewed (proven).
SELECT {job_columns}, {proven} FROM jobs
WHERE state = 'active' AND lease_expires_at <= ?
ORDER BY lease_expires_at

-- name: orphaned_leases
-- Active jobs whose lease holder is not a registered (live) worker, each with
-- when its lease was last renewed (proven).
SELECT {job_columns}, {proven} FROM jobs
WHERE state = 'active' AND (worker IS NULL OR worker NOT IN (SELECT id FROM workers))

-- name: all_policies
SELECT name, policy FROM queues

-- name: prune
-- Retention: up to ?4 jobs of queue ?1 in finished state ?2 that finished at
-- or before ?3, oldest first, through jobs_finished (the IN names its
-- predicate, so that the planner may use it), but not within the unique_for
-- window that began as it finished (?5: now); their attempts go by the
-- foreign key's cascade.
DELETE FROM jobs WHERE seq IN (
    SELECT seq FROM jobs
    WHERE queue = ?1 AND state = ?2 AND state IN ('completed', 'cancelled', 'dead')
      AND finished_at <= ?3 AND (unique_for IS NULL OR finished_at + unique_for <= ?5)
    ORDER BY finished_at LIMIT ?4
)

-- name: proven
-- When an active job's lease was last renewed (a heartbeat, or its claim: the
-- renewal's time is its expiry less the TTL it was renewed with); an
-- at-most-once job, without a lease, was last proven at its claim.
coalesce(lease_expires_at - lease_ttl, started_at)

-- name: due_since
-- The run_at of the queue's oldest due job (NULL: none): queued jobs (the
-- oldest of each priority, read through jobs_ready, an index seek per distinct
-- priority, at most 100 of them), and scheduled jobs due by ?2 that no sweep
-- or claim promoted yet.
WITH RECURSIVE priorities(p) AS (
    SELECT (SELECT priority FROM jobs WHERE state = 'queued' AND queue = ?1
            ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT priority FROM jobs
            WHERE state = 'queued' AND queue = ?1 AND priority < priorities.p
            ORDER BY priority DESC LIMIT 1)
    FROM priorities WHERE priorities.p IS NOT NULL
    LIMIT 100
)
SELECT min(run_at) FROM (
    SELECT (SELECT run_at FROM jobs
            WHERE state = 'queued' AND queue = ?1 AND priority = priorities.p
            ORDER BY run_at LIMIT 1) AS run_at
    FROM priorities WHERE p IS NOT NULL
    UNION ALL
    -- through jobs_scheduled: the due ones only (by queue and state, SQLite
    -- read every scheduled job of the queue)
    SELECT * FROM (SELECT run_at FROM jobs INDEXED BY jobs_scheduled
                   WHERE state = 'scheduled' AND run_at <= ?2 AND queue = ?1
                   ORDER BY run_at LIMIT 1)
)

-- name: cancel
-- Returns the job's workflow.
UPDATE jobs SET state = 'cancelled', finished_at = ?
WHERE id = ? AND state IN ('waiting', 'scheduled', 'queued')
RETURNING workflow

-- name: request_cancel
-- An active job's cancel: its worker learns it from its heartbeat (renew_leases).
UPDATE jobs SET cancel_requested = 1 WHERE id = ? AND state = 'active'

-- name: retry_dead_all
-- OR IGNORE: a dead job whose key= now belongs to an unfinished job stays dead.
-- Its attempts keep counting; its budget counts from here (budget_from).
-- Each retried (and each purged, below) with its attempts and workflow.
UPDATE OR IGNORE jobs
SET state = 'queued', budget_from = attempts, stalls = 0, dead_reason = NULL,
    finished_at = NULL, run_at = ?
WHERE queue = ? AND state = 'dead'
RETURNING id, attempts, workflow

-- name: retry_dead_one
UPDATE OR IGNORE jobs
SET state = 'queued', budget_from = attempts, stalls = 0, dead_reason = NULL,
    finished_at = NULL, run_at = ?
WHERE queue = ? AND state = 'dead' AND id = ?
RETURNING id, attempts, workflow

-- name: purge_dead_all
DELETE FROM jobs WHERE queue = ? AND state = 'dead' RETURNING id, attempts, workflow

-- name: purge_dead_one
DELETE FROM jobs WHERE queue = ? AND state = 'dead' AND id = ? RETURNING id, attempts, workflow

-- name: delete_queue_attempts
DELETE FROM attempts WHERE job_id IN (SELECT id FROM jobs WHERE queue = ?)

-- name: delete_queue_jobs
DELETE FROM jobs WHERE queue = ?

-- name: delete_queue_events
-- The newest row stays (as in trim_events: the next event's number follows
-- it), emptied of its events.
DELETE FROM events WHERE queue = ? AND id < (SELECT max(id) FROM events)

-- name: empty_newest_event
UPDATE events SET jobs = '[]', data = NULL, kinds = NULL
WHERE queue = ? AND id = (SELECT max(id) FROM events)

-- name: delete_queue
DELETE FROM queues WHERE name = ?

-- name: get_job
SELECT {job_columns} FROM jobs WHERE id = ?

-- name: get_job_in_flow
-- get_job, with the job's workflow (NULL: a plain job).
SELECT {job_columns}, workflow FROM jobs WHERE id = ?

-- name: get_many
-- The jobs ?1 lists (a JSON array of ids), in its order, each with its workflow.
SELECT {job_columns}, workflow FROM (
    SELECT jobs.*, t.key AS asked FROM json_each(?1) AS t JOIN jobs ON jobs.id = t.value
) ORDER BY asked

-- name: get_history
-- The ended attempts, then the running one (kept on the job until it ends).
SELECT attempt, fence, worker, started_at, ended_at, outcome, error
FROM attempts WHERE job_id = ?1
UNION ALL
SELECT attempts, fence, worker, started_at, NULL, NULL, NULL FROM jobs
WHERE id = ?1 AND state = 'active' AND started_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM attempts AS a WHERE a.job_id = jobs.id AND a.fence = jobs.fence)
ORDER BY fence

-- name: list_jobs
-- {where} is built from fixed fragments; values stay parameters.
SELECT seq, {job_columns}, workflow FROM jobs {where} ORDER BY seq DESC LIMIT ?

-- name: counts
SELECT state, count(*) FROM jobs WHERE queue = ? GROUP BY state

-- name: workflow_counts
SELECT state, count(*) FROM workflows GROUP BY state

-- name: workflow_outcomes
-- Workflows ended, by outcome, ever (kept by a trigger: migration 16).
SELECT outcome, n FROM workflow_outcomes

-- name: dead_counts
SELECT dead_reason, count(*) FROM jobs WHERE queue = ? AND state = 'dead' GROUP BY dead_reason

-- name: queue_names
SELECT name FROM queues ORDER BY name

-- name: get_policy
SELECT policy FROM queues WHERE name = ?

-- name: policies
SELECT name, policy FROM queues WHERE name IN ({queues})

-- name: set_policy
INSERT INTO queues (name, policy) VALUES (?, ?)
ON CONFLICT (name) DO UPDATE SET policy = excluded.policy

-- name: register_worker
INSERT OR REPLACE INTO workers (id, hostname, pid, queues, started_at, last_seen)
VALUES (?, ?, ?, ?, ?, ?)

-- name: deregister_worker
DELETE FROM workers WHERE id = ?

-- name: worker_ids
SELECT id FROM workers

-- name: list_workers
SELECT id, hostname, pid, queues, started_at, last_seen FROM workers ORDER BY started_at

-- name: leases_held
-- Active jobs by lease holder (through jobs_worker).
SELECT worker, count(*) FROM jobs WHERE state = 'active' AND worker IS NOT NULL GROUP BY worker

-- name: record_events
-- One row of lifecycle events at time ?5, in queue ?1, which records them (its
-- policy was read in this transaction): ?2 the first one's kind, ?7 their
-- kinds as [kind, count] runs (NULL: all of ?2), ?3 a JSON array of their job
-- ids (?6 of them), ?4 a JSON array of each one's data (NULL: none has any);
-- numbered after the last event. The caller executes it once per row, each
-- seeing the rows before: unpacking rows from one JSON array (json_each,
-- numbered by a window) cost a cycle more than writing them.
INSERT INTO events (id, n, queue, kind, at, jobs, data, kinds)
VALUES ((SELECT coalesce(max(id), 0) FROM events) + ?6, ?6, ?1, ?2, ?5, ?3, ?4, ?7)

-- name: record_events_if_on
-- record_events, if queue ?1 records events (its policy, read here, costs the
-- statement as much again).
INSERT INTO events (id, n, queue, kind, at, jobs, data, kinds)
SELECT (SELECT coalesce(max(id), 0) FROM events) + ?6, ?6, ?1, ?2, ?5, ?3, ?4, ?7
FROM queues WHERE name = ?1 AND events

-- name: record_job_events
-- The events of job ?2 at time ?1, in its queue if that records them: ?3 a JSON
-- array of [kind, data object or null], in order; a row each.
INSERT INTO events (id, n, queue, kind, at, jobs, data)
SELECT (SELECT coalesce(max(id), 0) FROM events) + row_number() OVER (ORDER BY t.key), 1,
       jobs.queue, t.value ->> 0, ?1, json_array(jobs.id),
       CASE WHEN t.value ->> 1 IS NOT NULL THEN json_array(json(t.value -> 1)) END
FROM jobs JOIN queues ON queues.name = jobs.queue, json_each(?3) AS t
WHERE jobs.id = ?2 AND queues.events

-- name: read_events
-- The rows holding events after number ?1, oldest first, of queue ?2 (NULL:
-- every queue).
SELECT id, n, queue, kind, at, jobs, data, kinds FROM events
WHERE id > ?1 AND (?2 IS NULL OR queue = ?2)
ORDER BY id LIMIT ?3

-- name: last_event
-- The number of the newest event: the next one is numbered after it (the
-- retention pass keeps the newest row for that reason).
SELECT coalesce(max(id), 0) FROM events

-- name: last_event_before
-- The number of the newest event recorded before time ?1 (0: none kept is):
-- a walk back from the newest row, through the rows recorded since.
SELECT coalesce((SELECT id FROM events WHERE at < ?1 ORDER BY id DESC LIMIT 1), 0)

-- name: trim_events
-- Retention, per queue's policy: events older than its events_max_age, or
-- beyond its newest events_max_count (?1 now; ?2, ?3 the defaults). The
-- newest row stays: the next event's number follows it.
DELETE FROM events WHERE id IN (
    SELECT id FROM (
        SELECT e.id, e.at,
               sum(e.n) OVER (PARTITION BY e.queue ORDER BY e.id DESC) - e.n AS newer,
               coalesce(q.policy ->> '$.events_max_age', ?2) AS max_age,
               coalesce(q.policy ->> '$.events_max_count', ?3) AS max_count
        FROM events AS e LEFT JOIN queues AS q ON q.name = e.queue
    ) WHERE (at < ?1 - max_age OR newer >= max_count)
        AND id < (SELECT max(id) FROM events)
)

-- name: match_ids
-- Ids that begin with a prefix: a range of the ids' index (jobs.id is UNIQUE;
-- BINARY collation), filtered by the prefix itself. ?1 low, ?2 high, ?3 prefix.
SELECT id FROM jobs
WHERE id >= ?1 AND id < ?2 AND substr(id, 1, length(?3)) = ?3
ORDER BY id LIMIT ?4

-- Workflows (tenure.core.workflows; the Python that moves them: workflows.py).
-- A JSON array parameter lists the rows a statement reads or writes.

-- name: workflow_by_key
SELECT id FROM workflows WHERE key = ? AND state = 'running' LIMIT 1

-- name: insert_workflow
-- pending: how many sinks it has (each an edge to it, none done yet).
INSERT INTO workflows (id, key, state, created_at, many, pending)
VALUES (?, ?, 'running', ?, ?, ?)

-- name: insert_step_job
-- A step's job (its id must be new: a step is never a job stored already).
INSERT INTO jobs (id, queue, task, args, state, priority, run_at, created_at,
                  max_attempts, timeout, traceparent, workflow, concurrency_key)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, {stored_key})

-- name: insert_step
INSERT INTO steps (job_id, may_fail, pending, delay, spawned_by, spawn_seq)
VALUES (?, ?, ?, ?, ?, ?)

-- name: insert_edge
-- dependent, ord, upstream
INSERT INTO edges (dependent, ord, upstream) VALUES (?, ?, ?)

-- name: steps_may_fail
-- Those of the steps ?1 lists whose dependents run even if they fail.
SELECT job_id FROM steps WHERE job_id IN (SELECT value FROM json_each(?1)) AND may_fail

-- name: move_edges
-- The edges from the steps ?3 lists in state ?2 move to state ?1 (through
-- edges_upstream: the edges of the steps that moved, none else); each gives
-- its dependent and upstream.
UPDATE edges SET state = ?1
WHERE state = ?2 AND upstream IN (SELECT value FROM json_each(?3))
RETURNING dependent, upstream

-- name: count_steps
-- The fan-in's counters of the steps ?1 lists, as [job_id, pending change,
-- blocked change]; each gives its counters now. Ids of no step (a workflow's,
-- for a sink's edge) are passed over.
UPDATE steps SET pending = pending + (t.value ->> 1), blocked = blocked + (t.value ->> 2)
FROM json_each(?1) AS t
WHERE steps.job_id = t.value ->> 0
RETURNING job_id, pending, blocked

-- name: count_workflows
-- count_steps, for workflows (their sinks' edges); each gives its state too.
UPDATE workflows SET pending = pending + (t.value ->> 1), blocked = blocked + (t.value ->> 2)
FROM json_each(?1) AS t
WHERE workflows.id = t.value ->> 0
RETURNING id, state, pending, blocked

-- name: set_workflow_state
UPDATE workflows SET state = ?, finished_at = ? WHERE id = ?

-- name: release_steps
-- waiting -> queued, or scheduled when its delay (counted from now, ?1) or
-- its run_at is later, for those of the steps ?2 lists that wait for nothing.
UPDATE jobs
SET state = CASE WHEN max(jobs.run_at, ?1 + steps.delay) > ?1 THEN 'scheduled' ELSE 'queued' END,
    run_at = max(jobs.run_at, ?1 + steps.delay)
FROM steps
WHERE steps.job_id = jobs.id AND jobs.id IN (SELECT value FROM json_each(?2))
  AND jobs.state = 'waiting' AND steps.pending = 0 AND steps.blocked = 0
RETURNING jobs.id, jobs.queue, jobs.state, jobs.workflow

-- name: cancel_blocked_steps
-- waiting -> cancelled at ?1, for those of the steps ?2 lists with a failed
-- edge (then mark_upstream_failed).
UPDATE jobs SET state = 'cancelled', finished_at = ?1
FROM steps
WHERE steps.job_id = jobs.id AND jobs.id IN (SELECT value FROM json_each(?2))
  AND jobs.state = 'waiting' AND steps.blocked > 0
RETURNING jobs.id, jobs.queue, jobs.workflow

-- name: mark_upstream_failed
-- Why the steps ?1 lists were cancelled; each gives whether it may fail.
UPDATE steps SET cancel_reason = 'upstream_failed'
WHERE job_id IN (SELECT value FROM json_each(?1))
RETURNING job_id, may_fail

-- name: restore_steps
-- cancelled -> waiting, for those of the steps ?1 lists that were cancelled
-- because an upstream step failed and have no failed edge left, unless their
-- workflow was cancelled (then clear_cancel_reason).
UPDATE jobs SET state = 'waiting', finished_at = NULL
FROM steps, workflows
WHERE steps.job_id = jobs.id AND workflows.id = jobs.workflow
  AND jobs.id IN (SELECT value FROM json_each(?1)) AND jobs.state = 'cancelled'
  AND steps.cancel_reason = 'upstream_failed' AND steps.blocked = 0
  AND workflows.state <> 'cancelled'
RETURNING jobs.id, jobs.queue, jobs.workflow

-- name: clear_cancel_reason
UPDATE steps SET cancel_reason = NULL WHERE job_id IN (SELECT value FROM json_each(?1))

-- name: job_queue
SELECT queue FROM jobs WHERE id = ?

-- name: step_fields
-- Of the steps ?1 lists: whether each may fail, and why it was cancelled.
SELECT job_id, may_fail, cancel_reason FROM steps
WHERE job_id IN (SELECT value FROM json_each(?1))

-- name: step_upstreams
-- The upstream steps of the steps ?1 lists, each's in order (through edges' key).
SELECT dependent, upstream FROM edges
WHERE dependent IN (SELECT value FROM json_each(?1))
ORDER BY dependent, ord

-- name: get_workflow
SELECT id, state, created_at, finished_at, key, many FROM workflows WHERE id = ?

-- name: workflow_sinks
SELECT upstream FROM edges WHERE dependent = ? ORDER BY ord

-- name: workflow_jobs
-- A workflow's steps, in the order they were stored (through jobs_workflow).
SELECT {job_columns}, workflow FROM jobs WHERE workflow = ? ORDER BY seq

-- name: cancel_workflow_steps
-- A workflow's steps that have not started: cancelled (a cancel's).
UPDATE jobs SET state = 'cancelled', finished_at = ?1
WHERE workflow = ?2 AND state IN ('waiting', 'scheduled', 'queued')
RETURNING id, queue

-- name: request_cancel_workflow_steps
UPDATE jobs SET cancel_requested = 1 WHERE workflow = ? AND state = 'active'

-- name: spawner
-- A running step, held with fence ?2: its workflow and the last seq it spawned.
SELECT jobs.workflow, coalesce(steps.spawns, 0) FROM jobs LEFT JOIN steps ON steps.job_id = jobs.id
WHERE jobs.id = ?1 AND jobs.fence = ?2 AND jobs.state = 'active'

-- name: spawned
-- The steps that spawn ?2 of step ?1 made.
SELECT {job_columns}, workflow FROM jobs
WHERE id IN (SELECT job_id FROM steps WHERE spawned_by = ?1 AND spawn_seq = ?2)
ORDER BY seq

-- name: spawns_made
UPDATE steps SET spawns = max(spawns, ?) WHERE job_id = ?

-- name: open_edges_from
-- The edges a running step's dependents wait on it by: its dependents also
-- wait on what it spawns.
SELECT dependent, ord FROM edges WHERE upstream = ? AND state = 'open'
