"""The SQLite backend: the embedded default, no server needed.

The protocol's verbs, thin: each checks its inputs and hands the work to the
part that does it (``Parts``), on the backend's one thread (``database.py``). One
connection per backend object; every transition runs in ``BEGIN IMMEDIATE``.
Worker liveness is an exclusive ``flock`` on a file beside the database, held
for the worker's whole life; the kernel drops it the moment the process dies,
and any other process's sweeper sees that (``liveness.py``).
"""

from __future__ import annotations

import builtins
import os
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

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
from tenure.backends.checks import (
    check_ago,
    check_cursor,
    check_graph,
    check_listing,
    check_match,
    check_prune_limit,
    check_retried_by,
    check_schedules,
    check_tick,
    cursor_seq,
    prefix_range,
)
from tenure.backends.sqlite.claiming import Claiming
from tenure.backends.sqlite.database import Database
from tenure.backends.sqlite.doorbells import Doorbells
from tenure.backends.sqlite.enqueue import Enqueue
from tenure.backends.sqlite.events import EventReader, event_cursor
from tenure.backends.sqlite.graphs import Workflows
from tenure.backends.sqlite.liveness import WorkerLocks, Workers
from tenure.backends.sqlite.opening import LATEST
from tenure.backends.sqlite.operators import Operators
from tenure.backends.sqlite.rescue import Rescue
from tenure.backends.sqlite.url import options_of_url, path_of_url
from tenure.backends.sqlite.within import CallerTransactions, HandlerTransactions
from tenure.config import DEFAULT_MAX_PAYLOAD, QueuePolicy
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.events import Event, RetriedBy
from tenure.core.limits import KeyCount
from tenure.core.names import check_job_id, check_job_ids, check_name
from tenure.core.payload import encode
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.core.values import check_integer
from tenure.core.workflows import Workflow, WorkflowSpec, WorkflowState
from tenure.job import Job, JobSpec, check_specs

__all__ = ["SQLiteBackend"]

MAX_SPAWNS = 2**31  # a spawn's seq: numbered from 1, per job
MAX_KEY_COUNTS = 100_000  # key_counts' rows at most


@dataclass(frozen=True, slots=True)
class Parts:
    """The parts that do the verbs' work, each given what it needs of ``db``.
    Their methods run on ``db``'s thread (``db.run``), except the cycle, the
    wait for events and the handler's transaction."""

    claiming: Claiming
    enqueue: Enqueue
    rescue: Rescue
    operators: Operators
    workers: Workers
    events: EventReader
    callers: CallerTransactions  # enqueue in a caller's transaction
    effects: HandlerTransactions  # a handler's own transaction
    workflows: Workflows

    @classmethod
    def of(cls, db: Database, locks: WorkerLocks, *, max_payload: int) -> Parts:
        clock = db.clock
        claiming = Claiming(db, clock)
        enqueue = Enqueue(db, clock, max_payload)
        workers = Workers(db, clock, locks, db.doorbells)
        events = EventReader(db, clock)
        return cls(
            claiming=claiming,
            enqueue=enqueue,
            rescue=Rescue(db, clock, workers, events),
            operators=Operators(db, clock),
            workers=workers,
            events=events,
            callers=CallerTransactions(db, enqueue, LATEST),
            effects=HandlerTransactions(db, claiming.completing, max_payload),
            workflows=Workflows(db, clock),
        )


class SQLiteBackend(DerivedVerbs):
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
        self.durable = durable
        self.busy_timeout = busy_timeout
        self.max_payload = max_payload
        self.clock = clock
        self._closed = False
        memory = path == ":memory:"
        directory = None if memory else os.path.abspath(f"{path}.workers")  # locks and bells
        locks = WorkerLocks(
            None if directory is None else Path(directory), None if memory else Path(path)
        )
        self.doorbells = Doorbells(directory)
        self.db = db = Database(
            path, durable=durable, busy_timeout=busy_timeout, read_only=read_only,
            adopt=adopt, clock=clock, doorbells=self.doorbells,
        )  # fmt: skip
        self.url = db.url
        self.parts = Parts.of(db, locks, max_payload=max_payload)
        self.callers = self.parts.callers

    @classmethod
    def from_url(cls, url: str, *, read_only: bool = False) -> SQLiteBackend:
        """A backend (not open yet) for ``sqlite:///path?options``: ``durable``
        (a boolean: fsync every commit), ``busy_timeout`` (ms, 0 to 1 hour),
        ``max_payload`` (bytes of JSON) and ``adopt`` (a boolean: add tenure's
        tables to a database another program's tables are in)."""
        return cls(path_of_url(url), read_only=read_only, **options_of_url(url))

    @property
    def conn(self) -> sqlite3.Connection:
        return self.db.conn

    async def open(self) -> None:
        await self.db.run(self.db.open)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.db.run(self._close)
        self.db.thread.shutdown()

    def _close(self) -> None:
        self.parts.workers.locks.release_all()
        self.doorbells.close()
        self.parts.effects.close()
        self.db.close()

    # -- producers ---------------------------------------------------------

    async def enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        check_specs(specs, self.max_payload)
        return await self.db.run(self.parts.enqueue.enqueue, specs)

    async def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        at = check_tick(schedule, at)
        check_specs([spec], self.max_payload)
        return await self.db.run(self.parts.enqueue.enqueue_tick, schedule, at, spec)

    async def last_ticks(
        self, schedules: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], Tick]:
        return await self.db.run(self.parts.enqueue.last_ticks, check_schedules(schedules))

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        await self.doorbells.wait(timeout)

    # -- workflows ---------------------------------------------------------

    async def enqueue_workflow(self, spec: WorkflowSpec) -> Workflow:
        check_graph(spec, self.max_payload)
        return await self.db.run(self.parts.workflows.enqueue_workflow, spec)

    async def spawn(self, job_id: str, fence: int, seq: int, spec: WorkflowSpec) -> list[Job]:
        check_job_id(job_id)
        check_integer("seq", seq, 1, MAX_SPAWNS)
        check_graph(spec, self.max_payload, spawn=True)
        return await self.db.run(self.parts.workflows.spawn, job_id, fence, seq, spec)

    async def get_workflow(self, workflow_id: str) -> Workflow:
        check_job_id(workflow_id)
        return await self.db.run(self.parts.workflows.get_workflow, workflow_id)

    async def cancel_workflow(self, workflow_id: str) -> Workflow:
        check_job_id(workflow_id)
        return await self.db.run(self.parts.workflows.cancel_workflow, workflow_id)

    async def get_many(self, job_ids: Sequence[str]) -> builtins.list[Job]:
        ids = check_job_ids(job_ids) or []
        return await self.db.run(self.parts.workflows.get_many, ids) if ids else []

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
        return await self.db.run(self.parts.workers.heartbeat, worker_id, set(leases))

    async def progress(self, job_id: str, fence: int, data: Any) -> None:
        payload = encode(data, what="progress", limit=self.max_payload)
        await self.db.run(self.parts.claiming.progress, job_id, fence, payload)

    async def complete(self, job_id: str, fence: int, result: Any = None) -> None:
        payload = encode(result, what="job result", limit=self.max_payload)
        await self.db.run(self.parts.claiming.complete, job_id, fence, payload)

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        await self.db.run(self.parts.claiming.fail, job_id, fence, outcome, error, decision)

    async def release(self, job_id: str, fence: int) -> None:
        await self.db.run(self.parts.claiming.release, job_id, fence, self.clock.now())

    def transaction(
        self, job_id: str, fence: int, result: Any = None
    ) -> AbstractContextManager[sqlite3.Connection]:
        """The handler's own transaction on this database, completing the job at
        commit, fence-checked (see ``JobContext.transaction``)."""
        return self.parts.effects.transaction(job_id, fence, result)

    # -- the sweeper and the pruner ----------------------------------------

    async def rescue(self, min_interval: float = 0.0) -> RescueReport:
        return await self.db.run(self.parts.rescue.rescue, min_interval)

    async def prune(self, limit: int) -> int:
        return await self.db.run(self.parts.rescue.prune, check_prune_limit(limit))

    # -- operators ---------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        return await self.db.run(self.parts.operators.cancel, check_job_id(job_id))

    async def retry_dead(
        self, queue: str, job_ids: Sequence[str] | None = None, by: str = RetriedBy.PYTHON
    ) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        data = {"by": check_retried_by(by).value}
        head = (self.clock.now(),)
        return await self.db.run(self.parts.operators.bulk, "retry_dead", queue, ids, head, data)

    async def purge_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        return await self.db.run(self.parts.operators.bulk, "purge_dead", queue, ids, ())

    async def delete_queue(self, queue: str) -> int:
        check_name("queue", queue)
        return await self.db.run(self.parts.operators.delete_queue, queue)

    async def get(self, job_id: str) -> Job:
        check_job_id(job_id)
        return await self.db.run(self.parts.operators.get, job_id)

    async def match_ids(self, prefix: str, limit: int) -> builtins.list[str]:
        prefix, limit = check_match(prefix, limit)
        bounds = prefix_range(prefix)
        if bounds is None:
            return []
        return await self.db.run(self.parts.operators.match_ids, bounds, prefix, limit)

    async def list(
        self,
        queue: str | None = None,
        state: State | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        state = check_listing(queue, state, limit)
        cursor = check_cursor(after)
        seq = None if cursor is None else cursor_seq(cursor)
        return await self.db.run(self.parts.operators.list, queue, state, limit, seq)

    async def counts(self, queue: str) -> dict[State, int]:
        check_name("queue", queue)
        return await self.db.run(self.parts.operators.counts, queue)

    async def key_counts(self, queue: str, limit: int = 1000) -> builtins.list[KeyCount]:
        check_name("queue", queue)
        check_integer("limit", limit, 1, MAX_KEY_COUNTS)
        return await self.db.run(self.parts.operators.key_counts, queue, limit)

    async def workflow_counts(self) -> dict[WorkflowState, int]:
        return await self.db.run(self.parts.operators.workflow_counts)

    async def workflow_outcomes(self) -> dict[WorkflowState, int]:
        return await self.db.run(self.parts.operators.workflow_outcomes)

    async def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        check_name("queue", queue)
        return await self.db.run(self.parts.operators.dead_counts, queue)

    async def lag(self, queue: str) -> float:
        check_name("queue", queue)
        return await self.db.run(self.parts.operators.lag, queue)

    async def queues(self) -> builtins.list[str]:
        return await self.db.run(self.parts.operators.queues)

    async def get_policy(self, queue: str) -> QueuePolicy:
        check_name("queue", queue)
        return await self.db.run(self.parts.operators.get_policy, queue)

    async def set_policy(self, queue: str, policy: QueuePolicy) -> None:
        check_name("queue", queue)
        policy.validate()
        data = orjson.dumps(policy.to_dict()).decode()
        await self.db.run(self.parts.operators.set_policy, queue, data)

    async def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        check_name("queue", queue)
        return await self.db.run(self.parts.operators.change_policy, queue, changes)

    # -- events ------------------------------------------------------------

    async def read_events(
        self, queue: str | None, after: str | None, limit: int, timeout: float = 0.0
    ) -> builtins.list[Event]:
        if queue is not None:
            check_name("queue", queue)
        return await self.parts.events.read(queue, event_cursor(after), limit, timeout)

    async def events_now(self, queue: str | None, ago: float = 0.0) -> str:
        if queue is not None:
            check_name("queue", queue)
        return str(await self.db.run(self.parts.events.last, check_ago(ago)))

    # -- workers -----------------------------------------------------------

    async def register_worker(self, info: WorkerInfo) -> None:
        await self.db.run(self.parts.workers.register, info)

    async def deregister_worker(self, worker_id: str) -> None:
        await self.db.run(self.parts.workers.deregister, worker_id)

    async def workers(self) -> builtins.list[WorkerInfo]:
        return await self.db.run(self.parts.workers.workers)
