"""The PostgreSQL backend: the fleet's backend.

A connection pool (psycopg 3) serves the verbs; each verb is one transaction,
most of them one statement. Claims take rows with ``FOR UPDATE SKIP LOCKED``;
every settle is fence-checked in SQL; rescue is guarded fleet-wide by
``pg_try_advisory_xact_lock``. Liveness is a session advisory lock per worker
(see ``liveness.py``); idle workers are woken by LISTEN/NOTIFY.
"""

from __future__ import annotations

import builtins
import contextlib
import zlib
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import orjson
import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from tenure.backends.base import (
    Capabilities,
    DerivedVerbs,
    LeaseRef,
    Page,
    Renewal,
    Rescued,
    RescueReport,
    Tick,
    WorkerInfo,
)
from tenure.backends.checks import (
    check_cursor,
    check_listing,
    check_match,
    check_prune_limit,
    check_retried_by,
    check_schedules,
    check_tick,
    claim_limit,
    cursor_seq,
    last_proof,
    not_cancellable,
    prefix_range,
    queue_busy,
)
from tenure.backends.postgres.events import TRIM_INTERVAL, EventReading
from tenure.backends.postgres.liveness import Liveness, Wakeups, hung_up
from tenure.backends.postgres.pool import Pool
from tenure.backends.postgres.statements import Statements
from tenure.backends.postgres.steps import Steps, run_steps
from tenure.backends.postgres.within import CallerTransactions
from tenure.backends.rows import JOB_COLUMNS, attempt_from_row, job_from_row
from tenure.backends.sqlfile import latest_version, load_migrations
from tenure.config import DEFAULT_MAX_PAYLOAD, QueuePolicy
from tenure.core import retention
from tenure.core.events import EventKind, RetriedBy, failure_events
from tenure.core.names import check_job_id, check_job_ids, check_name
from tenure.core.payload import encode
from tenure.core.retry import CANCELLED, Decision, decide_for
from tenure.core.states import TERMINAL, DeadReason, Outcome, State
from tenure.core.urls import MAX_PAYLOAD, UrlOptions, one_line, redacted, scrub
from tenure.errors import (
    BackendUnavailable,
    InvalidInput,
    JobNotFound,
    LeaseLost,
)
from tenure.job import Job, JobSpec, check_specs

MIGRATIONS = load_migrations("tenure.backends.postgres.migrations")
LATEST = latest_version(MIGRATIONS)
FENCE = 1 + JOB_COLUMNS.index("fence")  # in a row of complete_and_claim
UNREACHABLE = psycopg.OperationalError  # -> BackendUnavailable (PoolTimeout is one)
HELD_FOR_CYCLES = 3  # a worker has up to 3 cycles in flight
COPY_FROM = 100  # jobs in a batch from which COPY (5 round trips, less server time) wins
# How long a transaction of several statements that others wait on (a sweep, a
# limited queue's claim) may idle before the server ends it: its worker froze.
IDLE_MS = "1000"
COPY_CHUNK = 200  # jobs per write of a COPY: the server stores one chunk while the next is made
URL_OPTIONS = {"schema", "max_payload", "pool_size"}
LIBPQ_OPTIONS = frozenset(o.keyword.decode() for o in pq.Conninfo.get_defaults())
CONNECT_TIMEOUT = 5  # seconds; libpq's own default is to wait as long as TCP does
# A call waits this long for a connection while all of the pool's are in use.
POOL_WAIT = 5.0
MAX_CONNECT_TIMEOUT = 3600
MAX_POOL_SIZE = 1000
# Wake-ups are NOTIFY on the channel tenure.<schema>, an identifier: 63 bytes at most.
MAX_SCHEMA_LENGTH = 63 - len("tenure.")
DEFAULTS = QueuePolicy()

__all__ = ["PostgresBackend"]


class PostgresBackend(DerivedVerbs, EventReading):
    """Jobs in PostgreSQL, under their own schema (default ``tenure``)."""

    # Fuller cycles cost its server less CPU per job (docs/design.md).
    capabilities = Capabilities(remote=True, costly_cycles=True)

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "tenure",
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        pool_size: int = 8,
    ) -> None:
        check_name("schema", schema)
        if len(schema) > MAX_SCHEMA_LENGTH:
            raise InvalidInput(
                f"schema name {schema!r} is too long: at most {MAX_SCHEMA_LENGTH} characters "
                "(its wake-up channel, tenure.<schema>, is a PostgreSQL identifier)"
            )
        self.url = conninfo
        self.safe_url = redacted(conninfo)
        self.conninfo = conninfo
        self.schema = schema
        self.max_payload = max_payload
        self.pool_size = pool_size
        self.namespace = zlib.crc32(f"tenure:{schema}".encode()) & 0x7FFFFFFF
        self.channel = f"tenure.{schema}"
        self.q = Statements({"schema": schema, "channel": self.channel})
        self._limited: set[str] = set()  # queues whose last claim found a fleet-wide limit
        # Connections kept out of the pool for the cycle (see _cycle_fetch), at
        # most HELD_FOR_CYCLES and never more than a third of the pool.
        self._held: list[psycopg.AsyncConnection[Any]] = []
        self._hold_at_most = min(HELD_FOR_CYCLES, (pool_size - 1) // 2)
        self._pool: Pool | None = None
        self._effects: psycopg.Connection[Any] | None = None  # handlers' own transactions
        self.liveness = Liveness(conninfo, self.namespace)
        self.wakeups = Wakeups(conninfo, self.q["listen"])
        self._last_trim = -TRIM_INTERVAL  # when this sweeper last applied events' retention
        self.callers = CallerTransactions(self, LATEST)  # enqueue in a caller's transaction

    @classmethod
    def from_url(cls, url: str) -> PostgresBackend:
        """A backend (not open yet) for ``postgresql://user[:password]@host[:port]/db``.
        tenure's options: ``schema`` (default ``tenure``), ``max_payload`` (bytes
        of JSON), ``pool_size`` (connections); libpq's (``sslmode``,
        ``connect_timeout``, default 5 s…) go to libpq, which must know them."""
        options = UrlOptions(url, "PostgreSQL", URL_OPTIONS | LIBPQ_OPTIONS)
        parts = urlsplit(url)
        if not parts.hostname and "host" not in options.values:
            raise InvalidInput(
                f"PostgreSQL URL {options.safe_url!r} names no host: postgresql://user@host/db"
            )
        libpq = {k: v for k, v in options.values.items() if k not in URL_OPTIONS}
        libpq["connect_timeout"] = str(
            options.integer("connect_timeout", CONNECT_TIMEOUT, low=1, high=MAX_CONNECT_TIMEOUT)
        )
        query = urlencode(libpq, quote_via=quote)  # libpq reads "+" as itself, not a space
        conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, query, ""))
        try:
            conninfo_to_dict(conninfo)  # what libpq cannot read fails here, not at connect
        except psycopg.Error as exc:
            raise InvalidInput(
                f"bad PostgreSQL URL {options.safe_url!r}: {one_line(scrub(str(exc), url))}"
            ) from None
        return cls(
            conninfo,
            schema=options.text("schema", "tenure"),
            max_payload=options.integer(
                "max_payload", DEFAULT_MAX_PAYLOAD, low=1, high=MAX_PAYLOAD
            ),
            pool_size=options.integer("pool_size", 8, low=1, high=MAX_POOL_SIZE),
        )

    # -- plumbing ----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection in autocommit mode: each statement is its own
        transaction, one round trip. Storage errors become BackendUnavailable."""
        if self._pool is None:
            raise BackendUnavailable("the PostgreSQL backend is not open")
        try:
            async with self._pool.connection() as conn:
                yield conn
        except UNREACHABLE as exc:
            raise self._unavailable("PostgreSQL is unavailable", exc) from exc

    @contextlib.asynccontextmanager
    async def _tx(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside one transaction, for verbs of several statements."""
        async with self._conn() as conn, conn.transaction():
            yield conn

    async def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        """The rows of one named statement (one round trip, atomic on its own)."""
        return await self._fetch(self.q[name], params)

    async def _fetch(self, query: bytes, params: dict[str, Any] | None) -> list[Any]:
        async with self._conn() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def _cycle_fetch(self, query: bytes, params: dict[str, Any]) -> list[Any]:
        """``_fetch`` for the worker's cycle, on a connection held out of the pool
        between cycles: taking one from the pool and giving it back cost more
        than the statement's own client side. A held connection the server hung
        up on, one that failed, or one whose call was cancelled goes back to the
        pool, which disposes of it."""
        if self._pool is None:
            raise BackendUnavailable("the PostgreSQL backend is not open")
        conn = self._held.pop() if self._held else None
        if conn is not None and hung_up(conn):
            await self._pool.putconn(conn)
            conn = None
        try:
            if conn is None:
                conn = await self._pool.getconn()
            if params["queues"] != "{}" and self.liveness.seems_lost(params["worker"]):
                # Claimed under an identity storage no longer sees alive, a job
                # would be recovered from under us: claim nothing, the next
                # heartbeat registers us again. Checked with the connection in
                # hand: taking one from the pool may have waited out a restart.
                params = {**params, "queues": "{}"}
            cur = await conn.execute(query, params, prepare=True)
            rows = await cur.fetchall()
        except BaseException as exc:
            if conn is not None:
                await self._pool.putconn(conn)
            if isinstance(exc, UNREACHABLE):
                raise self._unavailable("PostgreSQL is unavailable", exc) from exc
            raise
        if len(self._held) < self._hold_at_most:
            self._held.append(conn)
        else:
            await self._pool.putconn(conn)
        return rows

    def _unavailable(self, what: str, exc: BaseException) -> BackendUnavailable:
        """BackendUnavailable for a driver's error, in one line and without the
        password: libpq's messages may quote the connection string."""
        return BackendUnavailable(f"{what}: {one_line(scrub(str(exc), self.conninfo))}")

    async def open(self) -> None:
        """Connect (the first connection is made here, directly: a failure says
        the server's reason at once, or within ``connect_timeout``) and migrate."""
        if self._pool is not None:
            return
        pool = Pool(self.conninfo, size=self.pool_size, wait=POOL_WAIT, configure=_configure)
        try:
            await pool.putconn(await pool.getconn())
        except UNREACHABLE as exc:
            await pool.close()
            raise self._unavailable(f"cannot connect to {self.safe_url}", exc) from None
        self._pool = pool
        try:
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def _migrate(self) -> None:
        """Apply pending migrations, once across the fleet (an advisory lock)."""
        async with self._tx() as conn:
            await conn.execute(self.q["migration_lock"], {"lock": (self.namespace << 32) | 2})
            await conn.execute(self.q["create_schema"])
            await conn.execute(self.q["create_migrations"])
            cur = await conn.execute(self.q["migrations_applied"])
            done = {v for (v,) in await cur.fetchall()}
            if max(done, default=0) > LATEST:
                raise BackendUnavailable(
                    f"schema {self.schema} has version {max(done)}, newer than this tenure "
                    f"knows ({LATEST}): upgrade tenure"
                )
            for version, name, script in MIGRATIONS:
                if version not in done:
                    await conn.execute(self.q.render(script))
                    await conn.execute(
                        self.q["record_migration"], {"version": version, "name": name}
                    )

    async def close(self) -> None:
        if self._effects is not None:
            self._effects.close()
            self._effects = None
        await self.wakeups.close()
        await self.liveness.close()
        if self._pool is not None:
            while self._held:
                await self._pool.putconn(self._held.pop())
            await self._pool.close()
            self._pool = None

    async def _notify(self, conn: psycopg.AsyncConnection[Any], queues: Collection[str]) -> None:
        """Wake idle workers of these queues when the transaction commits."""
        if queues:
            await conn.execute(self.q["notify"], {"channel": self.channel, "queues": list(queues)})

    # -- producers ---------------------------------------------------------

    async def enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        check_specs(specs, self.max_payload)
        if not specs:
            return []
        if len(specs) >= COPY_FROM and all(s.key is None for s in specs):
            with contextlib.suppress(psycopg.errors.UniqueViolation):  # an id stored already
                return await self._copy(specs)
        async with self._conn() as conn:
            return await run_steps(conn, self.enqueuing(specs))

    def enqueuing(self, specs: Sequence[JobSpec]) -> Steps[list[Job]]:
        """The statements of an enqueue of checked specs, as steps (see steps.py):
        on a pooled connection, each its own transaction, or on a caller's, in
        the caller's transaction (within.py)."""
        jobs = orjson.dumps([
            [s.id, s.queue, s.task, s.priority, s.delay, s.run_at, s.key, s.max_attempts,
             s.timeout, s.traceparent] for s in specs
        ]).decode()  # fmt: skip
        args = _text_array(s.args.decode() for s in specs)
        columns = {"jobs": jobs, "args": args, "channel": self.channel}
        while True:
            [(now, ids, _)] = yield self.q["insert_jobs"], columns
            inserted = set(ids or ())
            kept = yield from self._kept([s for s in specs if s.id not in inserted])
            if all(s.id in inserted or s.id in kept for s in specs):
                return [s.stored_at(now) if s.id in inserted else kept[s.id] for s in specs]
            # The job that held a key finished between the two statements: again
            # (the jobs inserted now are found by id, the key is free).

    async def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        at = check_tick(schedule, at)
        check_specs([spec], self.max_payload)
        async with self._tx() as conn:
            return await run_steps(conn, self._ticking(schedule, at, spec))

    def _ticking(self, schedule: str, at: float, spec: JobSpec) -> Steps[Job | None]:
        advance = {"queue": spec.queue, "name": schedule, "tick": at, "job_id": spec.id}
        if not (yield self.q["advance_tick"], advance):
            return None
        [job] = yield from self.enqueuing([spec])
        return job

    async def last_ticks(
        self, schedules: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], Tick]:
        pairs = check_schedules(schedules)
        params = {"queues": [q for q, _ in pairs], "names": [n for _, n in pairs]}
        rows = await self._rows("last_ticks", params)
        return {(q, n): Tick(at, job_id) for q, n, at, job_id in rows}

    async def _copy(self, specs: Sequence[JobSpec]) -> list[Job]:
        """A batch without key=: COPY, in one transaction (UniqueViolation if an
        id is stored already)."""
        queues = list(dict.fromkeys(s.queue for s in specs))
        async with self._tx() as conn:
            cur = await conn.execute(self.q["begin_copy"], {"queues": queues})
            [now] = await cur.fetchone() or (0.0,)
            jobs: list[Job] = []
            async with cur.copy(self.q["copy_jobs"]) as copy:
                # In chunks: the server stores one while the next is made.
                for start in range(0, len(specs), COPY_CHUNK):
                    chunk = specs[start : start + COPY_CHUNK]
                    made = [s.stored_at(now) for s in chunk]
                    await copy.write(_copy_rows(chunk, made))
                    jobs += made
            await self._notify(conn, {j.queue for j in jobs if j.state is State.QUEUED})
            await conn.execute(self.q["record_enqueued"], {
                "ids": [j.id for j in jobs], "queues": [j.queue for j in jobs],
                "tasks": [j.task for j in jobs], "states": [j.state.value for j in jobs],
            })  # fmt: skip
        return jobs

    def _kept(self, specs: builtins.list[JobSpec]) -> Steps[dict[str, Job]]:
        """By spec id, the job stored already of each spec that inserted nothing:
        the unfinished job that holds its key, or else the job with its id."""
        found: dict[str, Job] = {}
        keyed = [s for s in specs if s.key is not None]
        if keyed:
            params = {"queues": [s.queue for s in keyed], "keys": [s.key for s in keyed]}
            rows = yield self.q["find_unfinished_by_keys"], params
            holders = {(j.queue, j.key): j for j in map(job_from_row, rows)}
            found = {s.id: holders[s.queue, s.key] for s in keyed if (s.queue, s.key) in holders}
        if ids := [s.id for s in specs if s.id not in found]:
            rows = yield self.q["find_by_ids"], {"ids": ids}
            found |= {j.id: j for j in map(job_from_row, rows)}
        return found

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        await self.wakeups.wait(queues, timeout)

    # -- lease holders -----------------------------------------------------

    async def complete_and_claim(
        self,
        items: Sequence[tuple[str, int, bytes]],
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        *,
        skip_tasks: Collection[str] = (),
    ) -> tuple[set[LeaseRef], builtins.list[Job]]:
        """One statement, one transaction (see queries.sql); a queue with a
        fleet-wide limit is claimed from under its row's lock, taken first."""
        limit = claim_limit(queues, limit)
        if not items and not limit:
            return set(), []
        queues = list(dict.fromkeys(queues)) if limit else []
        locked = [q for q in queues if q in self._limited]
        # The arrays go as array literals (strings): psycopg's list dumper took
        # an eighth of a draining worker's main thread.
        params = {
            "ids": _text_array(i for i, _, _ in items),
            "fences": "{" + ",".join([str(f) for _, f, _ in items]) + "}",
            "results": _text_array(r.decode() for _, _, r in items),
            "queues": _text_array(queues), "worker": worker_id, "locked": _text_array(locked),
            "delivery": DEFAULTS.delivery, "lease_ttl": DEFAULTS.lease_ttl,
            "channel": self.channel}  # fmt: skip
        name = "complete_and_claim_limited" if locked else "complete_and_claim"
        if skip_tasks and limit:
            name += "_skipping"
            params["skip"] = _text_array(skip_tasks)
        # One prepared statement, with a plan that knows its limit, per limit a
        # worker uses (see queries.sql).
        query = self.q.limited(name, limit)
        if locked:
            rows = await self._locked_cycle_fetch(query, params, locked)
        else:
            rows = await self._cycle_fetch(query, params)
        jobs = [job_from_row(r[1:]) for r in rows if r[0]]
        done = {(r[1], r[FENCE]) for r in rows if r[0] is None}
        limited = {r[1]: r[FENCE] for r in rows if r[0] == 0}
        self._limited = (self._limited - set(queues)) | set(limited)
        held_back = [q for q, unlocked in limited.items() if unlocked]
        if held_back and len(jobs) < limit:  # a limit this backend did not know of yet
            more = await self.complete_and_claim(
                (), worker_id, held_back, limit - len(jobs), skip_tasks=skip_tasks
            )
            jobs += more[1]
        return {(i, f) for i, f, _ in items} - done, jobs

    async def _locked_cycle_fetch(
        self, query: bytes, params: dict[str, Any], locked: builtins.list[str]
    ) -> builtins.list[Any]:
        """The cycle in a transaction that first locks the rows of the queues
        with a fleet-wide limit (lock_queues), so that their claims go one at a
        time and each counts what the one before committed."""
        async with self._tx() as conn:
            if self.liveness.seems_lost(params["worker"]):  # as in _cycle_fetch
                params = {**params, "queues": "{}"}
            await conn.execute(self.q["lock_queues"], {"queues": locked, "idle": IDLE_MS})
            cur = await conn.execute(query, params, prepare=True)
            return await cur.fetchall()

    async def heartbeat(self, worker_id: str, leases: Collection[LeaseRef]) -> Renewal:
        await self.liveness.check(worker_id)
        held = list(leases)
        params = {"worker": worker_id, "ids": [i for i, _ in held], "fences": [f for _, f in held]}
        rows = await self._rows("heartbeat", params)
        lost = set(held) - {(i, f) for i, f, _ in rows}
        return Renewal(frozenset(lost), frozenset((i, f) for i, f, cancel in rows if cancel))

    async def progress(self, job_id: str, fence: int, data: Any) -> None:
        payload = encode(data, what="progress", limit=self.max_payload).decode()
        await self._settle("progress", {"id": job_id, "fence": fence, "data": payload})

    async def complete(self, job_id: str, fence: int, result: Any = None) -> None:
        payload = encode(result, what="job result", limit=self.max_payload).decode()
        await self._settle("complete", {"id": job_id, "fence": fence, "result": payload})

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        name, params = _failure(job_id, fence, outcome, error, decision)
        await self._settle(name, params)

    async def release(self, job_id: str, fence: int) -> None:
        events = orjson.dumps([[EventKind.RELEASED, None]]).decode()
        await self._settle("release", {"id": job_id, "fence": fence, "events": events})

    async def _settle(self, name: str, params: dict[str, Any]) -> None:
        """One fence-checked write; LeaseLost (or JobNotFound) when it touched nothing.
        A job queued again wakes the idle workers of its queue."""
        async with self._conn() as conn:
            cur = await conn.execute(self.q[name], params)
            row = await cur.fetchone()
            if row is None and name in ENDINGS:  # refused: was its job cancelled meanwhile?
                cur = await conn.execute(self.q["end_cancelled"], _cancelling(params))
                row = await cur.fetchone()
            if row is None:
                cur = await conn.execute(self.q["job_exists"], params)
                if await cur.fetchone() is None:
                    raise JobNotFound(f"no job with id {params['id']!r}")
                raise LeaseLost(
                    f"job {params['id']} is no longer held with fence {params['fence']}: "
                    "it was recovered or settled by someone else"
                )
            if name == "release" or params.get("state") == State.QUEUED:  # queued again
                await self._notify(conn, [row[0]])

    @contextlib.contextmanager
    def transaction(
        self, job_id: str, fence: int, result: Any = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """The handler's own transaction on this database, completing the job at
        commit, fence-checked (see ``JobContext.transaction``). Synchronous: it
        runs in the handler's thread, on a connection of its own, kept for reuse."""
        payload = encode(result, what="job result", limit=self.max_payload).decode()
        try:
            if self._effects is None or self._effects.closed:
                self._effects = psycopg.connect(self.conninfo, application_name="tenure-effects")
            conn = self._effects
            with conn.transaction():
                yield conn
                params = {"id": job_id, "fence": fence, "result": payload}
                if conn.execute(self.q["complete"], params).fetchone() is None:
                    raise LeaseLost(
                        f"job {job_id} is no longer held with fence {fence}: rolled back"
                    )
        except psycopg.OperationalError as exc:
            self._effects = None
            raise self._unavailable("PostgreSQL is unavailable", exc) from exc

    # -- the sweeper -------------------------------------------------------

    async def rescue(self, min_interval: float = 0.0) -> RescueReport:
        lock = (self.namespace << 32) | 1
        async with self._tx() as conn:
            cur = await conn.execute(
                self.q["sweep_guard"], {"lock": lock, "interval": min_interval, "idle": IDLE_MS}
            )
            row = await cur.fetchone()
            assert row is not None
            swept, retry_in, now = row
            if not swept:
                return RescueReport(swept=False, retry_in=retry_in)
            cur = await conn.execute(self.q["dead_workers"], {"namespace": self.namespace})
            last_seen: dict[str, float] = dict(await cur.fetchall())
            rescued: list[Rescued] = []
            for outcome, query in ((Outcome.CRASHED, "orphaned_leases"),
                                   (Outcome.STALLED, "expired_leases")):  # fmt: skip
                cur = await conn.execute(self.q[query])
                found = [(job_from_row(r[:-1]), r[-1]) for r in await cur.fetchall()]
                if outcome is Outcome.CRASHED and found:
                    found = await self._still_orphaned(conn, found)
                policies = await self._policies(conn, {j.queue for j, _ in found})
                for job, renewed in found:
                    proven = last_proof(outcome, renewed, last_seen.get(job.worker or ""))
                    policy = policies[job.queue]
                    rescued.append(
                        await self._recover(conn, job, outcome, policy, proven=proven, now=now)
                    )
            cur = await conn.execute(self.q["promote_due"])
            promoted = [q for (q,) in await cur.fetchall()]
            await self._notify(conn, {*promoted, *(r.queue for r in rescued)})
            await self._trim_events(conn)
        return RescueReport(True, tuple(rescued), len(promoted), tuple(last_seen))

    async def _still_orphaned(
        self, conn: psycopg.AsyncConnection[Any], found: builtins.list[tuple[Job, float | None]]
    ) -> builtins.list[tuple[Job, float | None]]:
        """The orphaned leases whose holder is still unregistered (see still_orphaned)."""
        cur = await conn.execute(self.q["still_orphaned"], {"ids": [j.id for j, _ in found]})
        still = {i for (i,) in await cur.fetchall()}
        return [(job, renewed) for job, renewed in found if job.id in still]

    async def _recover(
        self,
        conn: psycopg.AsyncConnection[Any],
        job: Job,
        outcome: Outcome,
        policy: QueuePolicy,
        *,
        proven: float | None,
        now: float,
    ) -> Rescued:
        decision = decide_for(job, outcome, policy)
        rescued = Rescued.of(job, outcome, decision.state, proven, now)
        error = f"attempt {job.attempts} {outcome}: " + (
            f"its worker {job.worker} is gone" if outcome is Outcome.CRASHED
            else f"the lease of worker {job.worker} expired"
        )  # fmt: skip
        name, params = _failure(job.id, job.fence, outcome, error, decision, rescued=rescued)
        await conn.execute(self.q[name], params)
        return rescued

    async def _policies(
        self, conn: psycopg.AsyncConnection[Any], queues: Collection[str]
    ) -> dict[str, QueuePolicy]:
        if not queues:
            return {}
        cur = await conn.execute(self.q["policies"], {"queues": list(queues)})
        found = dict(await cur.fetchall())
        return {q: QueuePolicy.from_json(found.get(q)) for q in queues}

    # -- operators ---------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        check_job_id(job_id)
        async with self._tx() as conn:
            cur = await conn.execute(self.q["cancel"], {"id": job_id})
            cancelled = await cur.fetchone() is not None
        job = await self.get(job_id)
        if not cancelled:
            raise not_cancellable(job)
        return job

    async def retry_dead(
        self, queue: str, job_ids: Sequence[str] | None = None, by: str = RetriedBy.PYTHON
    ) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        retried_by = check_retried_by(by).value
        async with self._tx() as conn:
            params = {"queue": queue, "ids": ids, "by": retried_by}
            cur = await conn.execute(self.q["retry_dead"], params)
            rows = await cur.fetchall()
            await self._notify(conn, [queue] if rows else [])
        return len(rows)

    async def purge_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        async with self._tx() as conn:
            params = {"queue": queue, "ids": ids}
            cur = await conn.execute(self.q["purge_dead"], params)
            [(purged,)] = await cur.fetchall()
            return int(purged)

    async def prune(self, limit: int) -> int:
        check_prune_limit(limit)
        async with self._conn() as conn:
            cur = await conn.execute(self.q["all_policies"])
            policies = {q: QueuePolicy.from_json(p) for q, p in await cur.fetchall()}
            rules = retention.rules(policies)
            if not rules:
                return 0
            queues, states, keeps = zip(*rules, strict=True)
            params = {"queues": list(queues), "states": [str(s) for s in states],
                      "keeps": list(keeps)}  # fmt: skip
            cur = await conn.execute(self.q.limited("prune", limit), params, prepare=False)
            [(pruned,)] = await cur.fetchall()
        return int(pruned)

    async def delete_queue(self, queue: str) -> int:
        check_name("queue", queue)
        async with self._tx() as conn:
            cur = await conn.execute(self.q["delete_queue_jobs"], {"queue": queue})
            [(deleted,)] = await cur.fetchall()
            cur = await conn.execute(self.q["active_in_queue"], {"queue": queue})
            [(active,)] = await cur.fetchall()
            if active:
                raise queue_busy(queue, active)  # rolls the transaction back
            await conn.execute(self.q["delete_queue"], {"queue": queue})
        return int(deleted)

    async def get(self, job_id: str) -> Job:
        check_job_id(job_id)
        async with self._tx() as conn:
            cur = await conn.execute(self.q["get_job"], {"id": job_id})
            row = await cur.fetchone()
            if row is None:
                raise JobNotFound(f"no job with id {job_id!r}")
            cur = await conn.execute(self.q["get_history"], {"id": job_id})
            history = tuple(attempt_from_row(r) for r in await cur.fetchall())
        return job_from_row(row, history)

    async def match_ids(self, prefix: str, limit: int) -> builtins.list[str]:
        prefix, limit = check_match(prefix, limit)
        bounds = prefix_range(prefix)
        if bounds is None:
            return []
        low, high = bounds
        params = {"low": low, "high": high, "prefix": prefix, "limit": limit}
        return [i for (i,) in await self._rows("match_ids", params)]

    async def list(
        self,
        queue: str | None = None,
        state: State | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        state = check_listing(queue, state, limit)
        after = check_cursor(after)
        params = {"queue": queue, "state": None if state is None else state.value,
                  "after": None if after is None else cursor_seq(after),
                  "limit": limit + 1}  # fmt: skip
        if state in TERMINAL:
            # Planned for its values, to read jobs_queue_state: its generic plan
            # (the session forces generic plans, even for a statement sent
            # unprepared: see _configure) walks every job newer than the page.
            # Not for the other states: with statistics that have not seen a
            # backlog, a custom plan sorted a queue's 200,000 queued jobs.
            async with self._tx() as conn:
                await conn.execute(b"SET LOCAL plan_cache_mode = force_custom_plan")
                cur = await conn.execute(self.q["list_jobs"], params, prepare=False)
                rows = await cur.fetchall()
        else:
            rows = await self._rows("list_jobs", params)
        jobs = [job_from_row(r[1:]) for r in rows[:limit]]
        return Page(jobs, str(rows[limit - 1][0]) if len(rows) > limit else None)

    async def counts(self, queue: str) -> dict[State, int]:
        check_name("queue", queue)
        found = dict(await self._rows("counts", {"queue": queue}))
        return {s: found.get(s.value, 0) for s in State}

    async def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        check_name("queue", queue)
        rows = await self._rows("dead_counts", {"queue": queue})
        return {DeadReason(reason): n for reason, n in rows}

    async def lag(self, queue: str) -> float:
        check_name("queue", queue)
        [(seconds,)] = await self._rows("lag", {"queue": queue})
        return float(seconds)

    async def queues(self) -> builtins.list[str]:
        return [n for (n,) in await self._rows("queue_names")]

    async def get_policy(self, queue: str) -> QueuePolicy:
        check_name("queue", queue)
        rows = await self._rows("get_policy", {"queue": queue})
        return QueuePolicy.from_json(rows[0][0] if rows else None)

    async def set_policy(self, queue: str, policy: QueuePolicy) -> None:
        check_name("queue", queue)
        policy.validate()
        data = orjson.dumps(policy.to_dict()).decode()
        async with self._tx() as conn:
            await conn.execute(self.q["set_policy"], {"queue": queue, "policy": data})

    async def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        check_name("queue", queue)
        async with self._tx() as conn:  # the queue's row stays locked until commit
            cur = await conn.execute(self.q["lock_policy"], {"queue": queue})
            [(stored,)] = await cur.fetchall()
            policy = QueuePolicy.from_json(stored).replace(**changes)
            data = orjson.dumps(policy.to_dict()).decode()
            await conn.execute(self.q["set_policy"], {"queue": queue, "policy": data})
            await self._notify(conn, [queue])  # it may let idle workers claim (a resume)
        return policy

    # -- workers -----------------------------------------------------------

    async def register_worker(self, info: WorkerInfo) -> None:
        check_name("worker", info.id)
        [(lock_no,)] = await self._rows("next_lock_no")
        try:  # the lock before the row: a registered worker always has its lock
            await self.liveness.hold(info.id, lock_no)
        except psycopg.OperationalError as exc:
            raise self._unavailable("cannot open the liveness connection", exc) from exc
        async with self._tx() as conn:
            await conn.execute(self.q["register_worker"], {
                "id": info.id, "lock_no": lock_no, "hostname": info.hostname, "pid": info.pid,
                "queues": orjson.dumps(list(info.queues)).decode()})  # fmt: skip

    async def deregister_worker(self, worker_id: str) -> None:
        async with self._tx() as conn:
            await conn.execute(self.q["deregister_worker"], {"id": worker_id})
        await self.liveness.release(worker_id)

    async def workers(self) -> builtins.list[WorkerInfo]:
        return [
            WorkerInfo(i, h, p, tuple(orjson.loads(q)), s, seen, n, alive)
            for i, h, p, q, s, seen, n, alive in await self._rows(
                "list_workers", {"namespace": self.namespace}
            )
        ]


def _text_array(values: Iterable[str]) -> str:
    """A PostgreSQL array literal of text values, each quoted (so that NULL,
    commas and braces are only text) with its quotes and backslashes escaped."""
    quoted = ['"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values]
    return "{" + ",".join(quoted) + "}"


def _copy_rows(specs: Sequence[JobSpec], jobs: Sequence[Job]) -> bytes:
    """New jobs as rows of copy_jobs, in COPY's text format. Names are validated
    (no tab, newline or backslash); in JSON, backslashes are doubled and the
    whitespace COPY reads as a separator escaped; floats are written in their
    shortest exact form. The columns after the arguments are written once for
    a run of jobs that share them (a batch usually does)."""
    rows = []
    shared: tuple[Any, ...] = ()
    tail = ""
    for s, j in zip(specs, jobs, strict=True):
        args = s.args.decode()
        if "\\" in args:
            args = args.replace("\\", "\\\\")
        if "\t" in args or "\n" in args or "\r" in args:  # not from orjson: it writes none
            args = args.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
        values = (j.state, j.priority, j.run_at, j.created_at, j.max_attempts, j.timeout,
                  j.traceparent)  # fmt: skip
        if values != shared:
            shared = values
            tail = (
                f"\t{j.state.value}\t{j.priority}\t{j.run_at!r}\t{j.created_at!r}"
                f"\t{_copy_value(j.max_attempts)}\t{_copy_value(j.timeout)}"
                f"\t{j.traceparent or COPY_NULL}\n"
            )
        rows.append(f"{j.id}\t{j.queue}\t{j.task}\t{args}{tail}")
    return "".join(rows).encode()


COPY_NULL = "\\N"


def _copy_value(value: int | float | None) -> str:
    return COPY_NULL if value is None else repr(value)


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    """Prepared statements keep one generic plan: the worker's statements run
    thousands of times a second, and planning the cycle costs more than running
    it (0.46 ms against 0.31 ms)."""
    with contextlib.suppress(psycopg.errors.UndefinedObject):  # before PostgreSQL 12
        await conn.execute("SET plan_cache_mode = force_generic_plan")


def _failure(
    job_id: str,
    fence: int,
    outcome: Outcome,
    error: str | None,
    decision: Decision,
    *,
    rescued: Rescued | None = None,
) -> tuple[str, dict[str, Any]]:
    """The fence-checked write that applies a retry decision, and its events
    (a recovery's, ``rescued``, with what the sweeper found)."""
    stall = None if rescued is None else rescued.stall_data()
    events = failure_events(outcome, decision, rescued=rescued is not None, stall=stall)
    params = {"id": job_id, "fence": fence, "outcome": outcome.value, "error": error,
              "stall": int(decision.stall), "events": orjson.dumps(events).decode()}  # fmt: skip
    if decision.state is State.CANCELLED:
        return "end_cancelled", params
    if decision.state is State.DEAD:
        return "bury", {**params, "dead_reason": decision.dead_reason}
    recovered_from = None if rescued is None else rescued.proven_at
    return "requeue", {**params, "state": decision.state.value, "delay": decision.delay,
                       "recovered_from": recovered_from}  # fmt: skip


# The writes that end an attempt and refuse a job whose cancel was requested.
ENDINGS = frozenset({"requeue", "bury", "release"})


def _cancelling(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of end_cancelled for those of a refused ending (ENDINGS)."""
    outcome = Outcome(params.get("outcome", Outcome.RELEASED))
    events = orjson.dumps(failure_events(outcome, CANCELLED, rescued=False)).decode()
    return {**params, "outcome": outcome.value, "error": params.get("error"), "events": events}
