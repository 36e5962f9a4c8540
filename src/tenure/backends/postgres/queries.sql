-- Named blocks of the PostgreSQL backend (composed by statements.py). A
-- block's {name} is the text of another block, a part (or of one the code
-- makes: job_columns, done_columns); a block no other names is a statement.
-- {schema} is the configured schema, {channel} the wake-up channel, each
-- quoted; {limit} an integer written in per call.
-- Parameters are %(name)s; "now" is always the server's clock.

-- name: insert_jobs
-- Many jobs in one statement: their queues are recorded, and idle workers of
-- queues that got a runnable job are notified at commit. A key= already held
-- by an unfinished job of the queue (or by an earlier row of the same batch)
-- inserts nothing, nor does an id already stored (a retried enqueue).
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
input AS (  -- %(jobs)s: a JSON array of [id, queue, task, priority, delay, run_at,
            -- key, max_attempts, timeout, traceparent, concurrency_key, debounce,
            -- unique_for] (one parse, no per-row arrays); %(args)s:
            -- their arguments, a text array in the same order (apart: ->> on a JSON
            -- value that holds \u0000 anywhere fails)
    SELECT e.j->>0 AS id, e.j->>1 AS queue, e.j->>2 AS task, a.args::json AS args,
           (e.j->>3)::int AS priority, (e.j->>4)::float8 AS delay,
           (e.j->>5)::float8 AS run_at, e.j->>6 AS key, (e.j->>7)::int AS max_attempts,
           (e.j->>8)::float8 AS timeout, e.j->>9 AS traceparent, e.j->>10 AS concurrency_key,
           (e.j->>11)::float8 AS debounce, (e.j->>12)::float8 AS unique_for, e.ord
    FROM json_array_elements(%(jobs)s::json) WITH ORDINALITY AS e(j, ord)
    JOIN unnest(%(args)s::text[]) WITH ORDINALITY AS a(args, ord) ON a.ord = e.ord
),
ensured AS (
    INSERT INTO {schema}.queues (name) SELECT DISTINCT queue FROM input
    ON CONFLICT (name) DO NOTHING
),
inserted AS (
    INSERT INTO {schema}.jobs AS j (id, queue, task, args, state, priority, run_at,
                                    created_at, key, max_attempts, timeout, traceparent,
                                    concurrency_key, debounce, unique_for)
    SELECT id, queue, task, args,
           CASE WHEN coalesce(run_at, now + delay) > now THEN 'scheduled' ELSE 'queued' END,
           priority, coalesce(run_at, now + delay), now, key, max_attempts, timeout,
           traceparent, concurrency_key, debounce, unique_for
    FROM input, clock
    ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING id, queue, task, state, run_at, created_at, seq
),
woken AS (  -- a job scheduled for later notifies the empty payload: it wakes no
            -- waiter, but tells a sweeper that found the fleet idle (wakeup.py)
    SELECT pg_notify(%(channel)s, q)
    FROM (SELECT DISTINCT CASE state WHEN 'queued' THEN queue ELSE '' END
          FROM inserted WHERE state IN ('queued', 'scheduled')) AS d(q)
),
recorded_input AS (
    SELECT i.queue, 'enqueued' AS kind, i.id AS job_id,
           json_build_object('task', i.task, 'state', i.state) AS data, i.seq AS ord
    FROM inserted AS i
),
{record_events}
-- One row: the server's clock (every new job's created_at; its run_at is that
-- plus its delay, unless given) and the ids of the jobs inserted.
SELECT clock.now, array_agg(inserted.id), (SELECT count(*) FROM woken)
FROM clock LEFT JOIN inserted ON true GROUP BY clock.now

-- name: begin_copy
-- A batch without key= goes by COPY (copy_jobs), in one transaction that this
-- starts: its queues are recorded, and the transaction's clock is read (every
-- new job's created_at, and its run_at is that plus its delay, unless given).
WITH ensured AS (
    INSERT INTO {schema}.queues (name) SELECT unnest(%(queues)s::text[])
    ON CONFLICT (name) DO NOTHING
)
SELECT extract(epoch FROM now())::float8

-- name: record_enqueued
-- The enqueued events of jobs stored by COPY, in the same transaction, a row
-- per queue (%(queues)s) as the producer built it from what it sent: the job
-- ids (%(jobs)s, JSON arrays in the order COPY stored them) and their data
-- (%(data)s: an array, or {"all": ...} when the queue's jobs share it,
-- events.py). The rows just written are not read back, nor is an object built
-- per job (that was a third of an enqueue's server time).
INSERT INTO {schema}.events (queue, kind, jobs, data)
SELECT t.queue, 'enqueued', t.jobs::json, t.data::json
FROM unnest(%(queues)s::text[], %(jobs)s::text[], %(data)s::text[])
    WITH ORDINALITY AS t(queue, jobs, data, ord)
LEFT JOIN {schema}.queues AS q ON q.name = t.queue
WHERE coalesce(q.events, true)
ORDER BY t.ord

-- name: copy_jobs
-- Rows in COPY's text format, in order (seq follows it); a third less of the
-- server's time per job than insert_jobs.
COPY {schema}.jobs (id, queue, task, args, state, priority, run_at, created_at,
                    max_attempts, timeout, traceparent, concurrency_key) FROM STDIN

-- name: end_attempt
-- (A part of the statements that end attempts, written into them.) The history
-- row of each attempt that the statement's `done` ended, from the job as it
-- stood before (`o`: worker, start and number of the attempt). An open row
-- (written at the claim before schema version 4, by a worker not yet
-- upgraded) is closed instead.
ended AS (
    INSERT INTO {schema}.attempts AS a
        (job_id, fence, attempt, worker, started_at, ended_at, outcome, error)
    SELECT id, fence, attempt, worker, coalesce(started_at, clock.now), clock.now, outcome, error
    FROM done, clock
    ON CONFLICT (job_id, fence) DO UPDATE
    SET ended_at = excluded.ended_at, outcome = excluded.outcome, error = excluded.error
)

-- name: one_ended
-- (A part of the statements that end one attempt, written into them, after
-- their `done`.) The attempt's history row, its events (%(events)s: JSON
-- [[kind, data], ...]), and the queue to announce.
{end_attempt},
recorded_input AS (
    SELECT done.queue, e.value->>0 AS kind, done.id AS job_id, e.value->1 AS data, e.ord
    FROM done, json_array_elements(%(events)s::json) WITH ORDINALITY AS e(value, ord)
),
{record_events}
SELECT queue FROM done

-- name: record_events
-- (A part of statements, written into them.) The events of `recorded_input`
-- (queue, kind, job_id, data; in the order of ord) for the queues that record
-- them (a queue this statement records has the defaults), a row per kind and
-- queue. No NOTIFY: readers poll (events.py says why). The aggregates take
-- their rows in the order of the subquery's one sort, which no join follows:
-- json_agg(... ORDER BY ord) sorted each row's events again, twice.
recorded AS (
    INSERT INTO {schema}.events (queue, kind, jobs, data)
    SELECT r.queue, r.kind, json_agg(r.job_id),
           CASE WHEN bool_or(r.data IS NOT NULL) THEN json_agg(r.data) END
    FROM (SELECT * FROM recorded_input ORDER BY queue, kind, ord) AS r
    GROUP BY r.queue, r.kind
    HAVING coalesce((SELECT q.events FROM {schema}.queues AS q WHERE q.name = r.queue), true)
    ORDER BY min(r.ord)
    RETURNING 1
)

-- name: advance_tick
-- A schedule's last tick moves to %(tick)s (with its job's id) only forward:
-- no row comes back when it is there already, or past it. A concurrent
-- advance waits for this one's row lock, then reads the tick it committed.
INSERT INTO {schema}.schedules AS s (queue, name, tick, job_id)
VALUES (%(queue)s, %(name)s, %(tick)s, %(job_id)s)
ON CONFLICT (queue, name) DO UPDATE SET tick = excluded.tick, job_id = excluded.job_id
WHERE excluded.tick > s.tick
RETURNING 1

-- name: last_ticks
SELECT s.queue, s.name, s.tick, s.job_id FROM {schema}.schedules AS s
WHERE (s.queue, s.name) IN (SELECT * FROM unnest(%(queues)s::text[], %(names)s::text[]))

-- name: find_unfinished_by_keys
-- The jobs that hold their key= (jobs_key: a debounced job that started holds
-- none); with a window (%(windows)s, seconds: unique_for), those of the key
-- enqueued with unique_for that finished less than that ago
-- (jobs_key_finished). Of a key's, the one to return comes last: the
-- unfinished one, else the one finished last. The last column is not the job's.
SELECT * FROM (
    SELECT {job_columns}, {flow_columns}, 0 AS finished FROM {schema}.jobs
    WHERE (queue, key) IN (SELECT * FROM unnest(%(queues)s::text[], %(keys)s::text[]))
      AND state IN ('scheduled', 'queued', 'active') AND (state <> 'active' OR debounce IS NULL)
    UNION ALL
    SELECT {job_columns}, {flow_columns}, 1 FROM {schema}.jobs
    JOIN unnest(%(queues)s::text[], %(keys)s::text[], %(windows)s::float8[]) AS t(q, k, w)
        ON jobs.queue = t.q AND jobs.key = t.k
    WHERE t.w IS NOT NULL AND jobs.finished_at > extract(epoch FROM now())::float8 - t.w
      AND unique_for IS NOT NULL AND state IN ('completed', 'cancelled', 'dead')
) AS found
ORDER BY finished DESC, finished_at NULLS FIRST

-- name: debounce_jobs
-- A debounced enqueue, for each key (%(queues)s, %(keys)s) with a job not
-- started (through jobs_key): its args become %(args)s, it starts %(delays)s
-- seconds from now. Returns those jobs.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    UPDATE {schema}.jobs AS j
    SET args = t.args::json, run_at = clock.now + t.delay, state = 'scheduled'
    FROM unnest(%(queues)s::text[], %(keys)s::text[], %(args)s::text[], %(delays)s::float8[])
        AS t(queue, key, args, delay), clock
    WHERE j.queue = t.queue AND j.key = t.key AND j.state IN ('scheduled', 'queued')
      AND (j.state <> 'active' OR j.debounce IS NULL)
    RETURNING j.*
)
SELECT {job_columns}, {flow_columns} FROM done

-- name: find_by_ids
SELECT {job_columns}, {flow_columns} FROM {schema}.jobs WHERE id = ANY(%(ids)s::text[])

-- name: notify
SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT unnest(%(queues)s::text[])) AS d(q)

-- name: cycle
-- (Composed into complete_and_claim and complete_and_claim_limited, with
-- their gate, shared and bucket, and into their _skipping twins, which pass
-- over the jobs of some tasks; each of the four as is, to complete jobs that
-- are no workflow's step, and _releasing, with the parts that release steps:
-- statements.COMPOSED.)
-- The worker's cycle in one statement, one transaction: complete the presented
-- leases still held (%(ids)s, %(fences)s, %(results)s; empty arrays for none),
-- then claim up to LIMIT due jobs of the given queues, best first (0 for
-- none): queued jobs and scheduled jobs that became due, each queue read through
-- its own index (cost O(log n) per queue), rows locked with SKIP LOCKED so that
-- concurrent claimers never wait for each other nor take the same job.
-- The claim takes up to %(want)s jobs. Each queue's read is planned for
-- {limit}, written into the statement (an integer) rather than sent as a
-- parameter: a generic plan must know it, or it assumes thousands of rows and
-- hashes the whole jobs table (benchmarks/postgres_scale.py: 379 ms a claim at
-- 1M jobs). {limit} is a bound above %(want)s of a few values
-- (claiming.plan_bound): a connection plans the statement once for each
-- {limit} it is sent with, and planning it costs more than running it. The
-- read stops at %(want)s rows, so no more rows than that are locked.
-- Returns the queues with a fleet-wide limit (rank 0: id is the queue, fence
-- 1 if it was held back for want of its lock, see gate), the claimed jobs
-- (rank 1, 2, ...), then the completed leases (rank NULL, only id and fence set). A completed job keeps its attempt's worker
-- and start: it is its own history row (see get_history). Completions find
-- their jobs by id; their state is compared with a value the planner cannot
-- match to the predicate of the index of active jobs (jobs_lease): through
-- it, the generic plan read an entry for every job claimed since the last
-- vacuum, each cycle (a bitmap scan never marks an entry dead). A claim
-- updates the row version it locked by its ctid, without a second descent of
-- the primary key (a version another transaction wrote after this statement's
-- snapshot is not seen: that job stays for another claim). A claim's fence is
-- above every fence of earlier timelines: a standby promoted before it received
-- a claim must not hand the same fence to a second attempt (the first may still
-- run and present it downstream); the WAL's timeline counts promotions.
WITH clock AS (
    SELECT extract(epoch FROM now())::float8 AS now,
           (('x' || left(pg_walfile_name(pg_current_wal_insert_lsn()), 8))::bit(32)::bigint - 1)
               << 32 AS fences_from
),
input AS (
    SELECT * FROM unnest(%(ids)s::text[], %(fences)s::bigint[], %(results)s::text[])
        AS t(id, fence, result)
),
done AS (
    UPDATE {schema}.jobs AS j
    SET state = 'completed', result = input.result::json, finished_at = clock.now,
        lease_ttl = NULL, lease_expires_at = NULL, recovered_from = NULL
    FROM input, clock
    WHERE j.id = input.id AND j.fence = input.fence AND j.state = (SELECT 'active')
    RETURNING j.id, j.fence, j.queue, j.workflow
),
{flow_release},
{gate},
candidates AS (
    SELECT c.* FROM gate AS q
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT ctid, id, queue, priority, run_at, seq FROM {schema}.jobs
            WHERE state = 'queued' AND queue = q.name {skip}
            ORDER BY priority DESC, run_at, seq
            LIMIT {limit} FOR UPDATE SKIP LOCKED
        ) AS c LIMIT %(want)s::int
    ) AS c
    WHERE q.share > 0
    UNION ALL
    SELECT d.* FROM gate AS q, clock
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT ctid, id, queue, priority, run_at, seq FROM {schema}.jobs
            WHERE state = 'scheduled' AND queue = q.name AND run_at <= clock.now {skip}
            ORDER BY run_at
            LIMIT {limit} FOR UPDATE SKIP LOCKED
        ) AS d LIMIT %(want)s::int
    ) AS d
    WHERE q.share > 0
),
picked AS (
    SELECT c.ctid, g.ttl, row_number() OVER (ORDER BY c.priority DESC, c.run_at, c.seq) AS rank
    FROM {shared}
    ORDER BY c.priority DESC, c.run_at, c.seq
    LIMIT %(want)s::int
),
claimed AS (
    UPDATE {schema}.jobs AS j
    SET state = 'active', fence = greatest(j.fence + 1, clock.fences_from + 1), attempts = j.attempts + 1,
        worker = %(worker)s, lease_ttl = picked.ttl,
        lease_expires_at = clock.now + picked.ttl, progress = NULL, started_at = clock.now
    FROM picked, clock
    WHERE j.ctid = picked.ctid
    RETURNING j.*, picked.rank
),
{bucket}
freed AS (  -- a queue with max_active has room again, or got a released step: its
            -- idle workers may claim
    SELECT count(pg_notify(%(channel)s, d.queue))
    FROM (SELECT d.queue FROM (SELECT DISTINCT queue FROM done) AS d
          JOIN {schema}.queues AS p ON p.name = d.queue
          WHERE p.policy->>'max_active' IS NOT NULL OR p.policy->>'max_active_per_key' IS NOT NULL
          UNION
          {flow_queues}) AS d
),
recorded_input AS (
    SELECT queue, 'completed' AS kind, id AS job_id, {flow_data} AS data, 0 AS ord FROM done
    UNION ALL
    SELECT queue, 'started', id, json_build_object('attempt', attempts, 'worker', worker), rank
    FROM claimed
    UNION ALL
    {flow_events}
),
{record_events}
SELECT rank, {job_columns}, {flow_columns} FROM claimed, freed  -- freed: one row, always
UNION ALL
SELECT rank, {done_columns}, NULL, NULL, NULL, NULL, NULL FROM freed,
    (SELECT NULL::int, id, fence FROM done
     UNION ALL
     SELECT 0, name, unlocked::int FROM gate WHERE limited) AS d(rank, id, fence)
ORDER BY 1 NULLS LAST

-- name: gate
-- (A part of complete_and_claim, written into it.) Each queue's share of the
-- claim and its lease's TTL (NULL: at-most-once): {limit}, or none while it
-- is paused or has a fleet-wide limit (max_active, rate_limit) or keys
-- (policy.keyed). Those queues are reported (rank 0, unlocked: 1, plus 2 if
-- keyed, plus 4 if its claims take its row's lock), and the backend claims
-- from them with complete_and_claim_limited (or _keyed), under their rows'
-- lock, or with complete_and_claim_keys (a per-key limit only). Kept short:
-- psycopg converts a statement of more than 4 KiB again at every execution.
gate AS (
    SELECT q.name, l.limited, l.limited::int + 2 * l.keyed::int + 4 * l.rowed::int AS unlocked,
           l.ttl,
           CASE WHEN l.limited OR (p.policy->>'paused')::boolean THEN 0 ELSE {limit} END AS share
    FROM unnest(%(queues)s::text[]) AS q(name)
    LEFT JOIN {schema}.queues AS p ON p.name = q.name,
    {lease}
)

-- name: lease
-- (A part of both gates.) Whether the queue has a fleet-wide limit (or keys:
-- QueuePolicy.keyed), its lease's TTL, and whether its claims take its row's
-- lock (`rowed`: a fleet-wide limit, or fair, whose cursor every claim moves;
-- a queue with per-key limits only is claimed under its keys' locks).
LATERAL (SELECT k.keyed OR k.queued,
                CASE WHEN coalesce(p.policy->>'delivery', %(delivery)s) <> 'at-most-once'
                     THEN coalesce((p.policy->>'lease_ttl')::float8, %(lease_ttl)s) END,
                (p.policy->>'max_active')::int, (p.policy->>'rate_limit')::float8, k.keyed,
                k.queued OR k.fair
         FROM (SELECT p.policy->>'max_active_per_key' IS NOT NULL
                      OR p.policy->>'rate_limit_per_key' IS NOT NULL OR f.fair,
                      p.policy->>'max_active' IS NOT NULL OR p.policy->>'rate_limit' IS NOT NULL,
                      f.fair
               FROM (SELECT coalesce((p.policy->>'fair')::boolean, false)) AS f(fair))
              AS k(keyed, queued, fair)
) AS l(limited, ttl, most, rate, keyed, rowed)

-- name: gate_limited
-- (A part of complete_and_claim_limited, written into it.) Each queue's share
-- of the claim (tenure.core.limits): none while it is paused; with a
-- fleet-wide limit, what max_active (its active jobs counted, but for those
-- this cycle completes) and the rate bucket's tokens leave, counted only by
-- a claim that holds the queue's row lock (%(locked)s: the statement before,
-- in this transaction, took it, so this statement's snapshot holds every
-- claim of the queue committed before). A claim without the lock takes
-- nothing from such a queue; it is reported (rank 0, unlocked) and the
-- backend claims again with the lock. A queue with keys (%(keyed)s: those
-- complete_and_claim_keyed picked from) is claimed from its picks, within
-- its `room` (shared_keyed), none of its candidates (share 0); one keyed
-- now that was not picked from is reported unlocked too, and so is one whose
-- claims take its row's lock (rowed) claimed without it (in %(keyed)s, not in
-- %(locked)s: complete_and_claim_keys) or the other way round.
gate AS (
    SELECT q.name, l.limited, u.unlocked::int + 2 * l.keyed::int + 4 * l.rowed::int AS unlocked,
           l.ttl,
           u.tokens, l.keyed, CASE WHEN l.keyed THEN 0 ELSE r.room END AS share, r.room
    FROM unnest(%(queues)s::text[]) AS q(name)
    LEFT JOIN {schema}.queues AS p ON p.name = q.name, clock,
    {lease},
    LATERAL (SELECT l.limited AND CASE WHEN l.keyed
                    THEN q.name <> ALL(%(keyed)s::text[]) OR l.rowed <> (q.name = ANY(%(locked)s::text[]))
                    ELSE q.name <> ALL(%(locked)s::text[]) END,
                    least(l.rate, coalesce(p.rate_tokens + greatest(clock.now - p.rate_at, 0)
                                           * l.rate / (p.policy->>'rate_interval')::float8,
                                           l.rate))) AS u(unlocked, tokens),
    LATERAL (SELECT CASE WHEN (p.policy->>'paused')::boolean OR u.unlocked THEN 0
                ELSE greatest(0, least({limit}, floor(u.tokens + 1e-9)::int,
                    l.most - (SELECT count(*) FROM (
                        SELECT FROM {schema}.jobs AS a
                        WHERE l.most > 0 AND a.state = 'active' AND a.queue = q.name
                          AND a.id NOT IN (SELECT id FROM done) LIMIT l.most) AS n)))
           END) AS r(room)
)

-- name: shared_limited
-- (A part of complete_and_claim_limited, written into it.) The candidates
-- within each queue's share.
(SELECT *, row_number() OVER (PARTITION BY queue ORDER BY priority DESC, run_at, seq) AS nth
 FROM candidates) AS c
JOIN gate AS g ON g.name = c.queue AND c.nth <= g.share

-- name: bucket
-- (A part of complete_and_claim_limited, written into it.)
bucket AS (  -- each start takes a token
    UPDATE {schema}.queues AS p SET rate_tokens = g.tokens - n.c, rate_at = clock.now
    FROM gate AS g, clock, (SELECT queue, count(*) FROM claimed GROUP BY 1) AS n(queue, c)
    WHERE p.name = g.name AND n.queue = g.name AND g.tokens IS NOT NULL
),

-- name: shared
-- (A part of complete_and_claim, written into it.) The candidates, within the
-- claim's limit.
candidates AS c JOIN gate AS g ON g.name = c.queue

-- name: no_bucket
-- (A part of complete_and_claim, written into it.) No rate bucket to take from.

-- name: skip
-- (A part of the _skipping cycles, written into them.) The jobs of the tasks
-- %(skip)s names, which the worker has no handler for (a rolling deploy), are
-- passed over: they stay in their place for a worker that knows them. The
-- index still gives the order; a job passed over costs a row read. In
-- coalesce, which the planner cannot estimate (it takes half the rows): from
-- the task column's statistics, with few task names, a generic plan expected
-- the filter to let no row through and scanned the whole jobs table.
AND coalesce(task <> ALL(%(skip)s::text[]), true)

-- name: no_skip
-- (A part of the other cycles, written into them.) Every task: the claim
-- reads no task name.

-- name: no_release
-- (A part of the cycles that complete no workflow's step, written into them
-- for flow_release; Claiming knows which jobs it claimed are plain.) Nothing
-- to release: the executor starts a third fewer plan nodes per cycle (the
-- parts that release steps cost a cycle 100 us of the server's CPU, even
-- reading nothing).
no_steps AS (SELECT)

-- name: no_queues
-- (A part of those cycles, for flow_queues.) No queue got a step.
SELECT NULL::text WHERE false

-- name: no_events
-- (A part of those cycles, for flow_events.) No step released, no workflow ended.
SELECT NULL::text, NULL::text, NULL::text, NULL::json, 0 WHERE false

-- name: no_data
-- (A part of those cycles, for flow_data.) A plain job's events have no data.
NULL::json

-- name: heartbeat
-- The leases one worker presents, in one statement; returns those it still
-- holds, each with whether its job's cancel was requested. A lease the worker does not know of (a claim whose reply it never
-- got) is not renewed: it expires and is recovered. A job that another
-- transaction is writing (its completion by this worker's cycle, or its
-- recovery by a sweeper) is not waited for: it counts as held this time, and
-- the next heartbeat tells. Waiting could deadlock with the cycle, which locks
-- the jobs it completes in an order of its own.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
held AS (
    SELECT j.id, j.fence, j.cancel_requested
    FROM unnest(%(ids)s::text[], %(fences)s::bigint[]) AS t(id, fence)
    JOIN {schema}.jobs AS j ON j.id = t.id AND j.fence = t.fence
    WHERE j.worker = %(worker)s AND j.state = 'active'
),
renewed AS (
    UPDATE {schema}.jobs AS j SET lease_expires_at = clock.now + j.lease_ttl
    FROM clock
    WHERE j.id IN (SELECT l.id FROM held JOIN {schema}.jobs AS l ON l.id = held.id
                   WHERE l.fence = held.fence AND l.worker = %(worker)s AND l.state = 'active'
                   FOR UPDATE OF l SKIP LOCKED)
),
seen AS (
    UPDATE {schema}.workers SET last_seen = clock.now FROM clock WHERE id = %(worker)s
)
SELECT id, fence, cancel_requested FROM held

-- name: progress
WITH done AS (
    UPDATE {schema}.jobs SET progress = %(data)s::json
    WHERE id = %(id)s AND fence = %(fence)s AND state = 'active'
    RETURNING id, queue
),
recorded_input AS (
    SELECT queue, 'progress' AS kind, id AS job_id,
           json_build_object('progress', %(data)s::json) AS data, 0 AS ord
    FROM done
),
{record_events}
SELECT queue FROM done

-- name: complete
-- The job keeps its attempt's worker and start (see complete_and_claim). A
-- step releases what waits for it (flow_release).
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    UPDATE {schema}.jobs
    SET state = 'completed', result = %(result)s::json,
        finished_at = clock.now, lease_ttl = NULL, lease_expires_at = NULL,
        recovered_from = NULL
    FROM clock
    WHERE id = %(id)s AND fence = %(fence)s AND state = 'active'
    RETURNING id, queue, workflow
),
{flow_release},
{flow_woken},
recorded_input AS (
    SELECT queue, 'completed' AS kind, id AS job_id, {flow_data} AS data, 0 AS ord FROM done
    UNION ALL
    {flow_events}
),
{record_events}
SELECT queue FROM done, woken

-- name: requeue
-- active -> queued | scheduled after a failed attempt, as decided by tenure.core;
-- a job queued again at once keeps its run_at, hence its place in line. A
-- recovery records when the lost attempt's lease was last proven (NULL else).
-- Not a job whose cancel was requested (requeue, bury and release): end_cancelled.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    UPDATE {schema}.jobs AS j
    SET state = %(state)s::text,
        run_at = CASE WHEN %(state)s::text = 'scheduled' THEN clock.now + %(delay)s::float8
                      ELSE j.run_at END,
        error = %(error)s, stalls = j.stalls + %(stall)s, worker = NULL, lease_ttl = NULL,
        lease_expires_at = NULL, recovered_from = %(recovered_from)s::float8
    FROM {schema}.jobs AS o, clock
    WHERE j.id = %(id)s AND j.fence = %(fence)s AND j.state = 'active' AND o.id = j.id
      AND NOT j.cancel_requested
    RETURNING j.id, j.queue, j.fence, o.attempts AS attempt, o.worker, o.started_at,
              %(outcome)s::text AS outcome, %(error)s::text AS error
),
{one_ended}

-- name: bury
-- active -> dead, as decided by tenure.core.
WITH RECURSIVE clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    UPDATE {schema}.jobs AS j
    SET state = 'dead', dead_reason = %(dead_reason)s, error = %(error)s,
        stalls = j.stalls + %(stall)s, finished_at = clock.now, worker = NULL, lease_ttl = NULL,
        lease_expires_at = NULL, recovered_from = NULL
    FROM {schema}.jobs AS o, clock
    WHERE j.id = %(id)s AND j.fence = %(fence)s AND j.state = 'active' AND o.id = j.id
      AND NOT j.cancel_requested
    RETURNING j.id, j.queue, j.fence, o.attempts AS attempt, o.worker, o.started_at,
              %(outcome)s::text AS outcome, %(error)s::text AS error, j.workflow, j.may_fail, j.state
),
{one_ended_flow}

-- name: end_cancelled
-- active -> cancelled: the job was cancelled while its attempt ran, and that
-- attempt ended other than completed (with %(outcome)s).
WITH RECURSIVE clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    UPDATE {schema}.jobs AS j
    SET state = 'cancelled', error = coalesce(%(error)s, j.error), finished_at = clock.now,
        worker = NULL, lease_ttl = NULL, lease_expires_at = NULL, recovered_from = NULL
    FROM {schema}.jobs AS o, clock
    WHERE j.id = %(id)s AND j.fence = %(fence)s AND j.state = 'active' AND o.id = j.id
    RETURNING j.id, j.queue, j.fence, o.attempts AS attempt, o.worker, o.started_at,
              %(outcome)s::text AS outcome, %(error)s::text AS error, j.workflow, j.may_fail, j.state
),
{one_ended_flow}

-- name: release
-- active -> queued without penalty, in its place in line: the attempt is given back.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    UPDATE {schema}.jobs AS j
    SET state = 'queued', attempts = j.attempts - 1, worker = NULL, lease_ttl = NULL,
        lease_expires_at = NULL, recovered_from = NULL
    FROM {schema}.jobs AS o
    WHERE j.id = %(id)s AND j.fence = %(fence)s AND j.state = 'active' AND o.id = j.id
      AND NOT j.cancel_requested
    RETURNING j.id, j.queue, j.fence, o.attempts AS attempt, o.worker, o.started_at,
              'released' AS outcome, NULL AS error
),
{one_ended}

-- name: lock_queues
-- The rows of the queues with a fleet-wide limit a claim takes from, locked
-- until it commits, in one order: claims of one such queue go one at a time.
-- NO KEY UPDATE: enqueues, which only make sure the row exists, never wait.
-- The transaction lives past this statement: a worker frozen inside it would
-- hold the rows (every claim of those queues waits) until the server ends its
-- session, %(idle)s ms after (set_config local: this transaction only).
WITH idle AS (SELECT set_config('idle_in_transaction_session_timeout', %(idle)s, true))
SELECT name FROM {schema}.queues, idle WHERE name = ANY(%(queues)s::text[])
ORDER BY name FOR NO KEY UPDATE OF queues

-- name: job_exists
SELECT 1 FROM {schema}.jobs WHERE id = %(id)s

-- name: sweep_guard
-- One sweep per interval across the fleet: the transaction-scoped lock keeps
-- two sweeps apart; the row says when the last one ran. One row: whether this
-- sweep goes ahead, and if not, the seconds until one may (0: another sweep is
-- running now); and the transaction's clock, the sweep's. The sweep's
-- transaction spans several statements: a worker frozen inside it would keep
-- every other sweep out, so the server ends its session once it idles
-- %(idle)s ms (set_config local: this transaction only). Last, the number
-- of registered workers, over whom the refused spread their next tries.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now,
                      set_config('idle_in_transaction_session_timeout', %(idle)s, true)),
marked AS (
    UPDATE {schema}.sweeps SET last_at = clock.now FROM clock
    WHERE id = 1 AND pg_try_advisory_xact_lock(%(lock)s)
      AND NOT (clock.now - last_at BETWEEN 0 AND %(interval)s)
    RETURNING last_at
)
SELECT EXISTS (SELECT 1 FROM marked),
       greatest(%(interval)s - (clock.now - s.last_at), 0), clock.now,
       (SELECT count(*) FROM {schema}.workers)
FROM clock, {schema}.sweeps AS s WHERE s.id = 1

-- name: dead_workers
-- Registered workers whose liveness lock nobody holds: their process, or its
-- connection, is gone; with their last heartbeat.
DELETE FROM {schema}.workers w
WHERE NOT EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = %(namespace)s::bigint::oid AND l.objid = w.lock_no::bigint::oid
      AND l.objsubid = 2
)
RETURNING id, last_seen

-- name: orphaned_leases
-- Active jobs whose lease holder is not a registered (live) worker, each with
-- when its lease was last renewed (proven); locked, and to be checked again
-- (still_orphaned) before they are recovered.
SELECT {job_columns}, {proven} FROM {schema}.jobs j
WHERE state = 'active'
  AND NOT EXISTS (SELECT 1 FROM {schema}.workers w WHERE w.id = j.worker)
FOR UPDATE SKIP LOCKED

-- name: still_orphaned
-- Of the jobs orphaned_leases locked, those whose holder is still not a
-- registered worker, seen from a snapshot taken after they were locked. A job
-- that orphaned_leases read held by a dead worker, and that was released and
-- claimed again before its scan reached it, comes back as the claim left it:
-- PostgreSQL checks the row's new version against the statement's snapshot,
-- from before the new holder registered (after a server restart, every worker
-- registers again at once). Without this check, a live worker's fresh attempt
-- was recorded crashed. A locked job's holder cannot change, and a holder
-- registers before it claims.
SELECT j.id FROM {schema}.jobs j
WHERE j.id = ANY(%(ids)s::text[])
  AND NOT EXISTS (SELECT 1 FROM {schema}.workers w WHERE w.id = j.worker)

-- name: expired_leases
-- Each with when its lease was last renewed (proven).
SELECT {job_columns}, {proven} FROM {schema}.jobs
WHERE state = 'active' AND lease_expires_at <= extract(epoch FROM now())::float8
FOR UPDATE SKIP LOCKED

-- name: promote_due
UPDATE {schema}.jobs SET state = 'queued'
WHERE id IN (SELECT id FROM {schema}.jobs
             WHERE state = 'scheduled' AND run_at <= extract(epoch FROM now())::float8
             FOR UPDATE SKIP LOCKED)
RETURNING queue

-- name: idle
-- Whether a sweep has nothing to do until a job comes: no job is active or
-- queued, nor scheduled to be due within %(ahead)s seconds (read only when
-- none is active or queued). Each reads its partial index, in its order: an
-- EXISTS drops the ORDER BY, and with statistics that count many queued jobs
-- where there are none (a backlog just drained) read the whole table. A job
-- that comes later comes with a NOTIFY (rescue.py).
SELECT CASE
    WHEN (SELECT 1 FROM {schema}.jobs WHERE state = 'active'
          ORDER BY lease_expires_at LIMIT 1) IS NOT NULL
      OR (SELECT 1 FROM {schema}.jobs WHERE state = 'queued'
          ORDER BY queue, priority DESC, run_at, seq LIMIT 1) IS NOT NULL THEN false
    ELSE (SELECT 1 FROM {schema}.jobs
          WHERE state = 'scheduled' AND run_at <= extract(epoch FROM now())::float8 + %(ahead)s
          ORDER BY queue, run_at LIMIT 1) IS NULL
END

-- name: proven
-- (A part of statements, written into them.) When an active job's lease was
-- last renewed (a heartbeat, or its claim: the renewal's time is its expiry
-- less the TTL it was renewed with); an at-most-once job, without a lease,
-- was last proven at its claim.
coalesce(lease_expires_at - lease_ttl, started_at)

-- name: lag
-- How long the queue's oldest due job has been due, in seconds (0: none is):
-- queued jobs (the oldest of each priority, read through jobs_ready, an index
-- seek per distinct priority, at most 100 of them), and scheduled jobs due
-- that no sweep or claim promoted yet (jobs_scheduled).
WITH RECURSIVE clock AS (SELECT extract(epoch FROM now())::float8 AS now),
priorities(p, n) AS (
    SELECT (SELECT priority FROM {schema}.jobs WHERE state = 'queued' AND queue = %(queue)s
            ORDER BY priority DESC LIMIT 1), 1
    UNION ALL
    SELECT (SELECT priority FROM {schema}.jobs
            WHERE state = 'queued' AND queue = %(queue)s AND priority < priorities.p
            ORDER BY priority DESC LIMIT 1), n + 1
    FROM priorities WHERE priorities.p IS NOT NULL AND n < 100
),
oldest AS (
    SELECT (SELECT run_at FROM {schema}.jobs
            WHERE state = 'queued' AND queue = %(queue)s AND priority = priorities.p
            ORDER BY run_at LIMIT 1) AS run_at
    FROM priorities WHERE p IS NOT NULL
    UNION ALL
    SELECT min(run_at) FROM {schema}.jobs, clock
    WHERE state = 'scheduled' AND queue = %(queue)s AND run_at <= clock.now
)
SELECT coalesce(greatest(clock.now - (SELECT min(run_at) FROM oldest), 0), 0) FROM clock

-- name: cancel
-- waiting | queued | scheduled -> cancelled; an active job is marked
-- cancel_requested instead (its worker learns it from its heartbeat). Nothing
-- for a finished job. A step cancelled ends its edges (flow_cascade).
WITH RECURSIVE clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    UPDATE {schema}.jobs
    SET state = CASE WHEN state = 'active' THEN state ELSE 'cancelled' END,
        finished_at = CASE WHEN state = 'active' THEN finished_at ELSE clock.now END,
        cancel_requested = (state = 'active')
    FROM clock
    WHERE id = %(id)s AND state IN ('waiting', 'scheduled', 'queued', 'active')
    RETURNING id, queue, state, workflow, may_fail
),
{flow_cascade},
{flow_woken},
recorded_input AS (
    SELECT queue, 'cancelled' AS kind, id AS job_id, {flow_data} AS data, 0 AS ord FROM done
    WHERE state = 'cancelled'
    UNION ALL
    {flow_events}
),
{record_events}
SELECT id FROM done, woken

-- name: retry_dead
-- dead -> queued with budgets reset: its attempts keep counting, its budget
-- counts from here (budget_from). A dead job whose key= now belongs to an
-- unfinished job stays dead; of dead jobs sharing a key, the oldest goes back.
WITH candidates AS (
    SELECT j.id, j.key, j.seq FROM {schema}.jobs AS j
    WHERE j.queue = %(queue)s AND j.state = 'dead'
      AND (%(ids)s::text[] IS NULL OR j.id = ANY(%(ids)s::text[]))
      AND (j.key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {schema}.jobs u
          WHERE u.queue = j.queue AND u.key = j.key
            AND u.state IN ('scheduled', 'queued', 'active')))
    FOR UPDATE
),
chosen AS (
    SELECT id FROM candidates WHERE key IS NULL
    UNION ALL
    SELECT * FROM (SELECT DISTINCT ON (key) id FROM candidates
                   WHERE key IS NOT NULL ORDER BY key, seq) AS oldest
),
done AS (
    UPDATE {schema}.jobs AS j
    SET state = 'queued', budget_from = j.attempts, stalls = 0, dead_reason = NULL,
        finished_at = NULL, run_at = extract(epoch FROM now())::float8
    FROM chosen
    WHERE j.id = chosen.id
    RETURNING j.id, j.queue, j.seq, j.attempts, j.workflow
),
recorded_input AS (
    SELECT queue, 'retried' AS kind, id AS job_id,
           json_build_object('by', %(by)s::text, 'attempts', attempts) AS data, seq AS ord
    FROM done
),
{record_events}
SELECT id, workflow FROM done

-- name: purge_dead
-- The dead jobs deleted, with their attempts (and a step's edges, see
-- flow_pruned); returns how many jobs.
WITH pruned AS (
    DELETE FROM {schema}.jobs
    WHERE queue = %(queue)s AND state = 'dead'
      AND (%(ids)s::text[] IS NULL OR id = ANY(%(ids)s::text[]))
    RETURNING id, queue, seq, workflow
),
purged AS (SELECT id, queue, seq FROM pruned),
history AS (
    DELETE FROM {schema}.attempts AS a USING purged WHERE a.job_id = purged.id
),
{flow_pruned},
recorded_input AS (
    SELECT queue, 'purged' AS kind, id AS job_id, NULL::json AS data, seq AS ord FROM purged
),
{record_events}
SELECT count(*) FROM purged

-- name: all_policies
SELECT name, policy::text FROM {schema}.queues

-- name: prune
-- Retention: up to {limit} finished jobs, each of a rule (%(queues)s,
-- %(states)s, %(keeps)s: a queue, a finished state, the seconds its jobs are
-- kept) and finished at least that long ago, oldest first within a rule, read
-- through jobs_finished (the IN names its predicate); deleted with their
-- attempts. Rows are not locked first (that wrote each one twice): the
-- delete tests state and finished_at again, so a job that a retry from the
-- DLQ changed meanwhile is tested as it now is, and left alone. {limit} is
-- written in (an integer): a generic plan that does not know it reads every
-- finished job (250 ms at 200,000, against 30). A job enqueued with
-- unique_for is kept until that window closes too (its enqueue returns it
-- until then). Key buckets refilled go too (of the first {limit} rows).
-- Returns how many jobs.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
victims AS (
    SELECT v.id, r.state, clock.now - r.keep AS cutoff
    FROM unnest(%(queues)s::text[], %(states)s::text[], %(keeps)s::float8[])
        AS r(queue, state, keep)
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT id FROM {schema}.jobs
        WHERE queue = r.queue AND state = r.state
          AND state IN ('completed', 'cancelled', 'dead')
          AND finished_at <= clock.now - r.keep
          AND (unique_for IS NULL OR finished_at <= clock.now - unique_for)
        ORDER BY finished_at
        LIMIT {limit}
    ) AS v
    LIMIT {limit}
),
pruned AS (
    DELETE FROM {schema}.jobs AS j USING victims AS v
    WHERE j.id = v.id AND j.state = v.state AND j.finished_at <= v.cutoff
    RETURNING j.id, j.workflow
),
history AS (
    DELETE FROM {schema}.attempts AS a USING pruned WHERE a.job_id = pruned.id
),
full_buckets AS (  -- buckets of keys refilled: as if never stored (up to {limit})
    SELECT b.queue, b.key FROM {schema}.key_buckets AS b
    JOIN {schema}.queues AS q ON q.name = b.queue, clock,
    LATERAL (SELECT (q.policy->>'rate_limit_per_key')::float8,
                    (q.policy->>'rate_interval_per_key')::float8) AS r(rate, every)
    WHERE r.rate IS NULL OR b.tokens + greatest(clock.now - b.at, 0) * r.rate / r.every >= r.rate
    LIMIT {limit}
),
buckets AS (  -- tokens taken since are seen: the delete tests the row as it now is
    DELETE FROM {schema}.key_buckets AS b
    USING full_buckets AS f, {schema}.queues AS q, clock
    WHERE b.queue = f.queue AND b.key = f.key AND q.name = b.queue
      AND (q.policy->>'rate_limit_per_key' IS NULL
           OR b.tokens + greatest(clock.now - b.at, 0)
              * (q.policy->>'rate_limit_per_key')::float8
              / (q.policy->>'rate_interval_per_key')::float8
              >= (q.policy->>'rate_limit_per_key')::float8)
),
{flow_pruned}
SELECT count(*) FROM pruned
-- name: delete_queue_jobs
-- Every job of the queue but the active ones, with its history: locked by
-- the delete, none of them can be claimed meanwhile. The caller then counts
-- the active ones (a fresh snapshot: those claimed before the delete came)
-- and rolls back if there are any.
WITH pruned AS (  -- each state through its own index (see counts)
    DELETE FROM {schema}.jobs
    WHERE queue = %(queue)s AND (state IN ('completed', 'cancelled', 'dead')
                                 OR state = 'queued' OR state = 'scheduled'
                                 OR state = 'waiting')
    RETURNING id, workflow
),
history AS (
    DELETE FROM {schema}.attempts AS a USING pruned WHERE a.job_id = pruned.id
),
{flow_pruned}
SELECT count(*) FROM pruned

-- name: active_in_queue
SELECT count(*) FROM {schema}.jobs WHERE queue = %(queue)s AND state = 'active'

-- name: delete_queue
WITH events AS (DELETE FROM {schema}.events WHERE queue = %(queue)s),
buckets AS (DELETE FROM {schema}.key_buckets WHERE queue = %(queue)s),
cursors AS (DELETE FROM {schema}.key_cursors WHERE queue = %(queue)s)
DELETE FROM {schema}.queues WHERE name = %(queue)s

-- name: get_job
SELECT {job_columns}, {flow_columns} FROM {schema}.jobs WHERE id = %(id)s

-- name: match_ids
-- Ids that begin with a prefix: a range of the primary key's index (in the
-- column's collation: see base.prefix_range), filtered by the prefix itself.
SELECT id FROM {schema}.jobs
WHERE id >= %(low)s AND id < %(high)s AND starts_with(id, %(prefix)s)
ORDER BY id LIMIT %(limit)s

-- name: get_history
-- The attempts that ended otherwise, then the running or completed one, kept
-- on the job (a row in attempts for it: one an older tenure wrote).
SELECT attempt, fence, worker, started_at, ended_at, outcome, error
FROM {schema}.attempts WHERE job_id = %(id)s
UNION ALL
SELECT attempts, fence, worker, started_at,
       CASE WHEN state = 'completed' THEN finished_at END,
       CASE WHEN state = 'completed' THEN 'completed' END, NULL
FROM {schema}.jobs
WHERE id = %(id)s AND state IN ('active', 'completed') AND started_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM {schema}.attempts a WHERE a.job_id = jobs.id AND a.fence = jobs.fence)
ORDER BY fence

-- name: list_jobs
-- Newest first, each part through its own index (no index by insertion holds
-- every job: a claim and a completion would each write an entry into it).
-- Jobs not started, through jobs_seq; finished ones through jobs_queue_state,
-- each queue's and state's newest first, merged (migration 20: 3 index probes
-- a queue); active ones through jobs_lease (migration 5). A part the state
-- asked for cannot hold never runs (a one-time filter).
SELECT * FROM (
    (SELECT seq, {job_columns}, {flow_columns} FROM {schema}.jobs
     WHERE coalesce(%(state)s::text, 'queued') IN ('scheduled', 'queued', 'waiting')
       AND state IN ('scheduled', 'queued', 'waiting')
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
       AND (%(state)s::text IS NULL OR state = %(state)s)
       AND (%(after)s::bigint IS NULL OR seq < %(after)s)
     ORDER BY seq DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT seq, {job_columns}, {flow_columns} FROM {schema}.jobs
     WHERE coalesce(%(state)s::text, 'dead') IN ('completed', 'cancelled', 'dead')
       AND ctid = ANY(ARRAY(
           SELECT f.ctid FROM {schema}.queues AS q
           CROSS JOIN unnest(ARRAY['completed', 'cancelled', 'dead']) AS s(finished)
           CROSS JOIN LATERAL (
               SELECT ctid, seq FROM {schema}.jobs
               WHERE queue = q.name AND state = s.finished
                 AND state IN ('completed', 'cancelled', 'dead')
                 AND (%(after)s::bigint IS NULL OR seq < %(after)s)
               ORDER BY seq DESC
               LIMIT %(limit)s) AS f
           WHERE (%(queue)s::text IS NULL OR q.name = %(queue)s)
             AND (%(state)s::text IS NULL OR s.finished = %(state)s)
           ORDER BY f.seq DESC
           LIMIT %(limit)s))
     ORDER BY seq DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT seq, {job_columns}, {flow_columns} FROM {schema}.jobs
     WHERE coalesce(%(state)s::text, 'active') = 'active' AND state = 'active'
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
       AND (%(after)s::bigint IS NULL OR seq < %(after)s)
     ORDER BY seq DESC
     LIMIT %(limit)s)
) AS page
ORDER BY seq DESC
LIMIT %(limit)s

-- name: counts
-- Each state through its own index: finished jobs through jobs_queue_state,
-- queued through jobs_ready, scheduled through jobs_scheduled, active
-- through jobs_lease (migrations 5 and 14), waiting through jobs_waiting (17).
SELECT state, count(*) FROM {schema}.jobs
WHERE queue = %(queue)s AND state IN ('completed', 'cancelled', 'dead') GROUP BY state
UNION ALL
SELECT 'queued', count(*) FROM {schema}.jobs WHERE queue = %(queue)s AND state = 'queued'
UNION ALL
SELECT 'scheduled', count(*) FROM {schema}.jobs WHERE queue = %(queue)s AND state = 'scheduled'
UNION ALL
SELECT 'active', count(*) FROM {schema}.jobs WHERE queue = %(queue)s AND state = 'active'
UNION ALL
SELECT 'waiting', count(*) FROM {schema}.jobs WHERE queue = %(queue)s AND state = 'waiting'

-- name: workflow_counts
SELECT state, count(*) FROM {schema}.workflows GROUP BY state

-- name: workflow_outcomes
-- Workflows ended, by outcome, ever (migration 21): the ends appended since
-- the last read are folded into the totals, outcomes in order (concurrent
-- reads lock the totals' rows in the same order), and the totals returned.
WITH gone AS (DELETE FROM {schema}.workflow_ends RETURNING outcome),
folded AS (
    INSERT INTO {schema}.workflow_outcomes AS o (outcome, n)
    SELECT outcome, count(*) FROM gone GROUP BY outcome ORDER BY outcome
    ON CONFLICT (outcome) DO UPDATE SET n = o.n + excluded.n
    RETURNING outcome, n
)
SELECT outcome, n FROM folded
UNION ALL
SELECT outcome, n FROM {schema}.workflow_outcomes
WHERE outcome NOT IN (SELECT outcome FROM folded)

-- name: dead_counts
SELECT dead_reason, count(*) FROM {schema}.jobs
WHERE queue = %(queue)s AND state = 'dead' GROUP BY dead_reason

-- name: queue_names
SELECT name FROM {schema}.queues ORDER BY name

-- name: get_policy
SELECT policy::text FROM {schema}.queues WHERE name = %(queue)s

-- name: lock_policy
-- The queue's stored policy (NULL: none), its row made if missing and locked
-- until commit: a change of some fields reads, merges and writes under the lock.
INSERT INTO {schema}.queues (name) VALUES (%(queue)s)
ON CONFLICT (name) DO UPDATE SET name = excluded.name
RETURNING policy::text

-- name: set_policy
INSERT INTO {schema}.queues (name, policy) VALUES (%(queue)s, %(policy)s::jsonb)
ON CONFLICT (name) DO UPDATE SET policy = excluded.policy

-- name: next_lock_no
SELECT nextval('{schema}.worker_locks')::integer

-- name: liveness_seen
-- Whether this connection's database sees the liveness lock (namespace,
-- lock_no) held, as dead_workers judges it: behind a pooler, the liveness
-- session connects elsewhere (liveness_url), and must reach this database.
SELECT EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = %(namespace)s::bigint::oid AND l.objid = %(lock_no)s::bigint::oid
      AND l.objsubid = 2
)

-- name: register_worker
INSERT INTO {schema}.workers (id, lock_no, hostname, pid, queues, started_at, last_seen)
VALUES (%(id)s, %(lock_no)s, %(hostname)s, %(pid)s, %(queues)s::jsonb,
        extract(epoch FROM now())::float8, extract(epoch FROM now())::float8)
ON CONFLICT (id) DO UPDATE SET lock_no = excluded.lock_no, last_seen = excluded.last_seen

-- name: deregister_worker
DELETE FROM {schema}.workers WHERE id = %(id)s

-- name: list_workers
-- With the leases each holds (active jobs are few: the fleet's slots and
-- claims ahead, read through jobs_lease), and whether its liveness lock is
-- held (as dead_workers judges it).
SELECT w.id, w.hostname, w.pid, w.queues::text, w.started_at, w.last_seen,
       coalesce(h.n, 0),
       EXISTS (
           SELECT 1 FROM pg_locks l
           WHERE l.locktype = 'advisory' AND l.granted
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
             AND l.classid = %(namespace)s::bigint::oid AND l.objid = w.lock_no::bigint::oid
             AND l.objsubid = 2
       )
FROM {schema}.workers AS w
LEFT JOIN (SELECT worker, count(*) AS n FROM {schema}.jobs WHERE state = 'active'
           GROUP BY worker) AS h ON h.worker = w.id
ORDER BY w.started_at

-- name: read_events
-- The rows of events from (%(xid)s, %(id)s) on (the row of the last event
-- read: the reader skips what it delivered of it) in (xid, id) order, of
-- %(queue)s (NULL: every queue), from transactions older than every one still
-- running: that part of the order is final. The last column says whether some
-- are held back (written by a transaction that committed while an older one
-- runs), then the horizon and the snapshot's xmax: what every transaction that
-- had committed when the read began is below.
WITH horizon AS (SELECT pg_snapshot_xmin(s) AS xmin, pg_snapshot_xmax(s) AS xmax
                 FROM pg_current_snapshot() AS s)
SELECT xid::text, id, queue, kind, jobs::text, at, data::text,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.events AS h
                              WHERE (h.xid, h.id) >= (%(xid)s::xid8, %(id)s::bigint)
                                AND h.xid >= horizon.xmin LIMIT 1) AS held),
       horizon.xmin::text, horizon.xmax::text
FROM horizon LEFT JOIN LATERAL (
    SELECT * FROM {schema}.events AS e
    WHERE (e.xid, e.id) >= (%(xid)s::xid8, %(id)s::bigint) AND e.xid < horizon.xmin
      AND (%(queue)s::text IS NULL OR e.queue = %(queue)s)
    ORDER BY e.xid, e.id
    LIMIT %(limit)s
) AS e ON true

-- name: last_event_before
-- The row of the newest events recorded over %(ago)s seconds ago: a walk back
-- through the primary key from the newest row, through the rows recorded since.
SELECT xid::text, id FROM {schema}.events
WHERE at < extract(epoch FROM now())::float8 - %(ago)s
ORDER BY xid DESC, id DESC
LIMIT 1

-- name: events_horizon
-- The oldest transaction still running (every transaction older has ended, so
-- an event recorded from now on is written by this one or a younger one), and
-- the first not yet started (every transaction that committed is older).
SELECT pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text FROM pg_current_snapshot() AS s

-- name: trim_events
-- Retention, per queue's policy: events older than its events_max_age, or
-- beyond its newest events_max_count (defaults %(max_age)s, %(max_count)s).
DELETE FROM {schema}.events AS d
USING (
    SELECT e.xid, e.id FROM (
        SELECT e.xid, e.id, e.at,
               sum(json_array_length(e.jobs))
                   OVER (PARTITION BY e.queue ORDER BY e.xid DESC, e.id DESC)
               - json_array_length(e.jobs) AS newer,
               coalesce((q.policy->>'events_max_age')::float8, %(max_age)s) AS max_age,
               coalesce((q.policy->>'events_max_count')::bigint, %(max_count)s) AS max_count
        FROM {schema}.events AS e LEFT JOIN {schema}.queues AS q ON q.name = e.queue
    ) AS e
    WHERE e.at < extract(epoch FROM now())::float8 - e.max_age OR e.newer >= e.max_count
) AS old
WHERE d.xid = old.xid AND d.id = old.id

-- name: caller_schema
-- Whether the database of a caller's connection has tenure's schema, asked
-- without touching it (a missing table would abort the caller's transaction).
SELECT EXISTS (SELECT FROM pg_catalog.pg_tables
               WHERE schemaname = %(schema)s AND tablename = 'schema_migrations')

-- name: caller_schema_version
SELECT coalesce(max(version), 0) FROM {schema}.schema_migrations

-- name: policies
-- The stored policies of the queues a sweep recovers jobs of.
SELECT name, policy::text FROM {schema}.queues WHERE name = ANY(%(queues)s::text[])

-- name: migration_lock
-- Migrations are applied once across the fleet: the others wait, then find
-- them applied.
SELECT pg_advisory_xact_lock(%(lock)s)

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: create_migrations
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (version integer PRIMARY KEY,
    name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())

-- name: migrations_applied
SELECT version FROM {schema}.schema_migrations

-- name: record_migration
INSERT INTO {schema}.schema_migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: listen
-- Idle workers are woken by a NOTIFY on this channel, its payload a queue's
-- name ('' for a job scheduled for later: it wakes no worker, see wakeup.py).
LISTEN {channel}


-- Workflows (tenure.core.workflows). The parts below move a step's edges and
-- count them on its dependents, in the statement of the step's own transition
-- (so a stale fence, which ends nothing, moves nothing). A plain job has no
-- workflow: its statement finds no edge, and each part after reads nothing.

-- name: flow_columns
-- (A part of the statements that read jobs, after their job_columns.) A
-- step's workflow, the ids of the steps it waits for (in ord order), whether
-- its dependents run if it fails, why it was cancelled; NULLs for a plain job.
-- Then its concurrency key (NULL: none).
workflow, CASE WHEN workflow IS NOT NULL THEN ARRAY(
    SELECT e.upstream FROM {schema}.edges AS e WHERE e.dependent = id ORDER BY e.ord) END,
may_fail, cancel_reason, concurrency_key

-- name: flow_data
-- (A part of events' data.) A step's events name its workflow.
CASE WHEN workflow IS NOT NULL THEN json_build_object('workflow', workflow) END

-- name: flow_release
-- (A part of the statements that complete jobs, after their `done`: the jobs
-- completed, with their workflow.) Each open edge of a step completed is done.
-- Its upstream ids are an array (an initPlan): the index of edges is read by
-- it, or not at all, whatever the plan thinks of `done`.
moved AS (
    UPDATE {schema}.edges AS e SET state = 'done'
    WHERE e.upstream = ANY(ARRAY(SELECT id FROM done WHERE workflow IS NOT NULL))
      AND e.state = 'open'
    RETURNING e.dependent, e.state, e.upstream
),
{flow_counted}

-- name: flow_cascade
-- (A part of the statements that end jobs dead or cancelled, after their
-- `done`: the jobs so ended, with their workflow, may_fail and state.) Each
-- step ended, and every waiting step that one failed ends (recursively: its
-- dependents' edges fail in turn), moves its open edges: failed, or done for
-- a may_fail step. Read from the statement's snapshot; the counts are made
-- on rows locked (flow_counted), so a step cancelled meanwhile stays so.
doomed(id, failed) AS (
    SELECT id, NOT coalesce(may_fail, false) FROM done
    WHERE workflow IS NOT NULL AND state IN ('dead', 'cancelled')
    UNION
    SELECT j.id, NOT coalesce(j.may_fail, false)
    FROM doomed AS x
    JOIN {schema}.edges AS e ON e.upstream = x.id AND e.state = 'open'
    JOIN {schema}.jobs AS j ON j.id = e.dependent AND j.state = 'waiting'
    WHERE x.failed
),
moved AS (
    UPDATE {schema}.edges AS e
    SET state = CASE WHEN e.upstream = ANY(ARRAY(SELECT id FROM doomed WHERE failed))
                     THEN 'failed' ELSE 'done' END
    WHERE e.upstream = ANY(ARRAY(SELECT id FROM doomed)) AND e.state = 'open'
    RETURNING e.dependent, e.state, e.upstream
),
{flow_counted}

-- name: flow_counted
-- (A part of flow_release and flow_cascade, after their `moved`: the edges
-- moved.) Each dependent counts its edges done (pending less) and failed
-- (blocked more), on its row locked: concurrent completions of two of its
-- upstream steps each count once (the second waits for the first's lock, then
-- counts on what it committed). Dependents are locked in id order, then
-- workflows: every statement that counts takes locks in that order. A
-- waiting step with an edge failed is cancelled; with none left pending, it is
-- released (queued, or scheduled by its delay counted from now, or a later
-- run_at). A workflow is failed once an edge is failed, completed once none
-- is pending; one cancelled (or completed) stays so.
tally AS (
    SELECT dependent, count(*) FILTER (WHERE state = 'done') AS done,
           count(*) FILTER (WHERE state = 'failed') AS failed, min(upstream) AS by
    FROM moved GROUP BY dependent
),
waited AS (
    SELECT j.id, j.state FROM {schema}.jobs AS j
    WHERE j.id = ANY(ARRAY(SELECT dependent FROM tally)) ORDER BY j.id FOR UPDATE
),
stepped AS (
    UPDATE {schema}.jobs AS j
    SET pending = j.pending - t.done, blocked = j.blocked + t.failed,
        state = CASE WHEN j.state <> 'waiting' THEN j.state
                     WHEN j.blocked + t.failed > 0 THEN 'cancelled'
                     WHEN j.pending - t.done > 0 THEN 'waiting'
                     WHEN j.run_at > clock.now OR j.release_delay > 0 THEN 'scheduled'
                     ELSE 'queued' END,
        run_at = CASE WHEN j.state = 'waiting' AND j.blocked + t.failed = 0
                           AND j.pending - t.done = 0
                      THEN greatest(j.run_at, clock.now + coalesce(j.release_delay, 0))
                      ELSE j.run_at END,
        cancel_reason = CASE WHEN j.state = 'waiting' AND j.blocked + t.failed > 0
                             THEN 'upstream_failed' ELSE j.cancel_reason END,
        finished_at = CASE WHEN j.state = 'waiting' AND j.blocked + t.failed > 0
                           THEN clock.now ELSE j.finished_at END
    FROM tally AS t, waited AS w, clock
    WHERE j.id = t.dependent AND w.id = j.id
    RETURNING j.id, j.queue, j.workflow, j.state, w.state AS was
),
flows AS (  -- read only when some edge moved: a small table is read whole, else
    SELECT w.id, w.state FROM {schema}.workflows AS w
    WHERE w.id = ANY(ARRAY(SELECT dependent FROM tally)) AND EXISTS (SELECT FROM tally)
    ORDER BY w.id FOR UPDATE
),
flowed AS (
    UPDATE {schema}.workflows AS w
    SET pending = w.pending - t.done, blocked = w.blocked + t.failed,
        state = CASE WHEN w.state NOT IN ('running', 'failed') THEN w.state
                     WHEN w.blocked + t.failed > 0 THEN 'failed'
                     WHEN w.pending - t.done = 0 THEN 'completed' ELSE 'running' END,
        finished_at = CASE WHEN w.state = 'running'
                                AND (w.blocked + t.failed > 0 OR w.pending - t.done = 0)
                           THEN clock.now ELSE w.finished_at END
    FROM tally AS t, flows AS f, clock
    WHERE w.id = t.dependent AND f.id = w.id
    RETURNING w.id, w.state, f.state AS was, t.by
)

-- name: flow_events
-- (A part of recorded_input, after flow_counted.) Steps released, steps
-- cancelled for a failed upstream, workflows ended (recorded on the queue of
-- the step that ended them).
SELECT queue, 'ready' AS kind, id AS job_id, json_build_object('workflow', workflow) AS data,
       0 AS ord
FROM stepped
WHERE was = 'waiting' AND state IN ('queued', 'scheduled')
UNION ALL
SELECT queue, 'cancelled', id,
       json_build_object('reason', 'upstream_failed', 'workflow', workflow), 0
FROM stepped WHERE was = 'waiting' AND state = 'cancelled'
UNION ALL
SELECT (SELECT queue FROM {schema}.jobs WHERE id = by), 'workflow_ended', by,
       json_build_object('workflow', id, 'outcome', state), 0
FROM flowed WHERE was = 'running' AND state <> 'running'

-- name: flow_queues
-- (A part, after flow_counted.) The queues that got a step released, queued:
-- their idle workers are woken.
SELECT queue FROM stepped WHERE was = 'waiting' AND state = 'queued'

-- name: flow_woken
-- (A part, after flow_counted.) Wakes the idle workers of flow_queues (one row).
woken AS (SELECT count(pg_notify(%(channel)s, q)) AS n FROM ({flow_queues}) AS d(q))

-- name: one_ended_flow
-- (one_ended, for the statements that end an attempt dead or cancelled: they
-- end a step's edges, see flow_cascade; a step's events name its workflow.)
{end_attempt},
{flow_cascade},
{flow_woken},
recorded_input AS (
    SELECT done.queue, e.value->>0 AS kind, done.id AS job_id,
           CASE WHEN done.workflow IS NULL THEN e.value->1
                ELSE (coalesce(e.value->1, '{}')::jsonb
                      || jsonb_build_object('workflow', done.workflow))::json END AS data,
           e.ord
    FROM done, json_array_elements(%(events)s::json) WITH ORDINALITY AS e(value, ord)
    UNION ALL
    {flow_events}
),
{record_events}
SELECT queue FROM done, woken

-- name: flow_pruned
-- (A part of the statements that delete jobs, after their `pruned`: the jobs
-- deleted, with their workflow.) Their edges and spawns go with them; a
-- workflow that ended goes with its last job.
cut AS (
    DELETE FROM {schema}.edges AS e
    WHERE e.upstream = ANY(ARRAY(SELECT id FROM pruned WHERE workflow IS NOT NULL))
       OR e.dependent = ANY(ARRAY(SELECT id FROM pruned WHERE workflow IS NOT NULL))
),
unspawned AS (
    DELETE FROM {schema}.spawns AS s
    WHERE s.spawner = ANY(ARRAY(SELECT id FROM pruned WHERE workflow IS NOT NULL))
),
flows_pruned AS (
    DELETE FROM {schema}.workflows AS w
    WHERE w.id = ANY(ARRAY(SELECT workflow FROM pruned WHERE workflow IS NOT NULL))
      AND w.state <> 'running'
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS j
                      WHERE j.workflow = w.id AND j.id <> ALL(ARRAY(SELECT id FROM pruned)))
)

-- name: add_steps
-- (Composed into add_workflow and add_spawned, with their `made`: the
-- workflow the steps go to, if they go.) Steps in one statement, as
-- insert_jobs stores jobs: %(jobs)s a JSON array of [id, queue, task,
-- priority, delay, run_at, max_attempts, timeout, traceparent, pending,
-- may_fail, concurrency_key], %(args)s their arguments; %(edges)s a JSON array of [upstream,
-- dependent, ord]; %(grow)s of [dependent, edges added]: the dependents (steps
-- or the workflow) that wait for more than they did, locked in id order (see
-- flow_counted). A step that waits for none is queued or scheduled (by its
-- delay from now); the others wait, their delay counted from their release.
-- Returns whether the steps went, how many queues were woken, and the clock.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
{made},
input AS (
    SELECT e.j->>0 AS id, e.j->>1 AS queue, e.j->>2 AS task, a.args::json AS args,
           (e.j->>3)::int AS priority, (e.j->>4)::float8 AS delay,
           (e.j->>5)::float8 AS run_at, (e.j->>6)::int AS max_attempts,
           (e.j->>7)::float8 AS timeout, e.j->>8 AS traceparent, (e.j->>9)::int AS pending,
           (e.j->>10)::boolean AS may_fail, e.j->>11 AS concurrency_key, e.ord
    FROM json_array_elements(%(jobs)s::json) WITH ORDINALITY AS e(j, ord)
    JOIN unnest(%(args)s::text[]) WITH ORDINALITY AS a(args, ord) ON a.ord = e.ord
    WHERE EXISTS (SELECT FROM made)
),
ensured AS (
    INSERT INTO {schema}.queues (name) SELECT DISTINCT queue FROM input
    ON CONFLICT (name) DO NOTHING
),
inserted AS (
    INSERT INTO {schema}.jobs (id, queue, task, args, state, priority, run_at, created_at,
                               max_attempts, timeout, traceparent, workflow, may_fail,
                               pending, blocked, release_delay, concurrency_key)
    SELECT id, queue, task, args,
           CASE WHEN pending > 0 THEN 'waiting'
                WHEN coalesce(run_at, now + delay) > now THEN 'scheduled' ELSE 'queued' END,
           priority,
           CASE WHEN pending > 0 THEN coalesce(run_at, now) ELSE coalesce(run_at, now + delay) END,
           now, max_attempts, timeout, traceparent, %(workflow)s, may_fail, pending, 0,
           CASE WHEN pending > 0 AND delay > 0 THEN delay END, concurrency_key
    FROM input, clock
    ORDER BY ord
    RETURNING id, queue, task, state, seq
),
linked AS (
    INSERT INTO {schema}.edges (upstream, dependent, ord)
    SELECT e.j->>0, e.j->>1, e.j->>2 FROM json_array_elements(%(edges)s::json) AS e(j)
    WHERE EXISTS (SELECT FROM made)
),
grow AS (
    SELECT e.j->>0 AS id, (e.j->>1)::int AS n FROM json_array_elements(%(grow)s::json) AS e(j)
    WHERE EXISTS (SELECT FROM made)
),
growing AS (
    SELECT j.id FROM {schema}.jobs AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM grow)) ORDER BY j.id FOR UPDATE
),
grown AS (
    UPDATE {schema}.jobs AS j SET pending = j.pending + g.n
    FROM grow AS g, growing AS l WHERE j.id = g.id AND l.id = g.id
),
flow_grown AS (
    UPDATE {schema}.workflows AS w SET pending = w.pending + g.n
    FROM grow AS g WHERE w.id = g.id
),
woken AS (  -- a job scheduled for later notifies the empty payload: it wakes no
            -- waiter, but tells a sweeper that found the fleet idle (wakeup.py)
    SELECT pg_notify(%(channel)s, q)
    FROM (SELECT DISTINCT CASE state WHEN 'queued' THEN queue ELSE '' END
          FROM inserted WHERE state IN ('queued', 'scheduled')) AS d(q)
),
recorded_input AS (
    SELECT i.queue, 'enqueued' AS kind, i.id AS job_id,
           json_build_object('task', i.task, 'state', i.state, 'workflow', %(workflow)s::text)
               AS data,
           i.seq AS ord
    FROM inserted AS i
),
{record_events}
SELECT (SELECT count(*) FROM made), (SELECT count(*) FROM woken), (SELECT now FROM clock)

-- name: new_workflow
-- (A part of add_workflow.) The workflow's record: nothing while one with
-- its key runs (the partial unique index workflows_key).
made AS (
    INSERT INTO {schema}.workflows (id, key, state, created_at, many, pending)
    SELECT %(workflow)s, %(key)s, 'running', clock.now, %(many)s, %(sinks)s FROM clock
    ON CONFLICT DO NOTHING
    RETURNING id
)

-- name: spawning
-- (A part of add_spawned.) The spawner's workflow, which spawn locked the
-- spawner of.
made AS (SELECT id FROM {schema}.workflows WHERE id = %(workflow)s)

-- name: running_workflow
SELECT id FROM {schema}.workflows WHERE key = %(key)s AND state = 'running'

-- name: get_workflow
-- The workflow's record, with its sinks (its edges' upstream, in ord order).
SELECT id, state, created_at, finished_at, key, many,
       ARRAY(SELECT e.upstream FROM {schema}.edges AS e WHERE e.dependent = w.id ORDER BY e.ord)
FROM {schema}.workflows AS w WHERE id = %(id)s

-- name: workflow_jobs
SELECT {job_columns}, {flow_columns} FROM {schema}.jobs
WHERE workflow = %(id)s ORDER BY seq

-- name: get_many
SELECT {job_columns}, {flow_columns} FROM {schema}.jobs WHERE id = ANY(%(ids)s::text[])

-- name: lock_spawner
-- The running step a spawn comes from, fence-checked and locked until commit.
SELECT workflow FROM {schema}.jobs
WHERE id = %(id)s AND fence = %(fence)s AND state = 'active'
FOR UPDATE

-- name: spawned
SELECT jobs FROM {schema}.spawns WHERE spawner = %(id)s AND seq = %(seq)s

-- name: spawner_edges
SELECT dependent, ord FROM {schema}.edges WHERE upstream = %(id)s

-- name: record_spawn
INSERT INTO {schema}.spawns (spawner, seq, jobs) VALUES (%(id)s, %(seq)s, %(jobs)s::text[]) RETURNING 1

-- name: lock_steps
-- The steps of a workflow, locked in id order (see flow_counted); NOWAIT: a
-- cancel that would wait for a worker's cycle gives way, and tries again.
SELECT id, queue FROM {schema}.jobs WHERE workflow = %(id)s ORDER BY id FOR UPDATE NOWAIT

-- name: cancel_steps
-- Each unfinished step of the workflow, as cancel does to a job.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    UPDATE {schema}.jobs
    SET state = CASE WHEN state = 'active' THEN state ELSE 'cancelled' END,
        finished_at = CASE WHEN state = 'active' THEN finished_at ELSE clock.now END,
        cancel_requested = (state = 'active')
    FROM clock
    WHERE workflow = %(id)s AND state IN ('waiting', 'scheduled', 'queued', 'active')
    RETURNING id, queue, state, workflow
),
recorded_input AS (
    SELECT queue, 'cancelled' AS kind, id AS job_id, json_build_object('workflow', workflow)
           AS data, 0 AS ord
    FROM done WHERE state = 'cancelled'
),
{record_events}
SELECT id FROM done WHERE state = 'cancelled'

-- name: cancel_flow
-- running | failed -> cancelled, its end recorded with the step %(by)s.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    UPDATE {schema}.workflows SET state = 'cancelled', finished_at = clock.now
    FROM clock
    WHERE id = %(id)s AND state IN ('running', 'failed')
    RETURNING id
),
recorded_input AS (
    SELECT %(queue)s::text AS queue, 'workflow_ended' AS kind, %(by)s::text AS job_id,
           json_build_object('workflow', id, 'outcome', 'cancelled') AS data, 0 AS ord
    FROM done WHERE %(by)s::text IS NOT NULL
),
{record_events}
SELECT id FROM done

-- name: flow_ended
-- The steps %(ids)s ended dead or cancelled (in this transaction): their
-- edges, see flow_cascade.
WITH RECURSIVE clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (
    SELECT id, queue, workflow, may_fail, state FROM {schema}.jobs
    WHERE id = ANY(%(ids)s::text[])
),
{flow_cascade},
{flow_woken},
recorded_input AS (
    {flow_events}
),
{record_events}
SELECT n FROM woken

-- name: flow_restored
-- The steps %(ids)s retried from the DLQ (or waiting again): each failed edge
-- of theirs is open again. A step cancelled for a failed upstream that has
-- none failed left waits again (the caller goes on with those); a failed
-- workflow with none left runs again. Not in a workflow cancelled by hand.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
moved AS (
    UPDATE {schema}.edges AS e SET state = 'open'
    WHERE e.upstream = ANY(%(ids)s::text[]) AND e.state = 'failed'
      AND NOT EXISTS (SELECT FROM {schema}.jobs AS s JOIN {schema}.workflows AS w
                      ON w.id = s.workflow AND w.state = 'cancelled' WHERE s.id = e.upstream)
    RETURNING e.dependent
),
tally AS (SELECT dependent, count(*) AS n FROM moved GROUP BY dependent),
waited AS (
    SELECT j.id, j.state FROM {schema}.jobs AS j
    WHERE j.id = ANY(ARRAY(SELECT dependent FROM tally)) ORDER BY j.id FOR UPDATE
),
stepped AS (
    UPDATE {schema}.jobs AS j
    SET blocked = j.blocked - t.n,
        state = CASE WHEN j.state = 'cancelled' AND j.cancel_reason = 'upstream_failed'
                          AND j.blocked - t.n = 0 THEN 'waiting' ELSE j.state END,
        cancel_reason = CASE WHEN j.state = 'cancelled' AND j.blocked - t.n = 0 THEN NULL
                             ELSE j.cancel_reason END,
        finished_at = CASE WHEN j.state = 'cancelled' AND j.cancel_reason = 'upstream_failed'
                                AND j.blocked - t.n = 0 THEN NULL ELSE j.finished_at END
    FROM tally AS t, waited AS w
    WHERE j.id = t.dependent AND w.id = j.id
    RETURNING j.id, j.queue, j.workflow, j.state, w.state AS was
),
flows AS (
    SELECT w.id FROM {schema}.workflows AS w
    WHERE w.id = ANY(ARRAY(SELECT dependent FROM tally)) ORDER BY w.id FOR UPDATE
),
flowed AS (
    UPDATE {schema}.workflows AS w
    SET blocked = w.blocked - t.n,
        state = CASE WHEN w.state = 'failed' AND w.blocked - t.n = 0 THEN 'running'
                     ELSE w.state END,
        finished_at = CASE WHEN w.state = 'failed' AND w.blocked - t.n = 0 THEN NULL
                           ELSE w.finished_at END
    FROM tally AS t, flows AS f
    WHERE w.id = t.dependent AND f.id = w.id
),
recorded_input AS (
    SELECT queue, 'waiting' AS kind, id AS job_id, json_build_object('workflow', workflow)
           AS data, 0 AS ord
    FROM stepped WHERE was = 'cancelled' AND state = 'waiting'
),
{record_events}
SELECT id FROM stepped WHERE was = 'cancelled' AND state = 'waiting'


-- Concurrency keys (issue 39; tenure.core.limits). A queue whose policy is
-- keyed (a per-key limit, or fair) is claimed under its row's lock, as one
-- with a fleet-wide limit is: lock_keyed_queues, then, in the same
-- transaction, complete_and_claim_keyed, which walks its keys (keyed_walk)
-- and claims what the walk picked. A key's active jobs are counted through
-- jobs_key_active (an ended attempt frees its place in the statement that
-- ends it); its rate bucket is a row of key_buckets. Jobs without a key
-- (NULL) are one key of their own, placed as chr(1): before every key in
-- byte order (a key holds no control character).

-- name: lock_keyed_queues
-- lock_queues, for queues with keys; and their due scheduled jobs queued
-- (some, oldest first), so that the walk, which reads queued jobs only,
-- finds them. If %(walks)s (lock_keys comes next), enable_sort is turned
-- off, and jit with it (sorts costed as disabled put the statement past
-- jit's thresholds: seconds of compiling), until lock_keys sets both back
-- (see keys_walk).
WITH idle AS (SELECT set_config('idle_in_transaction_session_timeout', %(idle)s, true)),
locked AS (
    SELECT name FROM {schema}.queues, idle WHERE name = ANY(%(queues)s::text[])
    ORDER BY name FOR NO KEY UPDATE OF queues
),
promoted AS (
    UPDATE {schema}.jobs SET state = 'queued'
    WHERE id IN (SELECT d.id FROM unnest(%(keyed)s::text[]) AS q(name)
                 CROSS JOIN LATERAL (
                     SELECT * FROM (
                         SELECT id FROM {schema}.jobs
                         WHERE state = 'scheduled' AND queue = q.name
                           AND run_at <= extract(epoch FROM now())::float8
                         ORDER BY run_at LIMIT 4 * {limit} FOR UPDATE SKIP LOCKED
                     ) AS d LIMIT 4 * %(want)s::int) AS d)
    RETURNING 1
)
SELECT (SELECT count(*) FROM locked), (SELECT count(*) FROM promoted),
       set_config('tenure.planner', current_setting('enable_sort') || ' ' || current_setting('jit'),
                  true),
       set_config('enable_sort', CASE WHEN %(walks)s THEN 'off'
                                      ELSE current_setting('enable_sort') END, true),
       set_config('jit', CASE WHEN %(walks)s THEN 'off' ELSE current_setting('jit') END, true)

-- name: gate_keyed
-- (A part of complete_and_claim_keyed, written into it.) gate_limited's
-- gate, and the picks of the keyed walk.
{gate_limited},
{keyed_walk}

-- name: keyed_walk
-- (A part of gate_keyed and lock_keys.) The jobs the claim takes from each
-- queue of %(keyed)s (`keyed_picks`: queue, id, ord), best first, at most
-- %(want)s a queue, each within its key's room (key_room). Without fair,
-- the queue's next 2 x %(want)s jobs in its order (`heads`, through
-- jobs_ready) that their keys have room for; when those are fewer than
-- %(want)s (keys at their limit ahead: no head-of-line blocking), the walk
-- adds jobs of other keys. The walk visits the keys with queued jobs in
-- byte order from the queue's cursor (walk_cursor: the key the last claim
-- served), around once, an index seek per key (jobs_key_ready: its best
-- job, which is the key's pick when it has room for one), and stops
-- once the keys with room (key_held: and lock_keys has their locks) make up
-- what the heads left of %(want)s (picks past it are dropped), or %(want)s
-- keys with fair; jobs
-- without a key are one key, visited after the last, with room for those of
-- them among the queue's next 256 (through jobs_ready). It visits at most
-- %(want)s + 64 keys: a claim never reads every key, and the next goes on
-- from where this one served. fair: round robin over the keys the walk
-- visits (each key's best job, then each key's second, ...) in its order;
-- else by priority, run_at. {limit} bounds the reads only as the cycle's
-- do (their plan's estimates): every value above is %(want)s, so that one
-- plan serves every claim up to {limit}.
policy AS (
    SELECT q.name AS queue, coalesce({walk_cursor}, chr(1)) AS cursor,
           (q.policy->>'max_active_per_key')::int AS most,
           (q.policy->>'rate_limit_per_key')::float8 AS rate,
           (q.policy->>'rate_interval_per_key')::float8 AS every,
           coalesce((q.policy->>'fair')::boolean, false) AS fair
    FROM {schema}.queues AS q
    WHERE q.name = ANY(%(keyed)s::text[]) AND NOT coalesce((q.policy->>'paused')::boolean, false)
),
heads AS (
    SELECT p.queue, h.* FROM policy AS p
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT ctid, id, priority, run_at, seq, concurrency_key FROM {schema}.jobs
            WHERE state = 'queued' AND queue = p.queue {skip}
            ORDER BY priority DESC, run_at, seq LIMIT 2 * {limit}
        ) AS h LIMIT 2 * %(want)s::int
    ) AS h
    WHERE NOT p.fair
),
head_picks AS (  -- the room of each key counted at its first head, shared by the others
    SELECT h.queue, h.ctid, h.id, h.priority, h.run_at, h.seq, h.concurrency_key, h.nth FROM (
        SELECT h.*, max(h.first) OVER (PARTITION BY h.queue, h.concurrency_key) AS room FROM (
            SELECT h.*, CASE WHEN h.nth = 1 AND h.concurrency_key IS NOT NULL THEN (
                SELECT {key_held} FROM policy AS p CROSS JOIN clock
                CROSS JOIN (SELECT h.queue, h.concurrency_key) AS k(queue, key)
                WHERE p.queue = h.queue) END AS first
            FROM (SELECT h.*, row_number() OVER (PARTITION BY h.queue, h.concurrency_key
                                                 ORDER BY h.priority DESC, h.run_at, h.seq) AS nth
                  FROM heads AS h) AS h
        ) AS h
    ) AS h
    WHERE h.concurrency_key IS NULL OR h.nth <= h.room
),
short AS (  -- the queues whose heads leave room: the walk goes on, for `need` keys
    SELECT p.*, CASE WHEN p.fair THEN %(want)s::int ELSE %(want)s - (
        SELECT count(*)::int FROM head_picks AS h WHERE h.queue = p.queue) END AS need
    FROM policy AS p
),
walk AS (
    WITH RECURSIVE w(queue, key, wrapped, n, found, room, ctid, id, priority, run_at, seq) AS (
        SELECT queue, cursor, false, 0, 0, 0, NULL::tid, NULL::text, NULL::integer,
               NULL::double precision, NULL::bigint
        FROM short WHERE need > 0
        UNION ALL
        SELECT w.queue, s.key, s.wrapped, w.n + 1, w.found + (r.room > 0)::int, r.room,
               x.ctid, x.id, x.priority, x.run_at, x.seq
        FROM w
        JOIN short AS p ON p.queue = w.queue
        CROSS JOIN clock
        LEFT JOIN LATERAL (  -- the best job of the next key
            SELECT j.concurrency_key AS next, j.ctid, j.id, j.priority, j.run_at, j.seq
            FROM {schema}.jobs AS j
            WHERE j.state = 'queued' AND j.concurrency_key IS NOT NULL
              AND j.queue = w.queue AND j.concurrency_key > w.key {skip}
            ORDER BY j.concurrency_key, j.priority DESC, j.run_at, j.seq LIMIT 1
        ) AS x ON true
        CROSS JOIN LATERAL (SELECT coalesce(x.next, chr(1)), w.wrapped OR x.next IS NULL OFFSET 0)
            AS s(key, wrapped)
        CROSS JOIN LATERAL (SELECT w.queue, s.key OFFSET 0) AS k(queue, key)
        CROSS JOIN LATERAL (SELECT CASE
            WHEN s.key = chr(1) THEN (
                SELECT count(*)::int FROM (
                    SELECT FROM (SELECT h.id, h.concurrency_key FROM {schema}.jobs AS h
                                 WHERE h.state = 'queued' AND h.queue = w.queue
                                 ORDER BY h.priority DESC, h.run_at, h.seq LIMIT 256) AS h
                    WHERE h.concurrency_key IS NULL AND h.id NOT IN (SELECT id FROM heads)
                    LIMIT %(want)s::int) AS h)
            WHEN NOT p.fair AND (w.queue, s.key) IN (SELECT queue, concurrency_key FROM heads)
                THEN 0
            ELSE (SELECT {key_held}) END OFFSET 0) AS r(room)
        WHERE w.n < %(want)s::int + 64 AND w.found < p.need
          AND NOT (w.wrapped AND x.next IS NULL) AND NOT (s.wrapped AND s.key > p.cursor)
    )
    SELECT * FROM w
),
visits AS (
    SELECT w.queue, w.key, w.n, p.fair, w.ctid, w.id, w.priority, w.run_at, w.seq,
           CASE WHEN p.fair THEN least(w.room, greatest(%(want)s::int + 1 - count(*) OVER q, 1))
                ELSE w.room END AS quota
    FROM walk AS w JOIN policy AS p ON p.queue = w.queue
    WHERE w.n > 0 AND w.room > 0
    WINDOW q AS (PARTITION BY w.queue)
),
picks AS (  -- the one pick of a key is the job the walk found; more are read (key_jobs)
    SELECT v.queue, v.n, v.fair, v.id, v.priority, v.run_at, v.seq, 1::bigint AS turn,
           v.key AS concurrency_key, v.ctid
    FROM visits AS v
    WHERE v.key <> chr(1) AND v.quota = 1
    UNION ALL
    SELECT v.queue, v.n, v.fair, c.id, c.priority, c.run_at, c.seq,
           row_number() OVER (PARTITION BY v.queue, v.n ORDER BY c.priority DESC, c.run_at, c.seq)
               AS turn, c.concurrency_key, c.ctid
    FROM visits AS v
    CROSS JOIN LATERAL ({key_jobs}) AS c
    WHERE v.key <> chr(1) AND v.quota > 1 AND c.concurrency_key = v.key
    UNION ALL
    SELECT v.queue, v.n, v.fair, c.id, c.priority, c.run_at, c.seq,
           row_number() OVER (PARTITION BY v.queue ORDER BY c.priority DESC, c.run_at, c.seq),
           NULL, c.ctid
    FROM visits AS v
    CROSS JOIN LATERAL (
        SELECT * FROM (SELECT ctid, id, priority, run_at, seq, concurrency_key, task
                       FROM {schema}.jobs WHERE state = 'queued' AND queue = v.queue
                       ORDER BY priority DESC, run_at, seq LIMIT 256) AS h
        WHERE concurrency_key IS NULL AND id NOT IN (SELECT id FROM heads) {skip}
        LIMIT v.quota
    ) AS c
    WHERE v.key = chr(1)
    UNION ALL
    SELECT queue, 0, false, id, priority, run_at, seq, nth, concurrency_key, ctid FROM head_picks
),
keyed_picks AS (
    SELECT * FROM (
        SELECT queue, id, concurrency_key AS key, ctid AS at, row_number() OVER (
            PARTITION BY queue ORDER BY CASE WHEN fair THEN turn END, CASE WHEN fair THEN n END,
                                        priority DESC, run_at, seq) AS ord
        FROM picks
    ) AS o
    WHERE ord <= %(want)s
)

-- name: key_jobs
-- (A part of keyed_walk.) The best queued jobs of key v.key of queue
-- v.queue, v.quota at most.
SELECT ctid, id, priority, run_at, seq, concurrency_key FROM {schema}.jobs
WHERE state = 'queued' AND concurrency_key IS NOT NULL AND queue = v.queue
  AND concurrency_key = v.key {skip}
ORDER BY priority DESC, run_at, seq LIMIT v.quota

-- name: key_jobs_in_key_order
-- (A part of lock_keys, for key_jobs.) The same, read from the key on in
-- key order (the caller keeps the key's own): planned without sorts (see
-- keys_walk), only jobs_key_ready can read them so.
SELECT ctid, id, priority, run_at, seq, concurrency_key FROM {schema}.jobs
WHERE state = 'queued' AND concurrency_key IS NOT NULL AND queue = v.queue
  AND concurrency_key >= v.key {skip}
ORDER BY concurrency_key, priority DESC, run_at, seq LIMIT v.quota

-- name: key_room
-- (A part of keyed_walk.) How many jobs of key k.key of queue k.queue
-- (policy p) the claim may take: max_active_per_key less its active jobs
-- (but for those this cycle completes), and its bucket's whole tokens.
greatest(0, least(%(want)s::int,
    CASE WHEN p.most IS NOT NULL THEN p.most - (SELECT count(*)::int FROM (
        SELECT FROM {schema}.jobs AS a
        WHERE a.state = 'active' AND a.concurrency_key IS NOT NULL
          AND a.queue = k.queue AND a.concurrency_key = k.key
          AND a.id NOT IN (SELECT id FROM done)
        LIMIT p.most) AS a) END,
    CASE WHEN p.rate IS NOT NULL THEN floor(least(p.rate, coalesce(
        (SELECT b.tokens + greatest(clock.now - b.at, 0) * p.rate / p.every
         FROM {schema}.key_buckets AS b WHERE b.queue = k.queue AND b.key = k.key),
        p.rate)) + 1e-9)::int END))

-- name: shared_keyed
-- (A part of complete_and_claim_keyed, written into it.) The candidates of
-- the queues without keys, within their share, and the picks of those with
-- (keyed_picks, in order), within their room; a pick no longer queued, or
-- locked by another transaction (a cancel), is passed over. Each pick is
-- read at the row version the walk saw (`at`, its ctid: no descent of the
-- primary key), if that version is still the job's (its id) and visible; a
-- job changed since is passed over (the next claim finds its new version).
-- A lateral subquery: never a join the planner may hash, which, from
-- statistics taken while the queue was small, read every queued job of the
-- table at each claim.
(SELECT *, row_number() OVER (PARTITION BY queue ORDER BY priority DESC, run_at, seq) AS nth,
        false AS keyed
 FROM candidates
 UNION ALL
 SELECT k.ctid, k.id, k.queue, k.priority, k.run_at, k.seq,
        row_number() OVER (PARTITION BY k.queue ORDER BY k.ord), true
 FROM (SELECT j.*, p.ord FROM keyed_picks AS p
       CROSS JOIN LATERAL (
           SELECT ctid, id, queue, priority, run_at, seq FROM {schema}.jobs
           WHERE ctid = p.at AND id = p.id AND state = 'queued'
             AND concurrency_key IS NOT DISTINCT FROM p.key
           FOR UPDATE SKIP LOCKED
       ) AS j) AS k) AS c
JOIN gate AS g ON g.name = c.queue AND c.keyed = g.keyed
    AND c.nth <= CASE WHEN g.keyed THEN g.room ELSE g.share END

-- name: bucket_keyed
-- (A part of complete_and_claim_keyed, written into it.) bucket's, and the
-- key the queue's claim served last (its cursor: the key of its last pick
-- claimed), in one write of the queue's row; each start of a key takes a
-- token of its bucket.
{keyed_claims}
bucket AS (
    UPDATE {schema}.queues AS p
    SET rate_tokens = CASE WHEN g.tokens IS NOT NULL THEN g.tokens - n.c ELSE p.rate_tokens END,
        rate_at = CASE WHEN g.tokens IS NOT NULL THEN clock.now ELSE p.rate_at END,
        key_cursor = coalesce(n.cursor, p.key_cursor)
    FROM gate AS g, clock,
         (SELECT c.queue, count(*), (SELECT coalesce(l.concurrency_key, chr(1))
                                    FROM keyed_claims AS l WHERE l.queue = c.queue
                                    ORDER BY l.ord DESC LIMIT 1)
          FROM claimed AS c GROUP BY 1) AS n(queue, c, cursor)
    WHERE p.name = g.name AND n.queue = g.name AND (g.tokens IS NOT NULL OR n.cursor IS NOT NULL)
),
{key_bucket}

-- name: keyed_claims
-- (A part of bucket_keyed and bucket_keys.) The keyed picks claimed.
keyed_claims AS (
    SELECT c.queue, c.concurrency_key, p.ord
    FROM claimed AS c JOIN keyed_picks AS p ON p.id = c.id
),

-- name: key_bucket
-- (A part of bucket_keyed and bucket_keys.) Each start of a key takes a
-- token of its bucket (its rate from `policy`, the claim's read of it).
key_bucket AS (
    INSERT INTO {schema}.key_buckets AS b (queue, key, tokens, at)
    SELECT k.queue, k.key, least(r.rate, coalesce(o.tokens + greatest(clock.now - o.at, 0)
                                                  * r.rate / r.every, r.rate)) - k.n, clock.now
    FROM (SELECT queue, concurrency_key, count(*) FROM keyed_claims
          WHERE concurrency_key IS NOT NULL GROUP BY 1, 2) AS k(queue, key, n)
    CROSS JOIN clock
    JOIN policy AS r ON r.queue = k.queue AND r.rate IS NOT NULL
    LEFT JOIN {schema}.key_buckets AS o ON o.queue = k.queue AND o.key = k.key
    ON CONFLICT (queue, key) DO UPDATE SET tokens = excluded.tokens, at = excluded.at
),

-- name: key_counts
-- The keys of the queue's queued and active jobs (jobs without a key: NULL),
-- most first, then by key: its queued jobs through jobs_ready, its active
-- ones through jobs_lease.
SELECT concurrency_key, count(*) FILTER (WHERE state = 'queued'),
       count(*) FILTER (WHERE state = 'active')
FROM {schema}.jobs
WHERE queue = %(queue)s AND (state = 'queued' OR state = 'active')
GROUP BY concurrency_key
ORDER BY count(*) DESC, concurrency_key NULLS FIRST
LIMIT %(limit)s

-- Keys locked one by one (complete_and_claim_keys). A queue with per-key
-- limits only (no fleet-wide limit, not fair: gate's `rowed`) is claimed
-- without its row's lock, so that claims of different keys run at once: in
-- one transaction, lock_keyed_queues (its due scheduled jobs queued), then
-- lock_keys, which walks its keys (keyed_walk) from its cursor in
-- key_cursors, takes the lock of each key it picks from (a transaction's
-- advisory lock, never waited for: a key another claim holds is passed
-- over, and the walk goes on) and its row's FOR SHARE lock (which a change
-- of its policy, or a claim under its row's lock, waits for), and leaves its
-- picks in the transaction's setting tenure.keyed_picks; then
-- complete_and_claim_keys claims those picks within their keys' room
-- counted anew (gate_keys). Its snapshot is taken once the keys' locks are
-- held, so it counts every claim of them committed before: each key's
-- claims go one at a time, as a queue's do under its row's lock.

-- name: walk_cursor
-- (A part of keyed_walk.) The queue's cursor: its row's (key_cursor).
q.key_cursor

-- name: walk_cursor_own
-- (A part of lock_keys, for walk_cursor.) The queue's cursor in key_cursors.
(SELECT c.cursor FROM {schema}.key_cursors AS c WHERE c.queue = q.name)

-- name: key_held
-- (A part of keyed_walk.) Key k.key's room (key_room).
{key_room} AS room

-- name: key_locked
-- (A part of lock_keys, for key_held.) Key k.key's room, if it has room
-- and its lock could be taken; else 0. The lock is a transaction's advisory
-- lock of one bigint: the schema's namespace, then a hash of the queue and
-- key, never 1 or 2 (the sweep's and the migrations' locks).
(SELECT CASE WHEN x.room > 0 AND pg_try_advisory_xact_lock(
                 (%(namespace)s::bigint << 32)
                 | ((hashtext(k.queue || chr(1) || k.key)::bigint & 4294967295) | 4))
             THEN x.room ELSE 0 END
 FROM (SELECT {key_room} AS room OFFSET 0) AS x) AS room

-- name: keys_walk
-- (Composed into lock_keys and lock_keys_skipping.) The walk of the queues
-- of %(keyed)s, their rows shared and their keys locked; done: the jobs this
-- cycle completes (their keys' places count as free; counted again by
-- complete_and_claim_keys). It is planned with enable_sort off (set by
-- lock_keyed_queues, set back here for the cycle): its seeks of a key ask
-- for key order, which jobs_key_ready gives and jobs_ready only sorted.
-- From statistics that saw no queued job (taken while the queues were
-- empty), the planner costs both at one row, and the taller index's descent
-- lost to a sort: each seek then read every queued job of the queue.
WITH clock AS (SELECT extract(epoch FROM now())::float8 AS now),
done AS (SELECT id FROM unnest(%(ids)s::text[]) AS d(id)),
shared AS (
    SELECT name FROM {schema}.queues WHERE name = ANY(%(keyed)s::text[])
    ORDER BY name FOR SHARE
),
{keyed_walk}
SELECT set_config('tenure.keyed_picks', coalesce(json_agg(json_build_object(
           'queue', queue, 'id', id, 'key', key, 'at', at, 'ord', ord))::text, '[]'), true),
       (SELECT count(*) FROM shared),
       set_config('enable_sort', coalesce(split_part(nullif(current_setting('tenure.planner', true),
                                                            ''), ' ', 1),
                                          current_setting('enable_sort')), true),
       set_config('jit', coalesce(split_part(nullif(current_setting('tenure.planner', true), ''),
                                             ' ', 2), current_setting('jit')), true)
FROM keyed_picks

-- name: gate_keys
-- (A part of complete_and_claim_keys, written into it.) gate_limited's
-- gate, and the picks lock_keys left, each within its key's room counted
-- now (but for jobs without a key).
{gate_limited},
policy AS (
    SELECT q.name AS queue, (q.policy->>'max_active_per_key')::int AS most,
           (q.policy->>'rate_limit_per_key')::float8 AS rate,
           (q.policy->>'rate_interval_per_key')::float8 AS every
    FROM {schema}.queues AS q WHERE q.name = ANY(%(keyed)s::text[])
),
listed AS (
    SELECT l.*, row_number() OVER (PARTITION BY l.queue, l.key ORDER BY l.ord) AS nth
    FROM json_to_recordset(coalesce(nullif(current_setting('tenure.keyed_picks', true), ''),
                                    '[]')::json) AS l(queue text, id text, key text, at tid, ord int)
),
keyed_picks AS (
    SELECT l.queue, l.id, l.key, l.at, l.ord FROM listed AS l
    LEFT JOIN (
        SELECT k.queue, k.key, {key_room} AS room
        FROM (SELECT DISTINCT queue, key FROM listed WHERE key IS NOT NULL) AS k(queue, key)
        JOIN policy AS p ON p.queue = k.queue CROSS JOIN clock
    ) AS r ON r.queue = l.queue AND r.key = l.key
    WHERE l.key IS NULL OR l.nth <= r.room
)

-- name: bucket_keys
-- (A part of complete_and_claim_keys, written into it.) Each start of a key
-- takes a token of its bucket, and the key the queue's claim served last
-- (its cursor) is written to key_cursors, unless another claim is writing
-- it: never waited for. (No queue's own bucket: a queue with rate_limit is
-- rowed, claimed under its row's lock.)
{keyed_claims}
{key_bucket}
served AS (
    SELECT c.queue, (SELECT coalesce(l.concurrency_key, chr(1)) FROM keyed_claims AS l
                     WHERE l.queue = c.queue ORDER BY l.ord DESC LIMIT 1) AS cursor
    FROM (SELECT DISTINCT queue FROM keyed_claims) AS c
),
cursor_made AS (
    INSERT INTO {schema}.key_cursors (queue, cursor)
    SELECT queue, cursor FROM served
    WHERE NOT EXISTS (SELECT FROM {schema}.key_cursors AS c WHERE c.queue = served.queue)
    ON CONFLICT (queue) DO NOTHING
),
cursor_moved AS (
    UPDATE {schema}.key_cursors AS c SET cursor = x.cursor
    FROM (SELECT o.ctid, s.cursor FROM served AS s
          JOIN {schema}.key_cursors AS o ON o.queue = s.queue
          FOR UPDATE OF o SKIP LOCKED) AS x
    WHERE c.ctid = x.ctid
),
