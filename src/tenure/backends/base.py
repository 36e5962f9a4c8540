"""The Backend protocol: the seam between tenure and storage.

Verbs are named after state transitions (see ``tenure.core.states``). Every verb
is atomic. Every write made by a lease holder presents ``(job_id, fence)``; a
stale fence raises :class:`~tenure.errors.LeaseLost` and changes nothing.
Policy decisions (retry, backoff, dead-lettering) are made in ``tenure.core``
and handed to the backend as a :class:`~tenure.core.retry.Decision`.

Times are judged by the storage's own clock, never by a caller's.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tenure.config import QueuePolicy, check_seconds
from tenure.core.events import Event
from tenure.core.names import check_name, is_text, shown
from tenure.core.retry import Decision
from tenure.core.states import Outcome, State, parse_state
from tenure.errors import InvalidInput, InvalidTransition
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


@dataclass(frozen=True, slots=True)
class Rescued:
    """One attempt the sweeper recovered."""

    job_id: str
    fence: int
    outcome: Outcome  # stalled (lease expired) or crashed (its worker is gone)
    state: State  # where the job went: queued, scheduled or dead


@dataclass(frozen=True, slots=True)
class RescueReport:
    """What one sweep did. ``swept`` is False when another sweep ran within the
    interval; ``retry_in`` then says in how many seconds a sweep is allowed."""

    swept: bool
    rescued: tuple[Rescued, ...] = ()
    promoted: int = 0  # scheduled jobs that became due and were moved to queued
    dead_workers: tuple[str, ...] = ()
    retry_in: float = 0.0


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing; pass ``next_cursor`` back as ``after`` for the next."""

    jobs: list[Job]
    next_cursor: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


LIST_LIMIT = 10_000
CURSOR_MAX_LENGTH = 200
SEQ_MAX = 2**63 - 1  # insertion numbers are 64-bit on every backend


def check_listing(queue: str | None, state: object, limit: int) -> State | None:
    """Validate a listing's filters (shared by every backend's ``list``)."""
    if queue is not None:
        check_name("queue", queue)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= LIST_LIMIT:
        raise InvalidInput(f"limit must be an integer within [1, {LIST_LIMIT}], got {shown(limit)}")
    return None if state is None else parse_state(state)


def bad_cursor(after: object) -> InvalidInput:
    return InvalidInput(f"bad cursor {shown(after)}: pass back a page's next_cursor")


def check_cursor(after: object) -> str | None:
    """A listing's ``after`` as a string each backend may parse (or None)."""
    if after is None:
        return None
    if not isinstance(after, str) or len(after) > CURSOR_MAX_LENGTH or not is_text(after):
        raise bad_cursor(after)
    return after


def check_delay(delay: object) -> float:
    """A delay in seconds, as a float (``release``'s; a spec's are checked with it)."""
    check_seconds("delay", delay)
    return float(delay)  # type: ignore[arg-type]  # checked: a real number


def cursor_seq(text: str) -> int:
    """The insertion number a cursor of the SQL backends (its digits) names."""
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= SEQ_MAX):
        raise bad_cursor(text)
    return int(text)


def queue_busy(queue: str, active: int) -> InvalidTransition:
    """Why a queue with active jobs cannot be deleted."""
    return InvalidTransition(
        f"queue {queue!r} has {active} active job(s): pause it and let them finish "
        "(or stop its workers) before deleting it"
    )


def claim_limit(queues: Sequence[str], limit: int) -> int:
    """Validate a claim's queues; how many jobs to claim (0 without a queue)."""
    for q in queues:
        check_name("queue", q)
    return limit if queues and limit > 0 else 0


@runtime_checkable
class Backend(Protocol):
    """Storage for jobs, leases, queues' policies and workers."""

    url: str
    max_payload: int  # the largest JSON arguments, result or progress, in bytes
    # Storage is a server: a worker's cycle waits for a round trip, which the
    # worker hides by claiming ahead of its free slots. False: the cycle is the
    # worker's own work (SQLite), which claims ahead make fewer and fuller.
    remote: bool
    # A cycle costs storage much more than each job in it (PostgreSQL: one
    # statement of many parts): while a cycle is out, the worker lets the next
    # gather a full claim (its slots plus claims ahead), not just its slots;
    # while jobs claimed ahead keep its slots busy, it holds completions back
    # (BATCH_HORIZON at most), as it does without round trips.
    costly_cycles: bool

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

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        """Return when a job may have become claimable in ``queues``, or after
        ``timeout`` seconds. Backends that can wake idle workers (LISTEN/NOTIFY,
        a blocking pop) return early; the others just wait."""

    # -- lease holders -----------------------------------------------------

    async def claim(self, worker_id: str, queues: Sequence[str], limit: int) -> list[Job]:
        """Claim up to ``limit`` due jobs from ``queues`` in one transaction.

        Order: due jobs only; higher priority first; then older ``run_at``.
        Each claimed job becomes ``active`` with ``fence + 1``, ``attempts + 1``,
        a lease of its queue's ``lease_ttl`` (none for at-most-once queues) and
        a new attempt in its history.
        """

    async def heartbeat(self, worker_id: str, leases: Collection[LeaseRef]) -> set[LeaseRef]:
        """Renew the leases ``worker_id`` presents, in one round trip; return those
        among them that are no longer held. Only presented leases are renewed: a
        lease the worker does not know of (a claim whose reply was lost) expires
        and is recovered. Raises LivenessLost when storage no longer sees the
        worker alive."""

    async def progress(self, job_id: str, fence: int, data: Any) -> None:
        """Record a handler's progress report (JSON) for its current attempt."""

    async def complete(self, job_id: str, fence: int, result: Any = None) -> None:
        """``active -> completed`` with a JSON result."""

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
    ) -> tuple[set[LeaseRef], builtins.list[Job]]:
        """``complete_many(items)``, then ``claim(worker_id, queues, limit)``, in one
        round trip: the worker's cycle, one storage conversation per batch of
        finished jobs. Returns the leases no longer held and the jobs claimed.
        Either part may be empty (``limit`` 0 claims nothing)."""

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        """Record an unsuccessful attempt and apply ``decision``:
        ``active -> queued | scheduled | dead``."""

    async def release(self, job_id: str, fence: int, delay: float = 0.0) -> None:
        """Hand the job back (drain): ``active -> queued``, the attempt does not count.
        With ``delay`` seconds (a worker that does not know the job's task),
        ``active -> scheduled``, due then: offered to other workers, not at once
        to this one again."""

    # -- the sweeper -------------------------------------------------------

    async def rescue(self, min_interval: float = 0.0) -> RescueReport:
        """Recover attempts whose lease expired (``stalled``) or whose worker is
        gone (``crashed``), deciding each job's fate with ``tenure.core.retry``,
        and promote due scheduled jobs. Skipped (``swept=False``) when any
        process swept less than ``min_interval`` seconds ago."""

    # -- operators ---------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        """``queued | scheduled -> cancelled``; InvalidTransition otherwise."""

    async def retry_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        """``dead -> queued`` with budgets reset and history kept; all of the
        queue's dead jobs when ``job_ids`` is None. Returns how many moved."""

    async def purge_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        """Delete dead jobs (all of the queue's when ``job_ids`` is None)."""

    async def delete_queue(self, queue: str) -> int:
        """Delete the queue: its jobs in every state, with their history, its
        policy and its events. Returns how many jobs went. InvalidTransition,
        changing nothing, while any of its jobs is active."""

    async def get(self, job_id: str) -> Job:
        """The job with its history. JobNotFound if absent."""

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
        transition did not happen."""

    # -- workers -----------------------------------------------------------

    async def register_worker(self, info: WorkerInfo) -> None:
        """Record a worker and start proving its liveness for as long as this
        backend stays open."""

    async def deregister_worker(self, worker_id: str) -> None:
        """Forget a worker that stops cleanly; its remaining leases become
        rescuable at once."""

    async def workers(self) -> builtins.list[WorkerInfo]:
        """Registered workers."""
