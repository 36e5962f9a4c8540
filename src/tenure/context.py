"""``tenure.current_job()``: what a running handler knows about its attempt."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tenure.core.payload import check as check_json
from tenure.core.schedules import tick_of
from tenure.core.workflows import Flow
from tenure.errors import InvalidInput, TenureError

# How a backend opens the handler's own transaction that also completes the job:
# ``(job_id, fence, result) -> context manager yielding a DB connection``.
Transaction = Callable[[str, int, Any], AbstractContextManager[Any]]


@dataclass
class JobContext:
    """The running attempt of a job, as its handler sees it.

    ``fence`` identifies this attempt: a handler can pass it downstream to fence
    its own writes, so that a stale attempt's late write is refused there too.
    """

    id: str
    task: str
    queue: str
    attempt: int
    fence: int
    args: dict[str, Any]
    _progress: Callable[[Any], None] = field(repr=False)
    _heartbeat: Callable[[], None] = field(repr=False)
    _transaction: Transaction | None = field(default=None, repr=False)
    key: str | None = None  # the job's idempotency key, if it has one
    settled: bool = False  # the handler completed its job in its own transaction
    traceparent: str | None = field(default=None, repr=False)  # its enqueue's trace context
    _cancelled: bool = field(default=False, repr=False)
    _task: asyncio.Task[Any] | None = field(default=None, repr=False)  # an async handler's
    workflow: str | None = None  # the workflow's id, for a workflow's step
    _upstream: Callable[[], list[Any]] | None = field(default=None, repr=False)
    _spawn: Callable[[int, Any], list[str]] | None = field(default=None, repr=False)
    _values: list[Any] | None = field(default=None, repr=False)
    _spawns: int = field(default=0, repr=False)

    @property
    def upstream(self) -> list[Any]:
        """The results of the steps this workflow's step waited for, in their
        order (after a group: the group's; after one step: a list of one; a
        spawner's followed by what it spawned); a ``tenure.Failed`` for a
        ``may_fail`` step that did not complete. Read once, on first use;
        empty for a plain job and a workflow's first steps."""
        if self._values is None:
            self._values = (
                [] if self.workflow is None or self._upstream is None else self._upstream()
            )
        return self._values

    def spawn(self, flow: Flow) -> list[str]:
        """Add ``flow`` (``task.step(...)``, ``tenure.chain``, ``tenure.group``)
        to this step's workflow: it runs at once, and every step that waits
        for this one also waits for it (its results follow this one's in their
        ``upstream``). Fenced like a completion (LeaseLost if this attempt was
        recovered). Counted per attempt: the n-th spawn of an attempt that runs
        again returns the jobs its n-th spawn made before, and makes none.
        Returns the ids of the jobs that start at once (the flow's first
        steps). InvalidInput for a plain job."""
        if self.workflow is None or self._spawn is None:
            raise InvalidInput(
                f"job {self.id} ({self.task}) is no workflow's step: only a step can spawn; "
                "store a workflow with app.workflow(...)"
            )
        self._spawns += 1
        return self._spawn(self._spawns, flow)

    @property
    def cancelled(self) -> bool:
        """True once the job was cancelled while this attempt runs: stop soon.
        The worker learns it within a heartbeat; an async handler also gets
        CancelledError. After the queue's ``cancel_grace`` the executor running
        the attempt is killed (a thread's is abandoned). From then on, whatever
        the handler returns or raises, the job ends ``cancelled``."""
        return self._cancelled

    def _running_in(self, task: asyncio.Task[Any] | None) -> None:
        """The async handler runs in ``task``: a cancel cancels it (one told before, now)."""
        self._task = task
        if self._cancelled and task is not None:
            task.cancel()

    def _cancel(self) -> None:
        """From any thread: tell the handler its job was cancelled."""
        self._cancelled = True
        task = self._task
        if task is not None and not task.done():
            task.get_loop().call_soon_threadsafe(task.cancel)

    @property
    def tick(self) -> float | None:
        """The tick a periodic job was enqueued for (seconds since the epoch,
        from its key), the same at every attempt; None for other jobs."""
        return tick_of(self.key)

    def progress(self, data: Any) -> None:
        """Record a JSON progress report, fenced (raises LeaseLost if the job was
        recovered, InvalidInput if ``data`` is not JSON)."""
        check_json(data, what="progress")  # before the pipe, which would change it
        self._progress(data)

    def heartbeat(self) -> None:
        """Prove this attempt is alive now (the worker also does it on its own)."""
        self._heartbeat()

    @contextmanager
    def transaction(self, result: Any = None) -> Iterator[Any]:
        """A connection to the job's own database, in a transaction that also
        completes the job with ``result``, fence-checked: the handler's writes
        and the completion commit together, or not at all.

        If this attempt was recovered meanwhile (a stale fence), everything
        rolls back and LeaseLost is raised: the effect is never applied twice.
        PostgreSQL yields a psycopg connection, SQLite a sqlite3 connection
        (keep it short: SQLite has one writer at a time). Not on Redis.
        """
        if self._transaction is None:
            raise TenureError("job.transaction() needs a SQL backend (PostgreSQL or SQLite)")
        if self.settled:
            raise TenureError(f"job {self.id} was already completed by an earlier transaction()")
        with self._transaction(self.id, self.fence, result) as conn:
            yield conn
        self.settled = True


_current: ContextVar[JobContext | None] = ContextVar("tenure_current_job", default=None)


def current_job() -> JobContext:
    """The attempt being run by the calling handler; TenureError outside one."""
    ctx = _current.get()
    if ctx is None:
        raise TenureError("tenure.current_job() is only available inside a running handler")
    return ctx


@contextmanager
def running(ctx: JobContext) -> Iterator[JobContext]:
    """Make ``ctx`` the current job for the code run inside the block."""
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
