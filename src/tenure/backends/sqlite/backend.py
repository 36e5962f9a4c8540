"""The SQLite backend: the embedded default, no server needed.

One connection per backend object, used from one dedicated thread so that the
event loop never blocks on the database. Every transition runs in
``BEGIN IMMEDIATE``: it takes the write lock first, so what it reads stays true
until it commits. Worker liveness is an exclusive ``flock`` on a file beside the
database, held for the worker's whole life; the kernel drops it the moment the
process dies, and any other process's sweeper sees that.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import unquote, urlsplit

import orjson

from tenure.backends.base import (
    Capabilities,
    DerivedVerbs,
    LeaseRef,
    Renewal,
    Rescued,
    RescueReport,
    Tick,
)
from tenure.backends.checks import check_schedules, check_tick, claim_limit, last_proof
from tenure.backends.rows import JOB_COLUMNS, job_from_row
from tenure.backends.sqlite.doorbells import Doorbells
from tenure.backends.sqlite.events import EventReading, Pending, record, record_job
from tenure.backends.sqlite.liveness import WorkerLocks
from tenure.backends.sqlite.opening import LATEST, Opening
from tenure.backends.sqlite.operators import Operators
from tenure.backends.sqlite.queries import Q
from tenure.backends.sqlite.storage import StorageFile
from tenure.backends.sqlite.within import CallerTransactions
from tenure.config import DEFAULT_MAX_PAYLOAD, QueuePolicy
from tenure.core import limits
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.events import EventKind, failure_events
from tenure.core.payload import encode
from tenure.core.retry import CANCELLED, Decision, decide_for
from tenure.core.states import Outcome, State
from tenure.core.urls import MAX_PAYLOAD, UrlOptions, redacted
from tenure.errors import (
    BackendUnavailable,
    InvalidInput,
    JobNotFound,
    LeaseLost,
    TenureError,
)
from tenure.job import Job, JobSpec, check_specs
from tenure.threads import DaemonThreads

T = TypeVar("T")
URL_OPTIONS = {"adopt", "durable", "busy_timeout", "max_payload"}
MAX_BUSY_MS = 3_600_000


@functools.lru_cache(maxsize=64)
def _for_queues(name: str, n: int) -> str:
    """Statement ``name`` for ``n`` queues: its ``{queues}`` as ``n`` placeholders."""
    return Q[name].replace("{queues}", ", ".join("?" * n))


@functools.lru_cache(maxsize=64)
def _claimable(n: int, skipping: bool) -> str:
    """The claim's statement for ``n`` queues (see claimable in queries.sql),
    passing over some tasks' jobs if ``skipping``."""
    each = Q["claimable_in_queue_skipping" if skipping else "claimable_in_queue"]
    return Q["claimable"].replace("{each}", " UNION ALL ".join([each] * n))


# A queue's policy, parsed once per stored text: a claim reads the policies of
# the queues it takes from, and parsing them cost more than reading them.
_policy_of = functools.lru_cache(maxsize=256)(QueuePolicy.from_json)


def path_of_url(url: str) -> str:
    """The file a ``sqlite://`` URL names (or ``:memory:``); InvalidInput if none."""
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidInput(
            f"malformed SQLite URL {redacted(url)!r}: use sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not path:
        raise InvalidInput(f"SQLite URL {url!r} names no file: use sqlite:///tenure.db")
    return path


class SQLiteBackend(DerivedVerbs, Opening, Operators, EventReading):
    """Jobs in one SQLite file (WAL mode). See the module docstring."""

    capabilities = Capabilities(remote=False, costly_cycles=False)

    def __init__(
        self,
        path: str,
        *,
        durable: bool = False,
        busy_timeout: float = 5.0,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        clock: Clock = SYSTEM_CLOCK,
        read_only: bool = False,
        adopt: bool = False,
    ) -> None:
        self.path = path
        self.read_only = read_only  # never creates, migrates or writes the file
        self.adopt = adopt  # may add tenure's tables to a database of another program's
        self.url = f"sqlite:///{path}"
        self.durable = durable
        self.busy_timeout = busy_timeout
        self.max_payload = max_payload
        self.clock = clock
        self._conn: sqlite3.Connection | None = None
        self._effects: sqlite3.Connection | None = None  # handlers' own transactions
        # The worker's cycle runs on the event loop's thread, on a connection of
        # its own, when the write lock is free (no thread hop; never a wait).
        self._fast: sqlite3.Connection | None = None
        self._closed = False
        self._file = StorageFile(path)
        self._full = False  # a write found the disk full once: keep the WAL small
        self._small_wal: set[sqlite3.Connection] = set()  # connections that do
        self._thread = DaemonThreads(1, "tenure-sqlite")  # every connection use, in order
        memory = path == ":memory:"
        workers = None if memory else os.path.abspath(f"{path}.workers")
        self._locks = WorkerLocks(
            None if workers is None else Path(workers), None if memory else Path(path)
        )
        self.doorbells = Doorbells(workers)
        self._to_ring: list[str] = []
        self._last_trim = 0.0  # when this sweeper last applied events' retention
        self._blocked_at = -SETTLE  # when a transaction last waited for, or held, the lock long
        self._events_off: set[str] = set()  # queues whose last claim found events off
        self.callers = CallerTransactions(self, LATEST)  # enqueue in a caller's transaction
        # Queues whose last claim found a max_active: a completion there may let
        # an idle worker claim, so it rings the doorbells.
        self._limited: set[str] = set()

    @classmethod
    def from_url(cls, url: str, *, read_only: bool = False) -> SQLiteBackend:
        """A backend (not open yet) for ``sqlite:///path?options``: ``durable``
        (a boolean: fsync every commit), ``busy_timeout`` (ms, 0 to 1 hour),
        ``max_payload`` (bytes of JSON) and ``adopt`` (a boolean: add tenure's
        tables to a database another program's tables are in)."""
        path = path_of_url(url)
        options = UrlOptions(url, "SQLite", URL_OPTIONS)
        return cls(
            path,
            durable=options.flag("durable", False),
            busy_timeout=options.number("busy_timeout", 5000, low=0, high=MAX_BUSY_MS) / 1000,
            max_payload=options.integer(
                "max_payload", DEFAULT_MAX_PAYLOAD, low=1, high=MAX_PAYLOAD
            ),
            read_only=read_only,
            adopt=options.flag("adopt", False),
        )

    # -- plumbing ----------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await self._thread.run(fn, *args)
        except (sqlite3.Error, OSError) as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: sqlite3.Error | OSError) -> TenureError:
        """The typed error for ``exc`` (see storage.py); a full disk is remembered."""
        error = self._file.error(exc)
        if isinstance(exc, sqlite3.Error) and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_FULL:
            self._full = True
        return error

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BackendUnavailable(f"the SQLite backend at {self.path} is not open")
        return self._conn

    @contextmanager
    def _tx(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any error. On the loop's own
        connection (``self._fast``), a write lock held elsewhere raises _Busy at
        once instead of waiting."""
        conn = self.conn if conn is None else conn
        main = conn is self._conn  # the only connection whose transactions ring doorbells
        asked = time.monotonic()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not main and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                raise _Busy from None
            raise
        began = time.monotonic()
        try:
            yield conn
            conn.commit()
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # a failed commit may have ended it
                conn.rollback()
            if main:
                self._to_ring = []
            raise
        finally:
            ended = time.monotonic()
            if began - asked > BLOCKED or ended - began > BLOCKED:
                self._blocked_at = ended
        to_ring, self._to_ring = (self._to_ring, []) if main else ([], self._to_ring)
        self.doorbells.ring(to_ring)
        if self._full and conn not in self._small_wal:
            self._keep_wal_small(conn)

    def _keep_wal_small(self, conn: sqlite3.Connection) -> None:
        """Writes pass again after the disk was full: from now on, checkpoint this
        connection's WAL often. A checkpoint is what lets the WAL be reused from
        its start; by default one comes every thousand pages (4 MB), and on a
        small disk the WAL would fill again the space that came back, for good."""
        self._small_wal.add(conn)
        with contextlib.suppress(sqlite3.Error):  # PASSIVE: never waits for readers
            conn.execute(f"PRAGMA wal_autocheckpoint = {SMALL_WAL_PAGES}")
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    async def open(self) -> None:
        await self._run(self._open)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._run(self._close)
        self._thread.shutdown()

    def _close(self) -> None:
        self._locks.release_all()
        self.doorbells.close()
        if self._effects is not None:
            self._effects.close()
            self._effects = None
        self._disconnect()

    def _disconnect(self) -> None:
        for conn in (self._fast, self._conn):
            if conn is not None:
                conn.close()
        self._fast = self._conn = None
        self._small_wal.clear()

    # -- producers ---------------------------------------------------------

    async def enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        check_specs(specs, self.max_payload)
        return await self._run(self._enqueue, specs)

    def _enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        with self._tx() as conn:
            jobs = self.enqueuing(conn, specs)
            if any(j.state is State.QUEUED for j in jobs):
                self._ring(conn)
        return jobs

    def enqueuing(
        self, db: sqlite3.Connection | sqlite3.Cursor, specs: Sequence[JobSpec]
    ) -> list[Job]:
        """The statements of an enqueue of checked specs, in the transaction open
        on ``db``: the backend's own, or a caller's (within.py)."""
        now = self.clock.now()
        jobs: list[Job] = []
        new: list[tuple[str, str, str, dict[str, Any] | None]] = []
        for queue in {s.queue for s in specs}:
            db.execute(Q["ensure_queue"], (queue,))
        for spec in specs:
            if spec.key is not None:
                row = db.execute(Q["find_unfinished_by_key"], (spec.queue, spec.key)).fetchone()
                if row is not None:
                    jobs.append(job_from_row(row))
                    continue
            run_at = spec.run_at if spec.run_at is not None else now + spec.delay
            state = State.SCHEDULED if run_at > now else State.QUEUED
            cur = db.execute(
                Q["insert_job"],
                (spec.id, spec.queue, spec.task, spec.args, state, spec.priority, run_at, now,
                 spec.key, spec.max_attempts, spec.timeout, spec.traceparent),
            )  # fmt: skip
            if cur.rowcount:
                jobs.append(spec.stored(state, run_at, now))
                new.append((spec.queue, EventKind.ENQUEUED, spec.id,
                            {"task": spec.task, "state": state}))  # fmt: skip
            else:  # its id is stored already: that job
                jobs.append(job_from_row(db.execute(Q["get_job"], (spec.id,)).fetchone()))
        record(db, now, new)
        return jobs

    async def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        at = check_tick(schedule, at)
        check_specs([spec], self.max_payload)
        return await self._run(self._enqueue_tick, schedule, at, spec)

    def _enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        with self._tx() as conn:
            advance = (spec.queue, schedule, at, spec.id)
            if conn.execute(Q["advance_tick"], advance).rowcount == 0:
                return None
            [job] = self.enqueuing(conn, [spec])
            if job.state is State.QUEUED:
                self._ring(conn)
            return job

    async def last_ticks(
        self, schedules: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], Tick]:
        pairs = check_schedules(schedules)
        listed = orjson.dumps(pairs)
        rows = await self._run(lambda: self.conn.execute(Q["last_ticks"], (listed,)).fetchall())
        return {(q, n): Tick(at, job_id) for q, n, at, job_id in rows}

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        await self.doorbells.wait(timeout)

    def _ring(self, conn: sqlite3.Connection) -> None:
        """After this transaction commits, wake the idle workers (see doorbells.py)."""
        self._to_ring = [w for (w,) in conn.execute(Q["worker_ids"])]

    # -- lease holders -----------------------------------------------------

    async def complete_and_claim(
        self,
        items: Sequence[tuple[str, int, bytes]],
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        *,
        skip_tasks: Collection[str] = (),
    ) -> tuple[set[LeaseRef], list[Job]]:
        limit = claim_limit(queues, limit)
        if not items and not limit:
            return set(), []
        cycle = self._complete_and_claim
        if skip_tasks:
            cycle = functools.partial(cycle, skip=(orjson.dumps(list(skip_tasks)).decode(),))
        args = (items, worker_id, list(queues), limit)
        for pause in FAST_PATH_PAUSES if self._fast is not None else ():
            try:
                return cycle(self._fast, *args)
            except _Busy:  # another process writes: its transaction is likely short
                await asyncio.sleep(pause)
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc
        return await self._run(cycle, None, *args)  # wait for the lock

    def _complete_and_claim(
        self,
        conn: sqlite3.Connection | None,
        items: Sequence[tuple[str, int, bytes]],
        worker_id: str,
        queues: list[str],
        limit: int,
        *,
        skip: tuple[str, ...] = (),
    ) -> tuple[set[LeaseRef], list[Job]]:
        now = self.clock.now()
        pending = Pending()  # the completions' events, then the claims': a row per queue
        with self._tx(conn) as tx:  # one transaction: one lock, one commit
            lost = self._completing(tx, now, items, pending) if items else set()
            jobs = self._claiming(tx, worker_id, queues, limit, skip, now=now, pending=pending)
            pending.record(tx, now)
        return lost, jobs

    def _claiming(
        self,
        conn: sqlite3.Connection,
        worker_id: str,
        queues: list[str],
        limit: int,
        skip: tuple[str, ...],
        *,
        now: float,
        pending: Pending,
    ) -> list[Job]:
        """Claim up to ``limit`` jobs, passing over the tasks ``skip`` lists (a
        JSON array, if any); their events are added to ``pending``."""
        if limit <= 0:
            return []
        conn.execute(Q["promote_due"], (now,))
        params = [x for q in queues for x in (q, *skip, limit)]
        rows = conn.execute(_claimable(len(queues), bool(skip)), (*params, limit)).fetchall()
        if not rows:
            return []
        policies = self._policies(conn, queues)
        if self._limited:
            self._limited -= {q for q, p in policies.items() if p.max_active is None}
        if any(p.paused or p.limited for p in policies.values()):
            shares = self._shares(conn, policies, limit, now)  # then the claim again, within them
            if not shares:
                return []
            params = [x for q, n in shares.items() for x in (q, *skip, n)]
            rows = conn.execute(_claimable(len(shares), bool(skip)), (*params, limit)).fetchall()
        leases = []
        for seq, queue in rows:
            policy = policies[queue]
            leases.append((seq, policy.lease_ttl if policy.delivery == "at-least-once" else None))
        taken = conn.execute(Q["take_leases"], (worker_id, now, orjson.dumps(leases))).fetchall()
        rank = {seq: i for i, (seq, _) in enumerate(rows)}  # back in claim order
        taken.sort(key=lambda row: rank[row[SEQ]])
        jobs = [job_from_row(row[:SEQ]) for row in taken]
        self._took_from_buckets(conn, policies, jobs, now)
        off = {q for q, p in policies.items() if not p.events}
        self._events_off = (self._events_off - policies.keys()) | off
        if len(off) < len(policies):
            pending.on |= policies.keys() - off
            kind = EventKind.STARTED
            pending.events += [
                (j.queue, kind, j.id, {"attempt": j.attempts, "worker": worker_id}) for j in jobs
            ]
        return jobs

    def _shares(
        self, conn: sqlite3.Connection, policies: dict[str, QueuePolicy], limit: int, now: float
    ) -> dict[str, int]:
        """How many jobs the claim may take from each queue: ``limit``, less where
        a fleet-wide limit or a pause holds (tenure.core.limits), counted under
        the write lock. A queue held back entirely is left out."""
        shares = {}
        for queue, policy in policies.items():
            share = limit
            if policy.limited or policy.paused:
                active = 0
                if policy.max_active is not None:
                    (active,) = conn.execute(Q["active_in_queue"], (queue,)).fetchone()
                tokens = None
                if policy.rate_limit is not None:
                    tokens = self._bucket(conn, policy, queue, now)
                share = limits.allowance(policy, limit, active, tokens)
            if share > 0:
                shares[queue] = share
            if policy.max_active is not None:
                self._limited.add(queue)
        return shares

    def _took_from_buckets(
        self,
        conn: sqlite3.Connection,
        policies: dict[str, QueuePolicy],
        jobs: list[Job],
        now: float,
    ) -> None:
        """Each started job takes a token from its queue's rate bucket."""
        for queue, policy in policies.items():
            if policy.rate_limit is None:
                continue
            started = sum(1 for j in jobs if j.queue == queue)
            if started:
                tokens = self._bucket(conn, policy, queue, now) - started
                conn.execute(Q["take_from_bucket"], (tokens, now, queue))

    @staticmethod
    def _bucket(conn: sqlite3.Connection, policy: QueuePolicy, queue: str, now: float) -> float:
        """The tokens in the queue's rate bucket now."""
        tokens, at = conn.execute(Q["rate_bucket"], (queue,)).fetchone() or (None, None)
        return limits.refilled(policy, tokens, at, now)

    def _policies(
        self, conn: sqlite3.Connection, queues: Collection[str]
    ) -> dict[str, QueuePolicy]:
        queues = tuple(dict.fromkeys(queues))
        found = dict(conn.execute(_for_queues("policies", len(queues)), queues).fetchall())
        return {q: _policy_of(found.get(q)) for q in queues}

    async def heartbeat(self, worker_id: str, leases: Collection[LeaseRef]) -> Renewal:
        return await self._run(self._heartbeat, worker_id, set(leases))

    def _heartbeat(self, worker_id: str, held: set[LeaseRef]) -> Renewal:
        self._file.check()  # once per interval: a deleted or replaced file stops the worker
        now = self.clock.now()
        with self._tx() as conn:
            presented = orjson.dumps([list(lease) for lease in held])
            rows = conn.execute(Q["renew_leases"], (now, worker_id, presented)).fetchall()
            conn.execute(Q["touch_worker"], (now, worker_id))
        renewed = {(i, f) for i, f, _ in rows}
        return Renewal(
            frozenset(held - renewed), frozenset((i, f) for i, f, cancel in rows if cancel)
        )

    async def progress(self, job_id: str, fence: int, data: Any) -> None:
        payload = encode(data, what="progress", limit=self.max_payload)
        params = (payload, job_id, fence)
        events = [(EventKind.PROGRESS, {"progress": orjson.Fragment(payload)})]
        await self._run(self._settle, Q["set_progress"], params, (job_id, fence), None, events)

    async def complete(self, job_id: str, fence: int, result: Any = None) -> None:
        payload = encode(result, what="job result", limit=self.max_payload)
        await self._run(self._complete, job_id, fence, payload)

    def _complete(self, job_id: str, fence: int, payload: bytes) -> None:
        now, pending = self.clock.now(), Pending()
        with self._tx() as conn:
            if self._completing(conn, now, [(job_id, fence, payload)], pending):
                _refused(conn, job_id, fence)
            pending.record(conn, now)

    def _completing(
        self,
        conn: sqlite3.Connection,
        now: float,
        items: Sequence[tuple[str, int, bytes]],
        pending: Pending,
    ) -> set[LeaseRef]:
        """Complete the leases still held (returns those that are not); their
        events are added to ``pending``."""
        # [[id, fence, result], ...]: each result is JSON already
        listed = b"[" + b",".join(
            [b"[%b,%d,%b]" % (orjson.dumps(i), f, payload) for i, f, payload in items]
        ) + b"]"  # fmt: skip
        conn.execute(Q["end_attempts"], (now, Outcome.COMPLETED, None, listed))
        done = conn.execute(Q["complete_each"], (now, listed)).fetchall()
        # A queue whose claims found its events off records none (its policy is
        # read by every claim): completing costs nothing more there.
        off = self._events_off
        pending.events += [(q, EventKind.COMPLETED, i, None) for i, _, q in done if q not in off]
        if self._limited and any(q in self._limited for _, _, q in done):
            self._ring(conn)
        return {(i, f) for i, f, _ in items} - {(i, f) for i, f, _ in done}

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        await self._run(self._fail, job_id, fence, outcome, error, decision)

    def _fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        now = self.clock.now()
        sql, params = _failure(job_id, fence, error, decision, now)
        events = failure_events(outcome, decision, rescued=False)
        self._settle(sql, params, (job_id, fence), (outcome, error, now), events)

    async def release(self, job_id: str, fence: int) -> None:
        now = self.clock.now()
        ending = (Outcome.RELEASED, None, now)
        events = [(EventKind.RELEASED, None)]
        await self._run(
            self._settle, Q["release"], (job_id, fence), (job_id, fence), ending, events
        )

    def _settle(
        self,
        sql: str,
        params: tuple[Any, ...],
        lease: LeaseRef,
        ending: tuple[Outcome, str | None, float] | None,
        events: Sequence[tuple[str, dict[str, Any] | None]],
    ) -> None:
        """Run one fence-checked write, then record its ``events``; end the
        attempt in history when ``ending`` is given."""
        job_id, fence = lease
        with self._tx() as conn:
            if ending is not None:  # first: it reads the attempt from the job
                outcome, error, now = ending
                conn.execute(Q["end_attempts"], (now, outcome, error, _listed(job_id, fence)))
            if conn.execute(sql, params).rowcount == 0:
                if ending is None or not _cancelled(conn, job_id, fence, error, now):
                    _refused(conn, job_id, fence)
                events = failure_events(outcome, CANCELLED, rescued=False)
            record_job(conn, self.clock.now() if ending is None else ending[2], job_id, events)
            released = ending is not None and ending[0] is Outcome.RELEASED
            if (released and params[0] == State.QUEUED) or sql is Q["requeue"]:
                self._ring(conn)

    @contextmanager
    def transaction(
        self, job_id: str, fence: int, result: Any = None
    ) -> Iterator[sqlite3.Connection]:
        """The handler's own transaction on this database, completing the job at
        commit, fence-checked (see ``JobContext.transaction``). Synchronous: it
        runs in the handler's thread, on a connection of its own."""
        payload = encode(result, what="job result", limit=self.max_payload)
        if self._effects is None:
            self._effects = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
            )
            self._effects.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        conn = self._effects
        conn.execute("BEGIN")
        try:
            yield conn
            now, pending = self.clock.now(), Pending()
            if self._completing(conn, now, [(job_id, fence, payload)], pending):
                raise LeaseLost(f"job {job_id} is no longer held with fence {fence}")
            pending.record(conn, now)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # -- the sweeper -------------------------------------------------------

    async def rescue(self, min_interval: float = 0.0) -> RescueReport:
        return await self._run(self._rescue, min_interval)

    def _rescue(self, min_interval: float) -> RescueReport:
        self._file.check()
        # Just after the write lock was held long (by a process frozen holding it,
        # or a long transaction), every worker's renewal waited for it and some
        # still sleep in SQLite's busy handler: judge no lease expired until they
        # have landed. Dead workers (their flock free) are recovered regardless.
        judge_leases = time.monotonic() - self._blocked_at > SETTLE
        now = self.clock.now()
        with self._tx() as conn:
            (last,) = conn.execute(Q["sweep_guard"]).fetchone()
            if 0 <= now - last < min_interval:  # a clock that went back does not stop sweeps
                return RescueReport(swept=False, retry_in=min_interval - (now - last))
            conn.execute(Q["sweep_mark"], (now,))
            last_seen = self._bury_dead_workers(conn)
            rescued = []
            for outcome, query in ((Outcome.CRASHED, "orphaned_leases"),
                                   (Outcome.STALLED, "expired_leases")):  # fmt: skip
                if outcome is Outcome.STALLED and not judge_leases:
                    continue
                params = () if outcome is Outcome.CRASHED else (now,)
                rows = conn.execute(Q[query], params).fetchall()
                found = [(job_from_row(r[:-1]), r[-1]) for r in rows]
                policies = self._policies(conn, {j.queue for j, _ in found}) if found else {}
                for job, renewed in found:
                    proven = last_proof(outcome, renewed, last_seen.get(job.worker or ""))
                    policy = policies[job.queue]
                    rescued.append(
                        self._recover(conn, job, outcome, policy, now=now, proven=proven)
                    )
            promoted = conn.execute(Q["promote_due"], (now,)).rowcount
            if promoted or rescued:
                self._ring(conn)
            self._trim_events(conn, now)
        return RescueReport(
            swept=True, rescued=tuple(rescued), promoted=promoted, dead_workers=tuple(last_seen)
        )

    def _bury_dead_workers(self, conn: sqlite3.Connection) -> dict[str, float]:
        """Forget registered workers whose liveness lock is free: they are gone.
        Returns when each was last seen (its last heartbeat)."""
        dead = {}
        for worker_id, *_, last_seen in conn.execute(Q["list_workers"]).fetchall():
            if not self._locks.alive(worker_id):
                conn.execute(Q["deregister_worker"], (worker_id,))
                self._locks.forget(worker_id)
                self.doorbells.forget(worker_id)
                dead[worker_id] = last_seen
        return dead

    def _recover(
        self,
        conn: sqlite3.Connection,
        job: Job,
        outcome: Outcome,
        policy: QueuePolicy,
        *,
        now: float,
        proven: float | None,
    ) -> Rescued:
        decision = decide_for(job, outcome, policy)
        error = f"attempt {job.attempts} {outcome}: " + (
            f"its worker {job.worker} is gone" if outcome is Outcome.CRASHED
            else f"the lease of worker {job.worker} expired"
        )  # fmt: skip
        sql, params = _failure(job.id, job.fence, error, decision, now, recovered_from=proven)
        conn.execute(Q["end_attempts"], (now, outcome, error, _listed(job.id, job.fence)))
        conn.execute(sql, params)
        rescued = Rescued.of(job, outcome, decision.state, proven, now)
        events = failure_events(outcome, decision, rescued=True, stall=rescued.stall_data())
        record_job(conn, now, job.id, events)
        return rescued


# How long the worker's cycle pauses, letting the loop run, before it tries the
# write lock again on the loop's thread; then it waits for it on the backend's
# thread (SQLite's own busy handler sleeps 1 ms, then longer, per attempt).
FAST_PATH_PAUSES = (0.0, 0.0002, 0.0005, 0.001)
SEQ = len(JOB_COLUMNS)  # where take_leases returns a job's seq, after its columns
SMALL_WAL_PAGES = 64  # the WAL's checkpoint interval once the disk was full
BLOCKED = 0.25  # seconds of waiting for, or holding, the write lock that others notice
SETTLE = 1.0  # seconds after such a block before a sweep judges leases again


def _refused(conn: sqlite3.Connection, job_id: str, fence: int) -> NoReturn:
    """Why a fence-checked write touched nothing: JobNotFound or LeaseLost."""
    if conn.execute(Q["job_exists"], (job_id,)).fetchone() is None:
        raise JobNotFound(f"no job with id {job_id!r}")
    raise LeaseLost(
        f"job {job_id} is no longer held with fence {fence}: "
        "it was recovered or settled by someone else"
    )


def _cancelled(
    conn: sqlite3.Connection, job_id: str, fence: int, error: str | None, now: float
) -> bool:
    """Whether the job, held with ``fence``, was cancelled while it ran (the
    write that ended its attempt refused it): then it is, now."""
    return conn.execute(Q["end_cancelled"], (error, now, job_id, fence)).rowcount > 0


def _listed(job_id: str, fence: int) -> bytes:
    """One lease as the statements of many take it (end_attempts)."""
    return orjson.dumps([[job_id, fence]])


class _Busy(Exception):
    """The loop's own connection found the write lock taken."""


def _failure(
    job_id: str,
    fence: int,
    error: str | None,
    decision: Decision,
    now: float,
    *,
    recovered_from: float | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """The fence-checked write that applies a retry decision (a recovery's
    records when the lost attempt was last proven alive)."""
    stall = int(decision.stall)
    if decision.state is State.CANCELLED:
        return Q["end_cancelled"], (error, now, job_id, fence)
    if decision.state is State.DEAD:
        return Q["bury"], (decision.dead_reason, error, stall, now, job_id, fence)
    run_at = now + decision.delay if decision.state is State.SCHEDULED else None
    return Q["requeue"], (decision.state, run_at, error, stall, recovered_from, job_id, fence)
