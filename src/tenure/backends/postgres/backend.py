"""The PostgreSQL backend: the fleet's backend.

A connection pool (psycopg 3) serves the verbs; each verb is one transaction,
most of them one statement. Claims take rows with ``FOR UPDATE SKIP LOCKED``;
every settle is fence-checked in SQL; rescue is guarded fleet-wide by
``pg_try_advisory_xact_lock``. Liveness is a session advisory lock per worker
(see ``liveness.py``); idle workers are woken by LISTEN/NOTIFY (``wakeup.py``),
on the same session (``session.py``).

This class is the protocol's verbs, each handed to the part that does its
work (``Parts``, as on Redis). It opens and migrates the database, and closes
what the parts hold.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import psycopg

from tenure.backends.base import (
    Capabilities,
    DerivedVerbs,
    LeaseRef,
    Page,
    Renewal,
    RescueReport,
    Tick,
    WorkerInfo,
)
from tenure.backends.postgres.claiming import Claiming
from tenure.backends.postgres.database import Database
from tenure.backends.postgres.enqueue import Enqueue
from tenure.backends.postgres.events import EventReader
from tenure.backends.postgres.flows import Flows
from tenure.backends.postgres.liveness import Liveness, Workers
from tenure.backends.postgres.operators import Operators
from tenure.backends.postgres.rescue import Rescue
from tenure.backends.postgres.session import Session
from tenure.backends.postgres.url import POOL_SIZE, Endpoints, check_schema, parse
from tenure.backends.postgres.wakeup import HELD_BACK_POLL, IDLE_POLL, Wakeups
from tenure.backends.postgres.within import CallerTransactions, HandlerTransactions
from tenure.backends.sqlfile import latest_version, load_migrations
from tenure.config import DEFAULT_MAX_PAYLOAD, QueuePolicy
from tenure.core.events import Event, RetriedBy
from tenure.core.limits import KeyCount
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.core.workflows import Workflow, WorkflowSpec, WorkflowState
from tenure.errors import BackendUnavailable
from tenure.job import Job, JobSpec

MIGRATIONS = load_migrations("tenure.backends.postgres.migrations")
LATEST = latest_version(MIGRATIONS)

__all__ = ["PostgresBackend"]


@dataclass(frozen=True, slots=True)
class Parts:
    """The parts that do the verbs' work, each given what it needs of ``db``."""

    claiming: Claiming
    enqueue: Enqueue
    flows: Flows
    rescue: Rescue
    operators: Operators
    workers: Workers
    events: EventReader
    callers: CallerTransactions  # enqueue in a caller's transaction
    effects: HandlerTransactions  # a handler's own transaction

    @classmethod
    def of(
        cls, db: Database, liveness: Liveness, wakeups: Wakeups, *, pool_size: int, max_payload: int
    ) -> Parts:
        enqueue = Enqueue(db, max_payload)
        flows = Flows(db, max_payload)
        return cls(
            claiming=Claiming(db, liveness, pool_size=pool_size, max_payload=max_payload),
            enqueue=enqueue,
            flows=flows,
            rescue=Rescue(db, wakeups),
            operators=Operators(db),
            workers=Workers(db, liveness),
            events=EventReader(db),
            callers=CallerTransactions(db, enqueue, flows, LATEST),
            effects=HandlerTransactions(db, max_payload),
        )


class PostgresBackend(DerivedVerbs):
    """Jobs in PostgreSQL, under their own schema (default ``tenure``)."""

    # Fuller cycles cost its server less CPU per job (docs/design.md). Idle
    # workers are woken by NOTIFY, due scheduled jobs by the sweep's: the
    # safety poll is long (wait_for_jobs returns sooner for limited queues).
    capabilities = Capabilities(remote=True, costly_cycles=True, idle_poll=IDLE_POLL)

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "tenure",
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        pool_size: int = POOL_SIZE,
        endpoints: Endpoints | None = None,
    ) -> None:
        """``endpoints``: where the pool and the sessions connect, if not all
        to ``conninfo`` (behind a pooler: ``url.Endpoints``)."""
        check_schema(schema)
        self.url = conninfo
        self.conninfo = conninfo
        self.max_payload = max_payload
        self.pool_size = pool_size
        self.schema = schema
        endpoints = endpoints or Endpoints.direct(conninfo)
        self.db = db = Database(endpoints, schema)
        self.namespace = db.namespace
        self.q = db.q
        # The liveness session (its locks and LISTEN: PostgreSQL itself) and the
        # pool (a transaction pooler's, when pooled) are two parts.
        self.wakeups = Wakeups()
        session = Session(endpoints.session, db.q["listen"], self.wakeups.signal, self.wakeups.gap)
        self.liveness = Liveness(session, db.namespace)
        self.wakeups.listen = self.liveness.listen
        self.wakeups.deaf = session.gone
        self.parts = Parts.of(
            db, self.liveness, self.wakeups, pool_size=pool_size, max_payload=max_payload
        )
        self.callers = self.parts.callers

    @classmethod
    def from_url(cls, url: str) -> PostgresBackend:
        """A backend (not open yet) for ``postgresql://user[:password]@host[:port]/db``.
        tenure's options: ``schema`` (default ``tenure``), ``max_payload`` (bytes
        of JSON), ``pool_size`` (the work pool's connections, default 2),
        ``liveness_url`` (PostgreSQL itself, behind a transaction pooler:
        url.py); libpq's (``sslmode``, ``connect_timeout``, default 5 s…) go to
        libpq, which must know them."""
        options = parse(url)
        return cls(
            options.conninfo,
            schema=options.schema,
            max_payload=options.max_payload,
            pool_size=options.pool_size,
            endpoints=options.endpoints,
        )

    # -- opening -----------------------------------------------------------

    async def open(self) -> None:
        """Connect (the first connection is made here, directly: a failure says
        the server's reason at once, or within ``connect_timeout``) and migrate."""
        if self.db.pool is not None:
            return
        await self.db.open(self.pool_size)
        try:
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def _migrate(self) -> None:
        """Apply pending migrations, once across the fleet (an advisory lock)."""
        q = self.db.q
        async with self.db.tx() as conn:
            await conn.execute(q["migration_lock"], {"lock": (self.db.namespace << 32) | 2})
            await conn.execute(q["create_schema"])
            await conn.execute(q["create_migrations"])
            cur = await conn.execute(q["migrations_applied"])
            done = {v for (v,) in await cur.fetchall()}
            if max(done, default=0) > LATEST:
                raise BackendUnavailable(
                    f"schema {self.schema} has version {max(done)}, newer than this tenure "
                    f"knows ({LATEST}): upgrade tenure"
                )
            for version, name, script in MIGRATIONS:
                if version not in done:
                    await conn.execute(q.render(script))
                    await conn.execute(q["record_migration"], {"version": version, "name": name})

    async def close(self) -> None:
        self.parts.effects.close()
        await self.liveness.close()
        await self.parts.claiming.close()
        await self.db.close()

    # -- producers ---------------------------------------------------------

    async def enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        return await self.parts.enqueue.enqueue(specs)

    async def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        return await self.parts.enqueue.enqueue_tick(schedule, at, spec)

    async def last_ticks(
        self, schedules: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], Tick]:
        return await self.parts.enqueue.last_ticks(schedules)

    async def enqueue_workflow(self, spec: WorkflowSpec) -> Workflow:
        return await self.parts.flows.enqueue_workflow(spec)

    async def spawn(self, job_id: str, fence: int, seq: int, spec: WorkflowSpec) -> list[Job]:
        return await self.parts.flows.spawn(job_id, fence, seq, spec)

    async def get_workflow(self, workflow_id: str) -> Workflow:
        return await self.parts.flows.get_workflow(workflow_id)

    async def cancel_workflow(self, workflow_id: str) -> Workflow:
        return await self.parts.flows.cancel_workflow(workflow_id)

    async def get_many(self, job_ids: Sequence[str]) -> builtins.list[Job]:
        return await self.parts.flows.get_many(job_ids)

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        if self.parts.claiming.held_back(queues):  # room comes back without a NOTIFY
            timeout = min(timeout, HELD_BACK_POLL)
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
        return await self.parts.claiming.complete_and_claim(
            items, worker_id, queues, limit, skip_tasks=skip_tasks
        )

    async def heartbeat(self, worker_id: str, leases: Collection[LeaseRef]) -> Renewal:
        return await self.parts.workers.heartbeat(worker_id, leases)

    async def progress(self, job_id: str, fence: int, data: Any) -> None:
        await self.parts.claiming.progress(job_id, fence, data)

    async def complete(self, job_id: str, fence: int, result: Any = None) -> None:
        await self.parts.claiming.complete(job_id, fence, result)

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        await self.parts.claiming.fail(job_id, fence, outcome, error, decision)

    async def release(self, job_id: str, fence: int) -> None:
        await self.parts.claiming.release(job_id, fence)

    def transaction(
        self, job_id: str, fence: int, result: Any = None
    ) -> AbstractContextManager[psycopg.Connection[Any]]:
        """The handler's own transaction on this database, completing the job at
        commit, fence-checked (see ``HandlerTransactions.transaction``)."""
        return self.parts.effects.transaction(job_id, fence, result)

    # -- the sweeper -------------------------------------------------------

    async def rescue(self, min_interval: float = 0.0) -> RescueReport:
        return await self.parts.rescue.rescue(min_interval)

    async def prune(self, limit: int) -> int:
        return await self.parts.rescue.prune(limit)

    # -- operators ---------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        return await self.parts.operators.cancel(job_id)

    async def retry_dead(
        self, queue: str, job_ids: Sequence[str] | None = None, by: str = RetriedBy.PYTHON
    ) -> int:
        return await self.parts.operators.retry_dead(queue, job_ids, by)

    async def purge_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        return await self.parts.operators.purge_dead(queue, job_ids)

    async def delete_queue(self, queue: str) -> int:
        return await self.parts.operators.delete_queue(queue)

    async def get(self, job_id: str) -> Job:
        return await self.parts.operators.get(job_id)

    async def match_ids(self, prefix: str, limit: int) -> builtins.list[str]:
        return await self.parts.operators.match_ids(prefix, limit)

    async def list(
        self,
        queue: str | None = None,
        state: State | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        return await self.parts.operators.list(queue, state, limit, after)

    async def counts(self, queue: str) -> dict[State, int]:
        return await self.parts.operators.counts(queue)

    async def key_counts(self, queue: str, limit: int = 1000) -> builtins.list[KeyCount]:
        return await self.parts.operators.key_counts(queue, limit)

    async def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        return await self.parts.operators.dead_counts(queue)

    async def workflow_counts(self) -> dict[WorkflowState, int]:
        return await self.parts.operators.workflow_counts()

    async def workflow_outcomes(self) -> dict[WorkflowState, int]:
        return await self.parts.operators.workflow_outcomes()

    async def lag(self, queue: str) -> float:
        return await self.parts.operators.lag(queue)

    async def queues(self) -> builtins.list[str]:
        return await self.parts.operators.queues()

    async def get_policy(self, queue: str) -> QueuePolicy:
        return await self.parts.operators.get_policy(queue)

    async def set_policy(self, queue: str, policy: QueuePolicy) -> None:
        await self.parts.operators.set_policy(queue, policy)

    async def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        return await self.parts.operators.change_policy(queue, changes)

    # -- events ------------------------------------------------------------

    async def read_events(
        self, queue: str | None, after: str | None, limit: int, timeout: float = 0.0
    ) -> builtins.list[Event]:
        return await self.parts.events.read(queue, after, limit, timeout)

    async def events_now(self, queue: str | None, ago: float = 0.0) -> str:
        return await self.parts.events.now(queue, ago)

    # -- workers -----------------------------------------------------------

    async def register_worker(self, info: WorkerInfo) -> None:
        await self.parts.workers.register(info)

    async def deregister_worker(self, worker_id: str) -> None:
        await self.parts.workers.deregister(worker_id)

    async def workers(self) -> builtins.list[WorkerInfo]:
        return await self.parts.workers.workers()
