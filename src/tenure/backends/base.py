"""The Backend protocol: the seam between tenure and storage.

Verbs are named after state transitions (see ``tenure.core.states``). Every verb
is atomic. Every write made by a lease holder presents ``(job_id, fence)``; a
stale fence raises :class:`~tenure.errors.LeaseLost` and changes nothing.
Policy decisions (retry, backoff, dead-lettering) are made in ``tenure.core``
and handed to the backend as a :class:`~tenure.core.retry.Decision`. Times
are judged by the storage's own clock, never by a caller's.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tenure.backends.capabilities import Capabilities as Capabilities  # noqa: PLC0414
from tenure.config import QueuePolicy
from tenure.context import Transaction
from tenure.core.events import Detector, Event, RetriedBy
from tenure.core.limits import KeyCount
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.core.workflows import Workflow, WorkflowSpec, WorkflowState
from tenure.job import Job, JobSpec

LeaseRef = tuple[str, int]  # (job_id, fence)


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A registered worker, as storage knows it."""

    id: str
    hostname: str
    pid: int
    queues: tuple[str, ...]
    started_at: float = 0.0
    last_seen: float = 0.0
    leases: int = 0  # active jobs it holds (as ``workers()`` counts them)
    # Whether storage's liveness test (the sweeper's: a lock, a session, a
    # named connection) finds the worker's process there, as ``workers()`` read it.
    alive: bool = True


@dataclass(frozen=True, slots=True)
class Renewal:
    """What one heartbeat tells its worker about the leases it presented:
    ``lost``, those no longer held (their attempts must stop and never settle),
    and ``cancel_requested``, those still held whose job was cancelled while
    active (their attempts must stop, and end ``cancelled``)."""

    lost: frozenset[LeaseRef] = frozenset()
    cancel_requested: frozenset[LeaseRef] = frozenset()


@dataclass(frozen=True, slots=True)
class Rescued:
    """One attempt the sweeper recovered, as storage knew it. Times are the
    storage's clock: ``at``, the sweep's; ``proven_at``, when the attempt's
    owner last proved it alive: for ``worker_gone``, the later of the worker's
    last heartbeat and the lease's last renewal (its claim counts: a worker
    that claimed was alive); for ``lease_expired``, the lease's last renewal.
    None only for an attempt claimed by a tenure that did not record its start."""

    job_id: str
    fence: int
    outcome: Outcome  # stalled (lease expired) or crashed (its worker is gone)
    state: State  # where the job went: queued, scheduled or dead
    queue: str
    task: str
    worker: str | None  # the lease holder
    proven_at: float | None
    at: float

    @classmethod
    def of(cls, job: Job, outcome: Outcome, state: State, proven_at: float | None,
           at: float) -> Rescued:  # fmt: skip
        return cls(job.id, job.fence, outcome, state, job.queue, job.task, job.worker,
                   proven_at, at)  # fmt: skip

    @property
    def detector(self) -> Detector:
        return Detector.WORKER_GONE if self.outcome is Outcome.CRASHED else Detector.LEASE_EXPIRED

    @property
    def silent_for(self) -> float | None:
        """Seconds from the last proof of life to the sweep that noticed its absence."""
        return None if self.proven_at is None else max(self.at - self.proven_at, 0.0)

    def stall_data(self) -> dict[str, Any]:
        """What the ``stalled`` event says beyond its detector."""
        silent = None if self.proven_at is None else round(max(self.at - self.proven_at, 0.0), 3)
        return {"worker": self.worker, "silent_for": silent}


@dataclass(frozen=True, slots=True)
class RescueReport:
    """What one sweep did. ``swept`` is False when another sweep ran within the
    interval, or one would find nothing; ``retry_in``: seconds to try again."""

    swept: bool
    rescued: tuple[Rescued, ...] = ()
    promoted: int = 0  # scheduled jobs that became due and were moved to queued
    dead_workers: tuple[str, ...] = ()
    retry_in: float = 0.0


@dataclass(frozen=True, slots=True)
class Tick:
    """A schedule's last tick that storage made a job for."""

    at: float  # the tick, seconds since the epoch
    job_id: str


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing; pass ``next_cursor`` back as ``after`` for the next."""

    jobs: list[Job]
    next_cursor: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class CallerTransactions(Protocol):
    """Enqueue in a caller's own transaction, on the caller's connection to the
    same database: the job commits with it or not at all, and tenure never
    commits or rolls it back. The SQL backends' ``callers``."""

    def check_kind(self, conn: object) -> None:
        """InvalidInput unless ``conn`` is a connection of the kind this backend takes."""

    def enqueue(self, conn: Any, specs: Sequence[JobSpec]) -> builtins.list[Job]:
        """``Backend.enqueue`` in ``conn``'s transaction, from the caller's thread."""

    async def aenqueue(self, conn: Any, specs: Sequence[JobSpec]) -> builtins.list[Job]:
        """``enqueue``, for an async connection on the running loop."""

    def enqueue_workflow(self, conn: Any, spec: WorkflowSpec) -> Workflow:
        """``Backend.enqueue_workflow`` in ``conn``'s transaction."""

    async def aenqueue_workflow(self, conn: Any, spec: WorkflowSpec) -> Workflow:
        """``enqueue_workflow``, for an async connection on the running loop."""


def kind_of(conn: object) -> str:
    """A connection's type, for a message, with a hint for a wrapper's."""
    kind = type(conn)
    named = f"{kind.__module__}.{kind.__qualname__}"
    if kind.__module__.startswith("sqlalchemy"):
        return f"{named} (pass its driver's connection: .connection.driver_connection)"
    return named


@runtime_checkable
class Backend(Protocol):
    """Storage for jobs, leases, queues' policies and workers."""

    url: str
    max_payload: int  # the largest JSON arguments, result or progress, in bytes
    capabilities: Capabilities

    @property
    def transaction(self) -> Transaction | None:
        """Exactly-once effects, where storage is a database a handler can write
        to (PostgreSQL, SQLite; None on Redis): ``transaction(job_id, fence,
        result)`` is a context manager giving a connection in a transaction
        that also completes the job, fence-checked (``job.transaction()``)."""

    @property
    def callers(self) -> CallerTransactions | None:
        """Enqueue in a caller's own transaction (``enqueue(..., conn=)``), where
        storage is a database the caller shares (PostgreSQL, SQLite; None on Redis)."""

    async def open(self) -> None:
        """Connect and apply pending migrations. Raises BackendUnavailable."""

    async def close(self) -> None:
        """Release connections and, for a registered worker, its liveness."""

    # -- producers ---------------------------------------------------------

    async def enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        """Store new jobs, in one transaction, in order.

        A spec whose ``key`` matches an unfinished job of the same queue returns
        that job instead of a new one (also within one batch).
        """

    async def enqueue_workflow(self, spec: WorkflowSpec) -> Workflow:
        """Store the workflow and every step of it, atomically: all or nothing
        (``tenure.core.workflows`` says what storage keeps and how it moves).
        Steps without upstream are ``queued`` (or ``scheduled``, by their delay
        or run_at), the others ``waiting``; each gets an ``enqueued`` event
        whose data has the workflow's id. With ``spec.key``: while a workflow
        with that key is ``running``, it is returned instead and nothing is
        stored. Wakes idle workers as ``enqueue`` does."""

    async def spawn(self, job_id: str, fence: int, seq: int, spec: WorkflowSpec) -> list[Job]:
        """From the running step ``(job_id, fence)`` (LeaseLost if stale;
        InvalidInput if the job is no workflow's step): add ``spec``'s steps
        (``spec.id`` and ``spec.key`` are ignored) to the step's workflow, in
        one transaction: its sources run at once, and every dependent of the
        step (the workflow itself too, when the step is one of its sinks) also
        waits for ``spec``'s sinks, placed in its upstream right after the
        step's entry and what the step spawned before (``spawn_ord``). ``seq``
        numbers the step's spawns (from 1, per job, across its attempts): a
        spawn whose ``seq`` the job made already returns its jobs and changes
        nothing, so a deterministic handler that runs again spawns once.
        Returns the jobs that run at once (the spawned flow's first steps)."""

    async def get_workflow(self, workflow_id: str) -> Workflow:
        """The workflow with its jobs (no history). JobNotFound if absent."""

    async def cancel_workflow(self, workflow_id: str) -> Workflow:
        """Cancel the workflow and each of its unfinished steps as ``cancel``
        would: it ends ``cancelled``, unless it ``completed`` (a ``failed``
        one too: a DLQ retry of its dead step then resumes nothing); JobNotFound
        if absent."""

    async def get_many(self, job_ids: Sequence[str]) -> builtins.list[Job]:
        """The jobs with these ids, in that order, without history; ids of
        no job are left out. One round trip (a few per Cluster node)."""

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        """Return when a job may have become claimable in ``queues``, or after
        ``timeout`` seconds. Backends that can wake idle workers (LISTEN/NOTIFY,
        a blocking pop) return early; the others just wait."""

    async def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        """Store ``spec`` as the job of ``schedule``'s tick ``at`` and make ``at``
        the schedule's last tick, atomically, if the last tick storage holds for
        the schedule (in ``spec.queue``) is earlier, or none; else store
        nothing and return None. However many workers tick at once, one job per
        tick (``key=`` would not do: it dedupes against unfinished jobs only)."""

    async def last_ticks(
        self, schedules: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], Tick]:
        """The last tick of each ``(queue, schedule)`` that has one."""

    # -- lease holders -----------------------------------------------------

    async def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        *,
        skip_tasks: Collection[str] = (),
    ) -> list[Job]:
        """Claim up to ``limit`` due jobs from ``queues`` in one transaction.

        Order: due jobs only; higher priority first; then older ``run_at``.
        Each claimed job becomes ``active`` with ``fence + 1``, ``attempts + 1``,
        a lease of its queue's ``lease_ttl`` (none for at-most-once queues) and
        a new attempt in its history.

        Jobs of the tasks in ``skip_tasks`` (those the worker has no handler
        for, in a rolling deploy) are passed over: they stay as they are, in
        their place, and the claim takes the best of the others. Without it the
        claim reads no task name. Redis looks past at most SKIP_SCAN_MAX
        (``redis/scripts/_lib.lua``) such jobs per queue and claim.
        """

    async def heartbeat(self, worker_id: str, leases: Collection[LeaseRef]) -> Renewal:
        """Renew the leases ``worker_id`` presents, in one round trip; return those
        among them that are no longer held, and those held whose job's cancel was
        requested. Only presented leases are renewed: a lease the worker does not
        know of (a claim whose reply was lost) expires and is recovered. Raises
        LivenessLost when storage no longer sees the worker alive."""

    async def progress(self, job_id: str, fence: int, data: Any) -> None:
        """Record a handler's progress report (JSON) for its current attempt."""

    async def complete(self, job_id: str, fence: int, result: Any = None) -> None:
        """``active -> completed`` with a JSON result. A workflow's step also
        moves its edges and releases its dependents, in the same transaction
        (so do ``complete_many``, ``complete_and_claim``, ``transaction``; and
        ``fail``, ``rescue``, ``cancel``, ``retry_dead`` for theirs)."""

    async def complete_many(self, items: Sequence[tuple[str, int, bytes]]) -> set[LeaseRef]:
        """Complete many jobs at once: ``(job_id, fence, result as JSON bytes)``
        each, in one transaction; return the leases that were no longer held
        (those changed nothing). The worker batches its completions through it."""

    async def complete_and_claim(
        self,
        items: Sequence[tuple[str, int, bytes]],
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        *,
        skip_tasks: Collection[str] = (),
    ) -> tuple[set[LeaseRef], builtins.list[Job]]:
        """``complete_many(items)``, then ``claim(worker_id, queues, limit,
        skip_tasks=skip_tasks)``, in one round trip: the worker's cycle, one
        storage conversation per batch of finished jobs. Returns the leases no
        longer held and the jobs claimed. Either part may be empty (``limit`` 0
        claims nothing)."""

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        """Record an unsuccessful attempt and apply ``decision``:
        ``active -> queued | scheduled | dead | cancelled``. A job whose cancel
        was requested goes to ``cancelled`` whatever the decision (so does it
        on ``release`` and ``rescue``): it never runs again. Its attempt keeps
        ``outcome``."""

    async def release(self, job_id: str, fence: int) -> None:
        """Hand the job back (a drain, or a worker that does not know the job's
        task): ``active -> queued`` in its place in line, the attempt does not
        count."""

    # -- the sweeper -------------------------------------------------------

    async def rescue(self, min_interval: float = 0.0) -> RescueReport:
        """Recover attempts whose lease expired (``stalled``) or whose worker is
        gone (``crashed``), deciding each job's fate with ``tenure.core.retry``,
        and promote due scheduled jobs. Skipped (``swept=False``) when any
        process swept less than ``min_interval`` seconds ago, or (PostgreSQL)
        while nothing is active, queued or due since its last sweep."""

    async def prune(self, limit: int) -> int:
        """Retention: delete up to ``limit`` finished jobs that finished longer
        ago than their queue's policy keeps them (``keep_completed`` for
        completed and cancelled jobs, ``keep_dead`` for dead ones; judged by
        storage's clock), oldest first, with their history and every index
        entry; return how many. Bounded: in short transactions (or script
        calls) of a few ms each, never holding storage for all ``limit`` at
        once; the sweeper calls it again while it returns ``limit``. Records
        no event. A workflow's record goes with its last job (its edges with
        their jobs), once it ended."""

    # -- operators ---------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        """``waiting | queued | scheduled -> cancelled``; an ``active`` job is marked
        ``cancel_requested`` (again: no change), and stays active until its
        attempt ends (see ``fail``); InvalidTransition for a finished job."""

    async def retry_dead(
        self, queue: str, job_ids: Sequence[str] | None = None, by: str = RetriedBy.PYTHON
    ) -> int:
        """``dead -> queued`` with budgets reset and history kept; all of the
        queue's dead jobs when ``job_ids`` is None. Returns how many moved.
        ``attempts`` keeps counting (the next attempt is number attempts + 1)
        and ``budget_from`` becomes it, so that ``max_attempts`` and
        ``max_stalls`` count afresh; each job gets a ``retried`` event saying
        ``by`` whom (a ``RetriedBy``) and after how many attempts."""

    async def purge_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        """Delete dead jobs (all of the queue's when ``job_ids`` is None)."""

    async def delete_queue(self, queue: str) -> int:
        """Delete the queue: its jobs in every state, with their history, its
        policy and its events. Returns how many jobs went. InvalidTransition,
        changing nothing, while any of its jobs is active."""

    async def get(self, job_id: str) -> Job:
        """The job with its history. JobNotFound if absent."""

    async def match_ids(self, prefix: str, limit: int) -> builtins.list[str]:
        """The ids of jobs that begin with ``prefix``, sorted, at most ``limit``
        (up to ``MATCH_LIMIT``); when more match, which ``limit`` of them is
        unspecified; none for a prefix ``prefix_range`` rules out. A read,
        cheap whatever the number of jobs: SQL, a range scan of the ids'
        index (``prefix_range``), filtered by the prefix; Redis, which keeps
        ids in a hash, a scan of it by pieces (``HSCAN MATCH``, a few ms
        each) that stops once ``limit`` matched."""

    async def list(
        self,
        queue: str | None = None,
        state: State | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        """Jobs, newest first, filtered by queue and state, paginated by cursor."""

    async def counts(self, queue: str) -> dict[State, int]:
        """How many jobs of the queue are in each state (every state present)."""

    async def key_counts(self, queue: str, limit: int = 1000) -> builtins.list[KeyCount]:
        """The concurrency keys with queued or active jobs in ``queue`` (None: jobs
        without a key), most queued + active first, then by key; at most ``limit``."""

    async def workflow_counts(self) -> dict[WorkflowState, int]:
        """Workflows by state (every state present; ended ones until pruned),
        across queues, for the ``tenure_workflows_stored`` gauge: one count over their
        records (SQL), never over their steps; Redis: each home queue's count,
        kept by the scripts that set a record's state."""

    async def workflow_outcomes(self) -> dict[WorkflowState, int]:
        """Workflows ended, by outcome (completed, failed, cancelled; each
        present), since storage began, for the ``tenure_workflows_total``
        counter: a workflow counts when its record enters the state, in the
        transition that moves it; pruning takes nothing away, and a failed
        workflow resumed by a DLQ retry that ends again counts again. SQLite:
        a trigger's count; PostgreSQL: a trigger appends, a read folds the
        appended into the totals (no row every end would wait on); Redis:
        each home queue's count, kept by the scripts that set a record's state."""

    async def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        """How many of the queue's dead jobs died of each reason (reasons none
        died of are absent). SQL: one GROUP BY over the queue's dead jobs. Redis,
        which keeps no index by reason: a scan of the queue's dead jobs by
        pieces of ``DEAD_COUNT_PIECE``, one script (a few milliseconds) each, so
        the counts may miss or repeat a job that moves in or out meanwhile."""

    async def lag(self, queue: str) -> float:
        """How long the queue's oldest due job has been due, in seconds of the
        storage's clock (0 when none is): its queued jobs' (a job queued again
        after a failed attempt keeps its run_at: its age counts from there) and
        its scheduled jobs' whose run_at passed. Cheap: an index seek per
        distinct priority of its queued jobs (at most 100 looked at), whatever
        the backlog."""

    async def queues(self) -> builtins.list[str]:
        """Names of queues that have a policy or jobs."""

    async def get_policy(self, queue: str) -> QueuePolicy:
        """The queue's stored policy, or the defaults."""

    async def set_policy(self, queue: str, policy: QueuePolicy) -> None:
        """Store the queue's policy; every worker reads it."""

    async def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        """Change some fields of the queue's stored policy, atomically: a
        concurrent change of other fields is kept, and the merged policy is
        validated as a whole. Returns the policy stored."""

    # -- lifecycle events --------------------------------------------------

    async def read_events(
        self, queue: str | None, after: str | None, limit: int, timeout: float = 0.0
    ) -> builtins.list[Event]:
        """Up to ``limit`` events of ``queue`` (None: every queue) after the event
        whose id is ``after`` (None: from the oldest kept), in id order. When
        there are none yet, waits up to ``timeout`` seconds for some, without
        polling storage for them. Events are written by the transitions' own
        transactions: a reader sees an event once, and never one whose
        transition did not happen. A read sees what was recorded before it
        began (a caller's own) unless a page fills first."""

    async def events_now(self, queue: str | None, ago: float = 0.0) -> str:
        """An event id to read ``queue``'s events (None: every queue's) after
        from now on: every event recorded after this call comes after it, and
        none recorded before it (a caller's own) does, but for every queue on
        Redis those of the call's millisecond. It need not be an event's own
        id. Costs one cheap round trip and no read of the events themselves;
        on PostgreSQL, while transactions older than the call run, a look
        every 10 ms until they end, up to a second, past which a few events
        recorded just before the call may come after it too.

        With ``ago`` (seconds, storage's clock), from that long ago on instead:
        every event recorded since comes after it (a few before may too), for
        a reader that starts with the recent past (the dashboard, on open).
        SQL: one walk back from the newest event to the first older than that,
        proportional to the events since; Redis: no read at all."""

    # -- workers -----------------------------------------------------------

    async def register_worker(self, info: WorkerInfo) -> None:
        """Record a worker and start proving its liveness for as long as this
        backend stays open."""

    async def deregister_worker(self, worker_id: str) -> None:
        """Forget a worker that stops cleanly; its remaining leases become
        rescuable at once."""

    async def workers(self) -> builtins.list[WorkerInfo]:
        """Registered workers, each with ``alive`` judged as the sweeper judges
        it (SQLite: its ``flock`` is held; PostgreSQL: its session advisory
        lock is; Redis: its named connection is in ``CLIENT LIST``, or, where
        CLIENT is forbidden, it heartbeat within ``STALE_AFTER``). A worker
        that died stays listed, ``alive`` False, until a sweep buries it."""


class DerivedVerbs:
    """The protocol's verbs that are built on ``complete_and_claim``, defined
    once for every backend (a backend class derives from this). The worker
    itself only ever calls ``complete_and_claim``."""

    async def complete_and_claim(self, items: Sequence[tuple[str, int, bytes]], worker_id: str,
                                 queues: Sequence[str], limit: int, *,
                                 skip_tasks: Collection[str] = ()
                                 ) -> tuple[set[LeaseRef], builtins.list[Job]]:  # fmt: skip
        raise NotImplementedError

    async def claim(self, worker_id: str, queues: Sequence[str], limit: int, *,
                    skip_tasks: Collection[str] = ()) -> builtins.list[Job]:  # fmt: skip
        _, jobs = await self.complete_and_claim((), worker_id, queues, limit, skip_tasks=skip_tasks)
        return jobs

    async def complete_many(self, items: Sequence[tuple[str, int, bytes]]) -> set[LeaseRef]:
        return (await self.complete_and_claim(items, "", (), 0))[0]
