"""The Redis backend: every transition one Lua script, one round trip per verb.

Jobs, queues, leases and workers live in the keys ``keys.py`` lays out; each
transition runs as one script (``scripts/*.lua``) on the keys of one queue,
atomically, judged by Redis's own clock (``TIME``). This class is the
protocol's verbs, thin: each checks its arguments and hands them to the part
that does the work, built when the backend opens (:class:`Parts`):
``claiming.py`` (the cycle and the lease holder's writes), ``enqueue.py``,
``rescue.py`` (the sweep and the prune), ``operators.py``, ``liveness.py``
(workers: registration, heartbeat, a named connection each), ``events.py`` and
``wakeup.py`` (idle workers block on per-queue signal lists), ``flows.py``
(workflows) and ``relay.py`` (their messages across hash slots). ``index.py``
finds a job's queue, hence its hash slot, from its id.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

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
    check_graph,
    check_listing,
    check_match,
    check_prune_limit,
    check_retried_by,
    check_schedules,
    check_tick,
)
from tenure.backends.redis.claiming import Claiming
from tenure.backends.redis.enqueue import Enqueue
from tenure.backends.redis.events import EventReader
from tenure.backends.redis.flows import Flows
from tenure.backends.redis.index import IdCache, Index
from tenure.backends.redis.liveness import Liveness, Workers
from tenure.backends.redis.operators import Operators, parse_cursor
from tenure.backends.redis.relay import Relay
from tenure.backends.redis.rescue import Rescue
from tenure.backends.redis.scripts import Runner
from tenure.backends.redis.topology import Topology
from tenure.backends.redis.url import Options, parse
from tenure.backends.redis.wakeup import IDLE_POLL, Wakeups
from tenure.config import QueuePolicy
from tenure.core.events import Event, RetriedBy
from tenure.core.limits import KeyCount
from tenure.core.names import check_job_id, check_job_ids, check_name
from tenure.core.payload import encode
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.core.workflows import Workflow, WorkflowSpec, WorkflowState
from tenure.errors import BackendUnavailable, InvalidInput
from tenure.job import Job, JobSpec, check_specs


@dataclass(frozen=True, slots=True)
class Parts:
    """An open backend: its connection to Redis and the parts that do the verbs' work."""

    topology: Topology
    runner: Runner
    liveness: Liveness
    workers: Workers
    claiming: Claiming
    enqueue: Enqueue
    rescue: Rescue
    operators: Operators
    events: EventReader
    wakeups: Wakeups
    flows: Flows

    @classmethod
    def of(cls, topology: Topology, runner: Runner, options: Options, ids: IdCache) -> Parts:
        keys = options.keys
        index = Index(runner, keys, ids)
        liveness = Liveness(keys, runner)
        events = EventReader(runner, keys, index)
        relay = Relay(runner, keys)
        operators = Operators(runner, keys, index, relay)
        flows = Flows(runner, keys, index, relay)
        return cls(
            topology=topology,
            runner=runner,
            liveness=liveness,
            workers=Workers(runner, keys, index, liveness),
            claiming=Claiming(runner, keys, index, liveness, relay),
            enqueue=Enqueue(runner, keys, index),
            rescue=Rescue(
                runner,
                keys,
                index,
                liveness,
                events=events,
                policy_of=operators.get_policy,
                relay=relay,
                drop=flows.drop,
            ),
            operators=operators,
            events=events,
            wakeups=Wakeups(topology, keys),
            flows=flows,
        )


class RedisBackend(DerivedVerbs):
    """Jobs in Redis (keys laid out for Redis Cluster). See the module docstring."""

    # A cycle is one script call: cheap, and it gains more from overlapping than
    # filling. An idle worker's wait returns when a scheduled job comes due
    # (wakeup.py): its safety poll can be rare.
    capabilities = Capabilities(remote=True, costly_cycles=False, idle_poll=IDLE_POLL)
    transaction = None  # no database a handler writes to: no exactly-once effects here
    callers = None  # nor a caller's transaction to enqueue in

    def __init__(self, options: Options) -> None:
        self.url = options.url
        self.options = options
        self.keys = options.keys
        self.max_payload = options.max_payload
        self._safe_url = options.safe_url
        self._parts: Parts | None = None
        self._ids: IdCache = IdCache()  # job id -> queue, kept across a close

    @classmethod
    def from_url(cls, url: str) -> RedisBackend:
        """A backend (not open yet) for a ``redis://``, ``rediss://`` or ``unix://``
        URL; see ``url.py`` for the options."""
        return cls(parse(url))

    # -- plumbing ----------------------------------------------------------

    @property
    def parts(self) -> Parts:
        if self._parts is None:
            raise BackendUnavailable(f"the Redis backend at {self._safe_url} is not open")
        return self._parts

    @property
    def runner(self) -> Runner:
        return self.parts.runner

    @property
    def liveness(self) -> Liveness:
        return self.parts.liveness

    async def open(self) -> None:
        if self._parts is not None:
            return
        try:
            topology = Topology(self.options)
        except (ValueError, TypeError) as exc:
            raise InvalidInput(f"bad Redis URL {self._safe_url!r}: {exc}") from None
        runner = Runner(topology, self._safe_url)
        try:
            await topology.open()
            await runner.load()
        except (BackendUnavailable, RedisError, OSError) as exc:
            await topology.close()
            if isinstance(exc, BackendUnavailable):
                raise
            raise BackendUnavailable(f"Redis at {self._safe_url}: {exc}") from exc
        self._parts = Parts.of(topology, runner, self.options, self._ids)

    async def close(self) -> None:
        if self._parts is not None:
            await self._parts.liveness.close()  # no deregistering: to the fleet, a kill -9
            await self._parts.wakeups.close()
            await self._parts.topology.close()
        self._parts = None

    # -- producers ---------------------------------------------------------

    async def enqueue(self, specs: Sequence[JobSpec]) -> builtins.list[Job]:
        check_specs(specs, self.max_payload)
        if not specs:
            return []
        return await self.parts.enqueue.enqueue(specs)

    async def enqueue_workflow(self, spec: WorkflowSpec) -> Workflow:
        check_graph(spec, self.max_payload)  # each step's spec too
        return await self.parts.flows.enqueue_workflow(spec)

    async def spawn(self, job_id: str, fence: int, seq: int, spec: WorkflowSpec) -> list[Job]:
        check_job_id(job_id)
        check_graph(spec, self.max_payload, spawn=True)
        check_specs([s.spec for s in spec.steps], self.max_payload)
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise InvalidInput(f"a spawn's seq is an integer from 1, got {seq!r}")
        return await self.parts.flows.spawn(job_id, fence, seq, spec)

    async def get_workflow(self, workflow_id: str) -> Workflow:
        return await self.parts.flows.get_workflow(check_job_id(workflow_id))

    async def cancel_workflow(self, workflow_id: str) -> Workflow:
        return await self.parts.flows.cancel_workflow(check_job_id(workflow_id))

    async def get_many(self, job_ids: Sequence[str]) -> builtins.list[Job]:
        ids = check_job_ids(job_ids) or []
        return await self.parts.flows.get_many(ids) if ids else []

    async def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        at = check_tick(schedule, at)
        check_specs([spec], self.max_payload)
        return await self.parts.enqueue.enqueue_tick(schedule, at, spec)

    async def last_ticks(
        self, schedules: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], Tick]:
        pairs = check_schedules(schedules)
        return await self.parts.enqueue.last_ticks(pairs)

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        if self._parts is not None:  # closed: nothing to wake anyone
            await self._parts.wakeups.wait(queues, timeout)

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
        if self._parts is None and not leases:
            return Renewal()  # nothing to renew, and no worker of ours to prove alive
        return await self.parts.workers.heartbeat(worker_id, leases)

    async def progress(self, job_id: str, fence: int, data: Any) -> None:
        payload = encode(data, what="progress", limit=self.max_payload)
        await self.parts.claiming.progress(job_id, fence, payload)

    async def complete(self, job_id: str, fence: int, result: Any = None) -> None:
        payload = encode(result, what="job result", limit=self.max_payload)
        await self.parts.claiming.complete(job_id, fence, payload)

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        await self.parts.claiming.fail(job_id, fence, outcome, error, decision)

    async def release(self, job_id: str, fence: int) -> None:
        await self.parts.claiming.release(job_id, fence)

    # -- the sweeper -------------------------------------------------------

    async def rescue(self, min_interval: float = 0.0) -> RescueReport:
        return await self.parts.rescue.rescue(min_interval)

    async def prune(self, limit: int) -> int:
        return await self.parts.rescue.prune(check_prune_limit(limit))

    # -- lifecycle events --------------------------------------------------

    async def read_events(
        self, queue: str | None, after: str | None, limit: int, timeout: float = 0.0
    ) -> builtins.list[Event]:
        return await self.parts.events.read(queue, after, limit, timeout)

    async def events_now(self, queue: str | None, ago: float = 0.0) -> str:
        return await self.parts.events.now(queue, check_ago(ago))

    # -- operators ---------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        return await self.parts.operators.cancel(check_job_id(job_id))

    async def retry_dead(
        self, queue: str, job_ids: Sequence[str] | None = None, by: str = RetriedBy.PYTHON
    ) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        retried_by = check_retried_by(by).value
        if ids is not None and not ids:
            return 0
        return await self.parts.operators.retry_dead(queue, ids, retried_by)

    async def purge_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        if ids is not None and not ids:
            return 0
        return await self.parts.operators.purge_dead(queue, ids)

    async def delete_queue(self, queue: str) -> int:
        return await self.parts.operators.delete_queue(check_name("queue", queue))

    async def get(self, job_id: str) -> Job:
        return await self.parts.operators.get(check_job_id(job_id))

    async def match_ids(self, prefix: str, limit: int) -> builtins.list[str]:
        prefix, limit = check_match(prefix, limit)
        return await self.parts.operators.match_ids(prefix, limit)

    async def list(
        self,
        queue: str | None = None,
        state: State | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        state = check_listing(queue, state, limit)
        cursor = parse_cursor(after)
        return await self.parts.operators.list(queue, state, limit, cursor)

    async def counts(self, queue: str) -> dict[State, int]:
        return await self.parts.operators.counts(check_name("queue", queue))

    async def key_counts(self, queue: str, limit: int = 1000) -> builtins.list[KeyCount]:
        check_name("queue", queue)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput(f"key_counts' limit must be a whole number >= 1, got {limit!r}")
        return await self.parts.operators.key_counts(queue, limit)

    async def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        return await self.parts.operators.dead_counts(check_name("queue", queue))

    async def workflow_counts(self) -> dict[WorkflowState, int]:
        return await self.parts.operators.workflow_counts()

    async def workflow_outcomes(self) -> dict[WorkflowState, int]:
        return await self.parts.operators.workflow_outcomes()

    async def lag(self, queue: str) -> float:
        return await self.parts.operators.lag(check_name("queue", queue))

    async def queues(self) -> builtins.list[str]:
        return await self.parts.operators.queues()

    async def get_policy(self, queue: str) -> QueuePolicy:
        return await self.parts.operators.get_policy(check_name("queue", queue))

    async def set_policy(self, queue: str, policy: QueuePolicy) -> None:
        check_name("queue", queue)
        policy.validate()
        await self.parts.operators.set_policy(queue, policy)

    async def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        return await self.parts.operators.change_policy(check_name("queue", queue), changes)

    # -- workers -----------------------------------------------------------

    async def register_worker(self, info: WorkerInfo) -> None:
        check_name("worker", info.id)
        await self.parts.workers.register(info)

    async def deregister_worker(self, worker_id: str) -> None:
        await self.parts.workers.deregister(worker_id)

    async def workers(self) -> builtins.list[WorkerInfo]:
        return await self.parts.workers.workers()
