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
from tenure.context import Transaction
from tenure.core.events import Detector, Event, RetriedBy
from tenure.core.names import check_job_id, check_name, is_text, shown
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State, parse_state
from tenure.errors import InvalidInput, InvalidTransition
from tenure.job import Job, JobSpec

LeaseRef = tuple[str, int]  # (job_id, fence)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend is like, as the worker paces its cycles by it (see
    ``tenure.worker.pacing``); storage itself never acts on it."""

    # Storage is a server: a worker's cycle waits for a round trip, which the
    # worker hides by claiming ahead of its free slots. False: the cycle is the
    # worker's own work (SQLite), which claims ahead make fewer and fuller.
    remote: bool
    # A cycle costs storage much more than each job in it (PostgreSQL: one
    # statement of many parts): while a cycle is out, the worker lets the next
    # gather a full claim (its slots plus claims ahead), not just its slots;
    # while jobs claimed ahead keep its slots busy, it holds completions back
    # for a moment, as it does without round trips.
    costly_cycles: bool


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
    def of(
        cls, job: Job, outcome: Outcome, state: State, proven_at: float | None, at: float
    ) -> Rescued:
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
        silent = self.silent_for
        return {"worker": self.worker, "silent_for": None if silent is None else round(silent, 3)}


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


def check_retried_by(by: object) -> RetriedBy:
    """``retry_dead``'s ``by``, as a RetriedBy; InvalidInput for another value."""
    if isinstance(by, str) and by in RetriedBy.__members__.values():
        return RetriedBy(by)
    known = ", ".join(r.value for r in RetriedBy)
    raise InvalidInput(f"by must be one of {known}, got {shown(by)}")


def not_cancellable(job: Job) -> InvalidTransition:
    """The error of a cancel of a finished job (every backend's)."""
    return InvalidTransition(
        f"job {job.id} is {job.state}: only scheduled, queued or active jobs can be cancelled"
    )


def check_ago(ago: object) -> float:
    """``events_now``'s ``ago``: seconds within [0, ten years], as a float."""
    check_seconds("ago", ago)
    return float(ago)  # type: ignore[arg-type]  # checked: a real number


def cursor_seq(text: str) -> int:
    """The insertion number a cursor of the SQL backends (its digits) names."""
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= SEQ_MAX):
        raise bad_cursor(text)
    return int(text)


MATCH_LIMIT = 100  # the most ids one ``match_ids`` returns


def check_match(prefix: object, limit: object) -> tuple[str, int]:
    """Validate ``match_ids``'s prefix (a possible job id) and limit."""
    check_job_id(prefix)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MATCH_LIMIT:
        raise InvalidInput(
            f"limit must be an integer within [1, {MATCH_LIMIT}], got {shown(limit)}"
        )
    return prefix, limit  # type: ignore[return-value]  # checked: a str


def prefix_range(prefix: str) -> tuple[str, str] | None:
    """Bounds ``low <= id < high`` of an index range that holds every id
    beginning with ``prefix`` (the caller filters the range by the prefix
    itself); None when no id tenure makes can begin with it (it does not begin
    with an ASCII letter or digit, as every ``new_job_id`` does). Trailing
    punctuation is left out of the bounds: a database collation (en_US) may
    ignore it, and '0190abcd.' would then sort before '0190abcd-0123'; ASCII
    letters and digits sort alike in every collation."""
    stem = prefix
    while stem and not (stem[-1].isascii() and stem[-1].isalnum()):
        stem = stem[:-1]
    if not stem:
        return None
    return stem, stem[:-1] + chr(ord(stem[-1]) + 1)


PRUNE_LIMIT = 10_000  # the most finished jobs one prune deletes: a bounded transaction


def check_prune_limit(limit: object) -> int:
    """A prune's ``limit``: an integer within [1, PRUNE_LIMIT]."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= PRUNE_LIMIT:
        raise InvalidInput(
            f"limit must be an integer within [1, {PRUNE_LIMIT}], got {shown(limit)}"
        )
    return limit


def check_tick(schedule: object, at: object) -> float:
    """Validate a tick's schedule name and time; the time as a float."""
    check_name("schedule", schedule)
    if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at <= TICK_MAX:
        raise InvalidInput(f"a tick is a time in seconds since the epoch, got {shown(at)}")
    return float(at)


def check_schedules(schedules: object) -> list[tuple[str, str]]:
    """Validate ``(queue, schedule)`` pairs (``last_ticks``'s)."""
    if isinstance(schedules, str | bytes) or not isinstance(schedules, Collection):
        raise InvalidInput(f"schedules must be (queue, name) pairs, got {shown(schedules)}")
    pairs = []
    for pair in schedules:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidInput(f"a schedule is a (queue, name) pair, got {shown(pair)}")
        pairs.append((check_name("queue", pair[0]), check_name("schedule", pair[1])))
    return pairs


TICK_MAX = 253_402_300_799.0  # 9999-12-31T23:59:59Z: a tick must render as a date


def last_proof(outcome: Outcome, renewed: float | None, heartbeat: float | None) -> float | None:
    """When a recovered attempt was last proven alive (``Rescued.proven_at``),
    from its lease's last renewal and its worker's last heartbeat (None when
    storage no longer knew the worker): the later of the two for a gone worker
    (``crashed``), the renewal for an expired lease."""
    if outcome is not Outcome.CRASHED or heartbeat is None:
        return renewed
    return heartbeat if renewed is None else max(renewed, heartbeat)


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
        process swept less than ``min_interval`` seconds ago."""

    async def prune(self, limit: int) -> int:
        """Retention: delete up to ``limit`` finished jobs that finished longer
        ago than their queue's policy keeps them (``keep_completed`` for
        completed and cancelled jobs, ``keep_dead`` for dead ones; judged by
        storage's clock), oldest first, with their history and every index
        entry; return how many. Bounded: in short transactions (or script
        calls) of a few ms each, never holding storage for all ``limit`` at
        once; the sweeper calls it again while it returns ``limit``. Records
        no event."""

    # -- operators ---------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        """``queued | scheduled -> cancelled``; an ``active`` job is marked
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
        transition did not happen."""

    async def events_now(self, queue: str | None, ago: float = 0.0) -> str:
        """An event id to read ``queue``'s events (None: every queue's) after
        from now on: every event recorded after this call comes after it (a few
        recorded just before may too). It need not be an event's own id. Costs
        one cheap round trip and no read of the events themselves.

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
