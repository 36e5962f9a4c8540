"""PostgreSQL specifics: URLs, schemas, migrations, bulk enqueue, wake-ups."""

import contextlib
import dataclasses
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from tenure import App, State
from tenure.backends import from_url
from tenure.backends.base import WorkerInfo
from tenure.backends.postgres import PostgresBackend
from tenure.backends.postgres.backend import MIGRATIONS
from tenure.backends.postgres.enqueue import COPY_FROM, Enqueue
from tenure.config import QueuePolicy
from tenure.core.retry import decide_for
from tenure.core.states import Outcome
from tenure.errors import InvalidInput, LivenessLost
from tenure.job import JobSpec
from tests.conformance.helpers import claim_one, register, wait_for
from tests.conformance.test_dlq import bury

DEFAULTS = QueuePolicy()


@pytest.fixture
def pg_url(postgres_server):
    return postgres_server.new_database()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_both_schemes_are_accepted_and_libpq_options_pass_through(scheme):
    b = from_url(f"{scheme}://u:p@db.example:5433/app?sslmode=require&schema=jobs&pool_size=3")
    assert isinstance(b, PostgresBackend)
    assert b.schema == "jobs" and b.pool_size == 3
    assert b.conninfo == "postgresql://u:p@db.example:5433/app?sslmode=require&connect_timeout=5"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql:///nohost", "names no host"),
        ("postgresql://h/db?pool_size=x", "bad PostgreSQL URL option pool_size"),
        ("postgresql://h/db?schema=bad name", "invalid schema"),
    ],
)
def test_bad_postgres_urls__are_refused(url, message):
    with pytest.raises(InvalidInput, match=message):
        from_url(url)


def test_migrations_produce_the_expected_schema(pg_url, open_backend, postgres_server):
    open_backend(pg_url)
    db = pg_url.rsplit("/", 1)[1]
    tables = postgres_server.psql(
        "SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables"
        " WHERE table_schema = 'tenure'", db)  # fmt: skip
    assert tables.split(",") == [
        "attempts", "edges", "events", "jobs", "key_buckets", "key_cursors", "queues",
        "schedules", "schema_migrations", "spawns", "sweeps", "workers", "workflow_ends",
        "workflow_outcomes", "workflows",
    ]  # fmt: skip
    query = "SELECT string_agg(indexname, ',') FROM pg_indexes WHERE schemaname = 'tenure'"
    indexes = postgres_server.psql(query, db)
    assert set(indexes.split(",")) == {
        "jobs_pkey", "jobs_ready", "jobs_scheduled", "jobs_lease", "jobs_key", "jobs_queue_state",
        "jobs_seq", "jobs_finished", "attempts_pkey", "queues_pkey", "workers_pkey", "sweeps_pkey",
        "schema_migrations_pkey", "events_pkey", "schedules_pkey", "jobs_workflow",
        "jobs_waiting", "workflows_pkey", "workflows_key", "edges_pkey", "edges_dependent",
        "spawns_pkey", "jobs_key_ready", "jobs_key_active", "jobs_key_finished",
        "key_buckets_pkey", "key_cursors_pkey", "workflow_outcomes_pkey",
    }  # fmt: skip
    versions = postgres_server.psql("SELECT count(*) FROM tenure.schema_migrations", db)
    assert int(versions) == len(MIGRATIONS)


def test_a_large_batch_goes_by_copy__reads_back_as_given_and_is_stored_once(
    pg_url, open_backend, monkeypatch
):
    backend = open_backend(pg_url)
    copies = []
    copy = Enqueue._copy

    def counted(self, specs):
        copies.append(len(specs))
        return copy(self, specs)

    monkeypatch.setattr(Enqueue, "_copy", counted)
    odd = {"s": "tab\t nl\n cr\r bs\\ \\N nul\x00 é😀", "n": [1e16, -0.0, 5e-324, 2**63 - 1]}
    specs = [
        JobSpec.create("t", {**odd, "i": i}, queue=f"q{i % 3}", delay=(i % 2) * 30.5,
                       priority=i % 5, max_attempts=1 + i % 2, timeout=None if i % 3 else 2.5)
        for i in range(COPY_FROM)
    ]  # fmt: skip
    specs.append(dataclasses.replace(JobSpec.create("t", {}), args=b'{\n\t"a": 1}'))
    jobs = backend.enqueue(specs)
    assert copies == [len(specs)]
    stored = [backend.get(j.id) for j in jobs]
    assert stored == jobs
    assert [orjson.dumps(j.args) for j in stored] == [s.args for s in specs[:-1]] + [b'{"a":1}']
    assert {j.state for j in jobs} == {State.QUEUED, State.SCHEDULED}
    assert backend.enqueue(specs) == jobs  # a retried call: the jobs stored already
    assert sum(sum(backend.counts(q).values()) for q in ("q0", "q1", "q2", "default")) == len(specs)


@contextlib.contextmanager
def _events_table(server, db):
    """The events table and the jobs' trace column, while a test writes with
    this tenure into an older schema."""
    for name in ("events", "job_trace_context"):
        [script] = [text for _, n, text in MIGRATIONS if n == name]
        server.psql(script.replace("{schema}", "tenure"), db)
    keys = ("concurrency_key text", "debounce float8", "unique_for float8")  # migration 18's
    server.psql("; ".join(f"ALTER TABLE tenure.jobs ADD COLUMN {c}" for c in keys), db)
    yield
    server.psql("DROP TABLE tenure.events; ALTER TABLE tenure.queues DROP COLUMN events;"
                " ALTER TABLE tenure.jobs DROP COLUMN traceparent", db)  # fmt: skip
    server.psql("; ".join(f"ALTER TABLE tenure.jobs DROP COLUMN {c.split()[0]}" for c in keys), db)


def test_upgrading_a_schema_with_jobs__keeps_their_payloads(
    pg_url, open_backend, postgres_server, monkeypatch
):
    """Migration 3 (payloads as json) on a database of version 2, with jobs in it."""
    import tenure.backends.postgres.backend as module

    monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS[:2])
    old = open_backend(pg_url)
    db = pg_url.rsplit("/", 1)[1]
    with _events_table(postgres_server, db):
        [job] = old.enqueue([JobSpec.create("t", {"n": [1, 2.5], "s": "é"})])
    postgres_server.psql(
        f"UPDATE tenure.jobs SET result = '{{\"ok\": true}}', progress = '3' WHERE id = '{job.id}'",
        db,
    )
    assert postgres_server.psql("SELECT pg_typeof(args) FROM tenure.jobs", db) == "jsonb"
    monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS)
    new = open_backend(pg_url)
    stored = new.get(job.id)
    assert (stored.args, stored.result, stored.progress) == (
        {"n": [1, 2.5], "s": "é"},
        {"ok": True},
        3,
    )
    assert postgres_server.psql("SELECT pg_typeof(args) FROM tenure.jobs", db) == "json"


def test_upgrading_with_attempts_running__keeps_their_history_and_they_end_once(
    pg_url, open_backend, postgres_server, monkeypatch
):
    """Migration 4 (an attempt's row written when it ends) on a database of
    version 3 with attempts running: their open rows move into their jobs; an
    open row that a worker not yet upgraded writes later is closed by that
    worker (its completion) or by a sweeper, never doubled."""
    import tenure.backends.postgres.backend as module

    monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS[:3])
    old = open_backend(pg_url)
    db = pg_url.rsplit("/", 1)[1]
    with _events_table(postgres_server, db):  # what this tenure's enqueue writes to
        first, second = old.enqueue([JobSpec.create("t"), JobSpec.create("t")])
    # What a claim of version 3 left: the job active, an open row of its attempt.
    claimed = (
        "UPDATE tenure.jobs SET state = 'active', fence = 1, attempts = 1, worker = 'w',"
        " lease_ttl = 30, lease_expires_at = 1e10 WHERE id = '{id}';"
        " INSERT INTO tenure.attempts (job_id, fence, attempt, worker, started_at)"
        " VALUES ('{id}', 1, 1, 'w', {start})"
    )
    postgres_server.psql(claimed.format(id=first.id, start=11.5), db)
    monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS)
    new = open_backend(pg_url)
    assert postgres_server.psql("SELECT count(*) FROM tenure.attempts", db) == "0"
    [running] = new.get(first.id).history
    assert (running.worker, running.started_at, running.outcome) == ("w", 11.5, None)
    # A worker not yet upgraded claims the second job as version 3 did, and
    # completes it as version 3 did; a third it claims is recovered by a sweep.
    postgres_server.psql(claimed.format(id=second.id, start=12.5), db)
    assert len(new.get(second.id).history) == 1
    new.complete(first.id, 1, "one")
    postgres_server.psql(
        "UPDATE tenure.jobs SET state = 'completed', worker = NULL, finished_at = 13,"
        f" lease_ttl = NULL, lease_expires_at = NULL WHERE id = '{second.id}';"
        " UPDATE tenure.attempts SET ended_at = 13, outcome = 'completed'"
        f" WHERE job_id = '{second.id}' AND fence = 1", db)  # fmt: skip
    for job, start in ((first, 11.5), (second, 12.5)):
        [a] = new.get(job.id).history
        assert (a.worker, a.started_at, a.outcome) == ("w", start, Outcome.COMPLETED)
        assert a.ended_at is not None
        assert new.get(job.id).worker is None
    [third] = new.enqueue([JobSpec.create("t")])
    postgres_server.psql(claimed.format(id=third.id, start=14.5), db)
    new.rescue()  # "w" is no registered worker: its attempt crashed
    [a] = new.get(third.id).history
    assert (a.worker, a.started_at, a.outcome) == ("w", 14.5, Outcome.CRASHED)


def test_a_completed_job__is_its_own_last_history_row(pg_url, open_backend, postgres_server):
    """A completion, alone or in a cycle, writes no row in attempts (migration
    6): the job keeps its attempt's worker and start, shown as history only."""
    backend = open_backend(pg_url)
    register(backend, "w")
    backend.enqueue([JobSpec.create("t") for _ in range(3)])
    alone, failed = claim_one(backend, "w"), claim_one(backend, "w")
    backend.complete(alone.id, alone.fence, 1)
    backend.fail(
        failed.id, failed.fence, Outcome.ERROR, "boom", decide_for(failed, Outcome.ERROR, DEFAULTS)
    )
    again = claim_one(backend, "w")
    assert backend.complete_many([(again.id, again.fence, b"2")]) == set()
    db = pg_url.rsplit("/", 1)[1]
    rows = postgres_server.psql("SELECT job_id, outcome FROM tenure.attempts", db)
    assert rows.split("\n") == [f"{failed.id}|error"]
    kept = postgres_server.psql(f"SELECT worker FROM tenure.jobs WHERE id = '{alone.id}'", db)
    assert kept == "w"
    for job in (alone, again):
        stored = backend.get(job.id)
        assert stored.state is State.COMPLETED and stored.worker is None
        [a] = [a for a in stored.history if a.fence == job.fence]
        assert (a.worker, a.outcome, a.ended_at) == ("w", Outcome.COMPLETED, stored.finished_at)


def test_a_heartbeat__does_not_wait_for_a_job_another_transaction_is_writing(
    pg_url, open_backend, postgres_server
):
    """The cycle locks the jobs it completes in an order of its own: a heartbeat
    that waited for them could deadlock with it. A locked job counts as held."""
    import psycopg

    backend = open_backend(pg_url)
    register(backend, "w")
    backend.enqueue([JobSpec.create("t")])
    job = claim_one(backend, "w")
    with psycopg.connect(pg_url) as other, ThreadPoolExecutor(1) as pool:
        other.execute("SELECT 1 FROM tenure.jobs WHERE id = %s FOR UPDATE", (job.id,))
        beat = pool.submit(backend.heartbeat, "w", {(job.id, job.fence)})
        try:
            assert beat.result(timeout=10).lost == set()
        finally:
            other.rollback()  # a heartbeat that waits gets its answer now
    assert backend.heartbeat("w", {(job.id, job.fence)}).lost == set()
    assert backend.heartbeat("w", {(job.id, job.fence + 1)}).lost == {(job.id, job.fence + 1)}


def test_purging_dead_jobs__deletes_their_attempts_too(pg_url, open_backend, postgres_server):
    backend = open_backend(pg_url)
    register(backend, "w")
    kept, purged = bury(backend, "w"), bury(backend, "w")
    db = pg_url.rsplit("/", 1)[1]
    count = "SELECT count(*) FROM tenure.attempts WHERE job_id = '{}'"
    assert int(postgres_server.psql(count.format(purged.id), db)) == 2
    assert backend.purge_dead("default", [purged.id]) == 1
    assert int(postgres_server.psql(count.format(purged.id), db)) == 0
    assert len(backend.get(kept.id).history) == 2


def _open_and_close(url):
    import asyncio

    async def go():
        b = from_url(url)
        await b.open()
        await b.close()

    asyncio.run(go())


def test_ten_workers_starting_at_once__migrate_once(pg_url, postgres_server):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_and_close, args=(pg_url,)) for _ in range(10)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = pg_url.rsplit("/", 1)[1]
    assert int(postgres_server.psql("SELECT count(*) FROM tenure.schema_migrations", db)) == len(
        MIGRATIONS
    )


def test_two_schemas_in_one_database_are_two_tenures(pg_url):
    with App(pg_url) as a, App(pg_url + "?schema=other") as b:
        a.enqueue("t", {})
        assert b.queue().counts()[State.QUEUED] == 0
        assert a.queue().counts()[State.QUEUED] == 1


def test_a_schema_named_with_odd_characters__is_quoted_in_every_statement(pg_url, open_backend):
    """Uppercase, dots, dashes and colons: one identifier, quoted once, in the
    statements, the migrations and the wake-up channels."""
    backend = open_backend(pg_url + "?schema=Odd-Name.v2:x")
    [job] = backend.enqueue([JobSpec.create("t", queue="q")])
    register(backend, "w")
    [claimed] = backend.claim("w", ["q"], 1)
    backend.complete(claimed.id, claimed.fence, {"ok": 1})
    assert backend.get(job.id).state is State.COMPLETED
    assert [e.kind for e in backend.read_events("q", None, 10, 5.0)] == [
        "enqueued", "started", "completed"
    ]  # fmt: skip


def test_bulk_enqueue_of_10000__honours_keys_in_one_call(pg_url, open_backend):
    backend = open_backend(pg_url)
    specs = [JobSpec.create("t", {"i": i}, key=f"k{i % 5000}") for i in range(10_000)]
    started = time.perf_counter()
    jobs = backend.enqueue(specs)
    elapsed = time.perf_counter() - started
    assert len(jobs) == 10_000 and len({j.id for j in jobs}) == 5000
    assert jobs[0].id == jobs[5000].id  # the second spec with a key got the first job
    assert backend.counts("default")[State.QUEUED] == 5000
    assert elapsed < 30  # a hang guard; the rate is measured in benchmarks/


def test_pooled_connections_the_server_dropped__cost_no_error(
    pg_url, open_backend, postgres_server
):
    """The pool checks a connection on checkout only when its socket has
    something to say (the server's goodbye): no round trip otherwise, and no
    error for the caller after the server dropped every pooled connection.
    (A connection that dies while in use fails its statement: the caller's
    retry handles that, as it would with any check.)"""
    b = open_backend(pg_url + "?pool_size=3")
    b.enqueue([JobSpec.create("t", {}) for _ in range(3)])
    db = pg_url.rsplit("/", 1)[1]
    dropped = postgres_server.psql(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
        f" WHERE datname = '{db}' AND application_name = 'tenure') AS t", db)  # fmt: skip
    assert int(dropped) >= 1
    for _ in range(5):  # every pooled connection in turn
        assert b.counts("default")[State.QUEUED] == 3


def test_connections_held_for_cycles_the_server_dropped__cost_no_error(
    pg_url, open_backend, postgres_server
):
    """The cycle keeps its connections out of the pool between cycles; one the
    server hung up on meanwhile is replaced, not used: the cycle succeeds."""
    b = open_backend(pg_url)
    register(b, "w")
    b.enqueue([JobSpec.create("t", {}) for _ in range(2)])
    _, [first] = b.complete_and_claim([], "w", ["default"], 1)
    assert len(b.inner.parts.claiming._held) == 1
    db = pg_url.rsplit("/", 1)[1]
    postgres_server.psql(
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
        f" WHERE datname = '{db}' AND application_name = 'tenure'", db)  # fmt: skip
    lost, [second] = b.complete_and_claim([(first.id, first.fence, b"1")], "w", ["default"], 1)
    assert lost == set()
    assert b.get(first.id).state is State.COMPLETED
    assert second.id != first.id


def test_a_worker_whose_liveness_session_ended__never_claims_under_that_identity_again(
    pg_url, open_backend, postgres_server
):
    """Between a server restart and the worker's next heartbeat, a claim would
    be made under an identity the sweeper already sees dead, and the job
    recovered from under the worker: a claim checks the session first, locally."""
    b = open_backend(pg_url)
    register(b, "w")
    b.enqueue([JobSpec.create("t", {}) for _ in range(2)])
    db = pg_url.rsplit("/", 1)[1]
    postgres_server.psql(
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
        f" WHERE datname = '{db}' AND application_name = 'tenure-liveness'", db)  # fmt: skip
    assert b.claim("w", ["default"], 2) == []
    assert b.counts("default")[State.QUEUED] == 2
    with pytest.raises(LivenessLost):
        b.heartbeat("w", set())
    register(b, "w2")  # what the worker does when its heartbeat raises
    # A cycle that took the old identity before that must still claim nothing
    # under it: the next sweep would record that healthy attempt crashed.
    assert b.claim("w", ["default"], 2) == []
    assert len(b.claim("w2", ["default"], 2)) == 2


def test_a_statement_queued_behind_the_listeners_next_turn__does_not_wait_for_input(
    pg_url, open_backend, portal
):
    """The liveness session's listener steps aside for a statement: one that
    queued for the session while another ran, behind the listener's next turn,
    waited for the socket's next input (a NOTIFY, seconds away)."""
    import asyncio

    b = open_backend(pg_url)
    register(b, "w")  # its session listens
    session = b.inner.liveness.session

    async def staggered() -> list[object]:
        first = asyncio.ensure_future(session.execute("SELECT pg_sleep(0.05)"))
        await asyncio.sleep(0.01)  # the listener queues behind it meanwhile
        second = asyncio.ensure_future(session.execute("SELECT 1"))
        return await asyncio.wait_for(asyncio.gather(first, second), 2)

    for _ in range(3):
        assert portal.run(staggered())[1] == [(1,)]


def test_a_claim__has_one_index_by_queue_for_each_state_it_reads(
    pg_url, open_backend, postgres_server
):
    """A claim reads queued jobs in its order through jobs_ready, due scheduled
    ones through jobs_scheduled. Another index by queue holding them offered
    the planner a second path: one that, where statistics did not know of a
    backlog, read every queued job of the queue and sorted them, at every
    claim (jobs_queue_state did, until migration 14)."""
    open_backend(pg_url)  # migrated
    db = pg_url.rsplit("/", 1)[1]
    rows = postgres_server.psql(
        "SELECT i.relname, coalesce(pg_get_expr(x.indpred, x.indrelid), 'true')"
        " FROM pg_index AS x JOIN pg_class AS i ON i.oid = x.indexrelid"
        " JOIN pg_attribute AS a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]"
        " WHERE x.indrelid = 'tenure.jobs'::regclass AND a.attname = 'queue'", db)  # fmt: skip
    by_queue = dict(line.split("|", 1) for line in rows.strip().splitlines())
    for state, only in (("queued", "jobs_ready"), ("scheduled", "jobs_scheduled")):
        holding = {
            name for name, predicate in by_queue.items()
            if postgres_server.psql(
                f"SELECT {predicate} FROM (VALUES ('{state}'::text, 'k'::text, NULL::text,"
                " NULL::float8, NULL::float8)) AS j(state, key, concurrency_key, debounce,"
                " unique_for)",
                db).strip() == "t"
        }  # fmt: skip
        assert holding - {"jobs_key"} == {only}, (state, by_queue)


def test_the_cycles_generic_plan__reads_jobs_through_indexes_only(pg_url, portal):
    """Prepared statements keep a generic plan: the worker's cycle must not scan
    the jobs table (a LIMIT sent as a parameter made it hash all of it)."""
    import asyncio

    b = PostgresBackend.from_url(pg_url + "?pool_size=1")  # one connection: one prepared cache
    portal.run(b.open())
    try:

        async def plans():
            async with b.db.conn() as conn:
                await _queued(conn, 20000)
                await conn.execute("ANALYZE tenure.jobs")
            for _ in range(8):  # psycopg prepares a statement at its 6th run
                await b.complete_and_claim([], "w", ["default"], 4)
                await b.complete_and_claim([], "w", ["default"], 4, skip_tasks=["new"])
            async with b.db.conn() as conn:
                cur = await conn.execute(
                    "SELECT name, parameter_types::text[] FROM pg_prepared_statements"
                    " WHERE statement LIKE '%%candidates AS%%'"
                )
                prepared = await cur.fetchall()
                out = []
                for name, types in prepared:
                    args = ", ".join(f"NULL::{t}" for t in types)
                    cur = await conn.execute(f"EXPLAIN EXECUTE {name}({args})")
                    out.append("\n".join(r[0] for r in await cur.fetchall()))
                return out

        found = portal.run(asyncio.wait_for(plans(), 60))
        assert len(found) == 2  # the cycle, and its twin passing over some tasks
        for plan in found:
            assert "Seq Scan on jobs" not in plan, plan
            # Completions look their jobs up by id: an index of active jobs keeps
            # an entry for every job claimed since the last vacuum, and a bitmap
            # scan of it (which never marks them dead) made each cycle read them all.
            done = plan.split("CTE done")[1].split("CTE ")[0]
            assert "jobs_pkey" in done and "jobs_lease" not in done, plan
            queued = plan.split("CTE candidates")[1].split("jobs_scheduled")[0]
            assert "jobs_ready" in queued and "Sort" not in queued, plan
    finally:
        portal.run(b.close())


def test_claims_of_any_limit_up_to_64__share_one_plan_and_lock_only_what_they_take(pg_url, portal):
    """Planning the cycle costs more than running it: claims of every limit a
    draining worker asks for (most up to its slots and claims ahead) share one
    prepared statement, planned for a bound above them, and each still takes
    and locks only its own limit (others' claims meanwhile take the rest)."""
    import psycopg

    from tenure.backends.postgres.claiming import plan_bound
    from tenure.backends.postgres.statements import Statements

    limits = [*range(1, 61), *range(60, 0, -7)]

    async def claims(b):
        async with b.db.conn() as conn:
            await _queued(conn, 3000)
        taken = [len((await b.complete_and_claim([], "w", ["default"], n))[1]) for n in limits]
        async with b.db.conn() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_prepared_statements"
                " WHERE statement LIKE '%%candidates AS%%'"
            )
            return taken, (await cur.fetchone())[0]

    assert _on_one_connection(pg_url, portal, claims) == (limits, 1)
    # A claim of 3, its transaction open: others find all but those 3.
    q = Statements({"schema": "tenure", "channel": "tenure"})
    raw, names = q.positional(q.limited("complete_and_claim", plan_bound(3)))
    params = {"ids": "{}", "fences": "{}", "results": "{}", "queues": "{default}",
              "worker": "w", "locked": "{}", "keyed": "{}", "delivery": "at-least-once",
              "lease_ttl": 30.0, "channel": "tenure", "skip": None, "want": 3}  # fmt: skip
    free = "SELECT id FROM tenure.jobs WHERE state = 'queued' FOR UPDATE SKIP LOCKED"
    with psycopg.connect(pg_url) as one, psycopg.connect(pg_url, autocommit=True) as other:
        before = len(other.execute(free).fetchall())
        claimed = psycopg.RawCursor(one)
        claimed.execute(raw, [params[n] for n in names], prepare=True)
        assert len([r for r in claimed.fetchall() if r[0]]) == 3
        assert len(other.execute(free).fetchall()) == before - 3
        one.rollback()


@pytest.mark.parametrize(
    "policy", [QueuePolicy(max_active_per_key=1), QueuePolicy(max_active=3)], ids=["keys", "limit"]
)
def test_a_cycle_of_several_statements_is_one_round_trip(pg_url, portal, tmp_path, policy):
    """A queue with keys or a fleet-wide limit is claimed by several statements
    in one transaction: sent in one pipeline with BEGIN and COMMIT, they cost
    one Sync, one round trip (psycopg's transaction() in a pipeline synced at
    its start and end: 4; without a pipeline, 4 round trips). Read from
    libpq's trace of the one connection of the pool."""
    from psycopg import pq

    async def syncs(b):
        await b.set_policy("default", policy)
        async with b.db.conn() as conn:
            await conn.execute(
                "INSERT INTO tenure.jobs (id, queue, task, args, state, run_at, created_at,"
                " concurrency_key) SELECT md5(g::text), 'default', 't', '{}', 'queued', g, 0,"
                " 'k' || (g % 5) FROM generate_series(1, 20) AS g"
            )
            pgconn = conn.pgconn
        _, jobs = await b.complete_and_claim([], "w", ["default"], 2)  # learns its policy
        assert jobs
        trace = tmp_path / "trace"
        with trace.open("w") as f:
            pgconn.trace(f.fileno())
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            try:
                done = [(j.id, j.fence, b"null") for j in jobs]
                lost, more = await b.complete_and_claim(done, "w", ["default"], 2)
            finally:
                pgconn.untrace()
        assert not lost and more
        return [line.split("\t")[2] for line in trace.read_text().splitlines()
                if line.startswith("F") and line.split("\t")[2] in ("Sync", "Query")]  # fmt: skip

    assert _on_one_connection(pg_url, portal, syncs) == ["Sync"]


async def _queued(conn, n):
    """``n`` queued jobs in queue default, written directly."""
    await conn.execute(
        "INSERT INTO tenure.jobs (id, queue, task, args, state, run_at, created_at)"
        " SELECT md5(g::text), 'default', 't', '{}', 'queued', g, 0"
        f" FROM generate_series(1, {int(n)}) AS g"
    )


def _on_one_connection(pg_url, portal, work):
    """``work(backend)``'s result, on a backend of one connection (one cache of
    prepared statements), within a minute."""
    import asyncio

    b = PostgresBackend.from_url(pg_url + "?pool_size=1")
    portal.run(b.open())
    try:
        return portal.run(asyncio.wait_for(work(b), 60))
    finally:
        portal.run(b.close())


def test_a_listing_reads_finished_jobs_through_their_queues_index(pg_url, portal):
    """jobs_seq leaves finished jobs out (a completion writes no entry into it):
    the listings, across queues and states too, read them through
    jobs_queue_state, each queue's and state's newest first, generic plans."""

    async def plans(b):
        async with b.db.conn() as conn:
            await conn.execute(
                "INSERT INTO tenure.queues (name) VALUES ('a'), ('b');"
                "INSERT INTO tenure.jobs (id, queue, task, args, state, run_at, created_at,"
                " finished_at) SELECT md5(g::text), CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END,"
                " 't', '{}', CASE WHEN g % 3 = 0 THEN 'queued' ELSE 'completed' END, g, 0, g"
                " FROM generate_series(1, 20000) AS g;"
                "ANALYZE tenure.jobs"
            )
            out = {}
            for state in (None, "completed"):
                params = {"queue": None, "state": state, "after": None, "limit": 51}
                cur = await conn.execute(b"EXPLAIN " + b.q["list_jobs"], params)
                out[state] = "\n".join(r[0] for r in await cur.fetchall())
        return out, await b.list(limit=5)

    found, page = _on_one_connection(pg_url, portal, plans)
    for state, plan in found.items():
        assert "Seq Scan on jobs" not in plan, plan
        assert "jobs_queue_state" in plan, (state, plan)
    assert [j.state for j in page.jobs] == [State.COMPLETED, State.COMPLETED, State.QUEUED,
                                            State.COMPLETED, State.COMPLETED]  # fmt: skip
    assert [j.queue for j in page.jobs] == ["a", "b", "a", "b", "a"]


def test_every_statement__is_short_enough_for_psycopgs_cache_of_conversions():
    """psycopg converts a statement of more than 4 KiB again at every execution
    (the cycle's, with its comments, cost a seventh of a draining worker)."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    q = PostgresBackend.from_url("postgresql://localhost/db").q
    sizes = {n: len(q.limited(n, 64) if n in q.with_limit else q[n]) for n in q}
    # But the cycles, sent with positional parameters (a raw cursor converts
    # nothing: Statements.positional), with a workflow's release in them.
    for name in [n for n in sizes if n.startswith(("complete_and_claim", "lock_keys"))]:
        raw, names = q.positional(q.limited(name, 64))
        assert b"%(" not in raw and len(names) == len(set(names))
        assert raw.count(b"$") >= len(names) and b"$%d" % (len(names) + 1) not in raw
        del sizes[name]
    # And the ends dead or cancelled, rare, which cascade to a workflow's steps.
    for name in ("bury", "end_cancelled", "cancel"):
        assert sizes.pop(name) < 6000
    assert max(sizes.values()) <= MAX_CACHED_STATEMENT_LENGTH


def test_the_pool__gives_back_what_cancelled_calls_held_or_waited_for(pg_url):
    """A call cancelled mid-statement or while waiting for a connection leaves
    the pool whole: its one connection serves the next call at once."""
    import asyncio

    from tenure.backends.postgres.pool import Pool

    async def configure(conn):
        pass

    async def main() -> None:
        pool = Pool(pg_url, size=1, wait=5.0, configure=configure)

        async def sleep_on_it(started: asyncio.Event) -> None:
            async with pool.connection() as conn:
                started.set()
                await conn.execute("SELECT pg_sleep(30)")

        started = asyncio.Event()
        holder = asyncio.create_task(sleep_on_it(started))
        await started.wait()
        waiter = asyncio.create_task(pool.getconn())  # the pool is full: it waits
        await asyncio.sleep(0)
        waiter.cancel()
        holder.cancel()
        await asyncio.wait([holder, waiter])
        assert holder.cancelled() and waiter.cancelled()
        async with asyncio.timeout(4.0), pool.connection() as conn:  # not the 5 s wait
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
        await pool.close()
        assert pool._count == 0 and not pool._idle

    asyncio.run(main())


def test_a_released_job__wakes_the_idle_workers_of_its_queue(pg_url, open_backend):
    worker, idle = open_backend(pg_url), open_backend(pg_url)
    idle.wait_for_jobs(["default"], 0.01)  # listening from now on
    [job] = worker.enqueue([JobSpec.create("t", {})])
    started = time.monotonic()
    idle.wait_for_jobs(["default"], 10.0)  # the enqueue's wake-up, spent here
    assert time.monotonic() - started < 5.0
    claimed = claim_one(worker, register(worker, "w-1"))
    worker.release(job.id, claimed.fence)
    started = time.monotonic()
    idle.wait_for_jobs(["default"], 10.0)  # its wake-up waits for it if it came first
    assert time.monotonic() - started < 5.0  # woken by the release, not timed out at 10 s


def test_a_first_wait__returns_once_listening_for_what_came_before(pg_url, open_backend):
    """A job committed after a worker's last claim but before its LISTEN sent
    no NOTIFY it hears: its first wait returns as soon as it listens, so that
    it claims again, rather than sleeping its whole idle poll."""
    worker, idle = open_backend(pg_url), open_backend(pg_url)
    worker.enqueue([JobSpec.create("t", {})])  # before idle listens: its NOTIFY goes unheard
    started = time.monotonic()
    idle.wait_for_jobs(["default"], 10.0)
    assert time.monotonic() - started < 5.0


def test_the_keyed_cycles_generic_plan__reads_jobs_through_indexes_only(pg_url, portal):
    """The cycle of a queue with keys walks them through jobs_key_ready (a seek
    per key), never a scan of the jobs table, whatever the queue holds."""
    import asyncio

    b = PostgresBackend.from_url(pg_url + "?pool_size=1")
    portal.run(b.open())
    try:

        async def plans():
            async with b.db.conn() as conn:
                await conn.execute(
                    "INSERT INTO tenure.jobs (id, queue, task, args, state, run_at, created_at,"
                    " concurrency_key) SELECT md5(g::text), 'default', 't', '{}', 'queued', g, 0,"
                    " 'k' || (g % 500) FROM generate_series(1, 20000) AS g"
                )
                await conn.execute("ANALYZE tenure.jobs")
            for fair in (False, True):
                await b.set_policy("default", QueuePolicy(max_active_per_key=1, fair=fair))
                for _ in range(8):  # psycopg prepares a statement at its 6th run
                    _, jobs = await b.complete_and_claim([], "w", ["default"], 4)
                    await b.complete_and_claim([(j.id, j.fence, b"null") for j in jobs], "w",
                                               [], 0)  # fmt: skip
            async with b.db.conn() as conn:
                cur = await conn.execute(
                    "SELECT name, parameter_types::text[], statement LIKE '%%RECURSIVE%%'"
                    " FROM pg_prepared_statements WHERE statement LIKE '%%keyed_picks AS%%'"
                )
                out = []
                for name, types, walks in await cur.fetchall():
                    args = ", ".join(f"NULL::{t}" for t in types)
                    cur = await conn.execute(f"EXPLAIN EXECUTE {name}({args})")
                    out.append((walks, "\n".join(r[0] for r in await cur.fetchall())))
                return out

        # fair's cycle, and max_active_per_key's walk (lock_keys) and cycle
        found = portal.run(asyncio.wait_for(plans(), 60))
        assert sorted(walks for walks, _ in found) == [False, True, True]
        for walks, plan in found:
            assert "Seq Scan on jobs" not in plan, plan
            assert "jobs_key_active" in plan, plan
            assert "jobs_key_ready" in plan or not walks, plan
    finally:
        portal.run(b.close())


def test_the_keyed_walk__seeks_keys_through_their_index_after_statistics_of_no_queued_job(
    pg_url, open_backend
):
    """Statistics taken while the jobs table held no queued job cost a seek of
    a key at one row through either index: the walk must still seek through
    jobs_key_ready, not read the queue's queued jobs through jobs_ready at
    each key (lock_keyed_queues plans it without sorts), and the cycle after
    it is planned with the session's settings again."""
    import psycopg

    from tenure.backends.postgres.statements import text_array

    backend = open_backend(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure.jobs (id, queue, task, args, state, run_at, created_at,"
            " concurrency_key) SELECT md5(g::text), 'old', 't', '{}', 'completed', g, 0,"
            " 'k' || (g / 10) FROM generate_series(1, 5000) AS g"
        )
        conn.execute("VACUUM ANALYZE tenure.jobs")
    backend.set_policy("q", QueuePolicy(max_active_per_key=1))
    backend.enqueue([JobSpec.create("t", {}, queue="q", concurrency_key=f"k{i % 500}")
                     for i in range(5000)])  # fmt: skip
    q = PostgresBackend.from_url(pg_url).q
    params = {"ids": "{}", "keyed": text_array(["q"]), "want": 24, "skip": None,
              "namespace": PostgresBackend.from_url(pg_url).db.namespace, "queues": [],
              "idle": "60000", "walks": True}  # fmt: skip
    walk, names = q.positional(q.limited("lock_keys", 24))
    with psycopg.connect(pg_url) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(q.limited("lock_keyed_queues", 24), params)
        cur = psycopg.RawCursor(conn)
        cur.execute(b"EXPLAIN (ANALYZE, COSTS OFF) " + walk, [params[n] for n in names])
        plan = "\n".join(r[0] for r in cur.fetchall())
        after = conn.execute("SELECT current_setting('enable_sort'), current_setting('jit')")
        assert after.fetchone() == ("on", "on")
        conn.rollback()
    seek = plan.split("Index Cond: ((queue = w.queue) AND (concurrency_key > w.key))")[0]
    assert seek.rsplit("->", 1)[1].strip().startswith("Index Scan using jobs_key_ready"), plan
    assert "Filter: ((concurrency_key IS NOT NULL) AND (concurrency_key >" not in plan, plan
    assert "Seq Scan on jobs" not in plan, plan


def test_a_keys_bucket_refilled__is_pruned(open_backend, pg_url, postgres_server):
    backend = open_backend(pg_url)
    backend.set_policy("q", QueuePolicy(rate_limit_per_key=1, rate_interval_per_key=0.05))
    backend.enqueue([JobSpec.create("t", {}, queue="q", concurrency_key=k) for k in "ab"])
    assert len(backend.claim(register(backend, "w"), ["q"], 2)) == 2
    db = pg_url.rsplit("/", 1)[1]
    assert postgres_server.psql("SELECT count(*) FROM tenure.key_buckets", db) == "2"

    def pruned() -> bool:  # once both refilled (after 0.05 s)
        backend.prune(1000)
        return postgres_server.psql("SELECT count(*) FROM tenure.key_buckets", db) == "0"

    wait_for(pruned)


def test_a_claim_of_a_queue_with_per_key_limits_only__takes_other_keys_meanwhile(
    pg_url, open_backend
):
    """Such a queue's claims lock their keys, not its row: while another claim
    is in flight (its transaction open, holding the key it picked), a claim
    takes the other keys' jobs at once, and none of the held key's."""
    import psycopg

    from tenure.backends.postgres.statements import text_array

    backend = open_backend(pg_url)
    backend.set_policy("q", QueuePolicy(max_active_per_key=1))
    backend.enqueue([JobSpec.create("t", {}, queue="q", concurrency_key=k) for k in "aabb"])
    worker = register(backend, "w")
    q = PostgresBackend.from_url(pg_url).q
    walk, names = q.positional(q.limited("lock_keys", 1))
    params = {"ids": "{}", "keyed": text_array(["q"]), "want": 1, "skip": None,
              "namespace": PostgresBackend.from_url(pg_url).db.namespace}  # fmt: skip
    with psycopg.connect(pg_url) as held, ThreadPoolExecutor(1) as pool:
        psycopg.RawCursor(held).execute(walk, [params[n] for n in names])  # picks a's first
        claim = pool.submit(backend.claim, worker, ["q"], 4)
        try:
            claimed = claim.result(timeout=20)
        finally:
            held.rollback()
    assert [j.concurrency_key for j in claimed] == ["b"]


# A guard of a nanosecond lets any sweep through: a sweep refused with it was
# skipped by the backend, knowing the fleet idle.
NO_GUARD = 1e-9


def test_a_sweep_that_found_the_fleet_idle__skips_the_next_until_a_job_comes(pg_url, open_backend):
    sweeper, producer = open_backend(pg_url), open_backend(pg_url)
    register(sweeper, "w-1")  # its liveness session listens
    assert sweeper.rescue().swept
    assert not sweeper.rescue(min_interval=NO_GUARD).swept
    # Scheduled an hour ahead, by a batch's COPY: a NOTIFY that wakes no waiter
    # makes the next one sweep, which finds the fleet idle again.
    [later, *_] = producer.enqueue(JobSpec.create_many("t", [{}] * COPY_FROM, delay=3600))
    assert later.state is State.SCHEDULED
    wait_for(lambda: sweeper.rescue(min_interval=NO_GUARD).swept)
    assert not sweeper.rescue(min_interval=NO_GUARD).swept
    producer.enqueue([JobSpec.create("t", {}, delay=0.2)])  # due within the idle spell
    wait_for(lambda: sweeper.rescue(min_interval=NO_GUARD).swept)
    assert sweeper.rescue(min_interval=NO_GUARD).swept  # due soon: not idle
    wait_for(lambda: sweeper.rescue(min_interval=NO_GUARD).promoted)
    assert sweeper.rescue(min_interval=NO_GUARD).swept  # a job queued: not idle


def test_a_job_claimed_after_a_sweep_found_the_fleet_idle__is_recovered_when_its_holder_dies(
    pg_url, open_backend, portal
):
    sweeper = open_backend(pg_url)
    register(sweeper, "w-1")
    assert sweeper.rescue().swept
    assert not sweeper.rescue(min_interval=NO_GUARD).swept
    holder = PostgresBackend.from_url(pg_url)
    portal.run(holder.open())
    try:
        portal.run(holder.register_worker(WorkerInfo("w-2", "test-host", 1, ("default",))))
        [job] = portal.run(holder.enqueue([JobSpec.create("t", {})]))
        [claimed] = portal.run(holder.claim("w-2", ["default"], 1))
    finally:
        portal.run(holder.close())  # as a kill -9: its lock goes, its row stays
    # Within the idle spell (10 s): the enqueue's NOTIFY ended it.
    rescued = wait_for(lambda: sweeper.rescue(min_interval=NO_GUARD).rescued, timeout=3.0)
    assert [(r.job_id, r.fence, r.outcome) for r in rescued] == [
        (job.id, claimed.fence, Outcome.CRASHED)
    ]
