"""Executors run handlers; the supervisor decides what their results mean.

An executor turns one attempt into an :class:`AttemptResult`. This module has
the thread executor: sync handlers on a thread pool, async handlers on an event
loop of their own (never the supervisor's, so a handler cannot delay a
heartbeat through the loop). Its trade-off: a thread cannot be killed, so an
attempt past its deadline, or whose lease was lost, is abandoned, and whatever
it returns later is thrown away; it keeps its thread until it ends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import traceback
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tenure.context import JobContext, Transaction, running
from tenure.errors import Fail, Retry
from tenure.job import Job
from tenure.portal import Portal
from tenure.threads import DaemonThreads

if TYPE_CHECKING:
    from tenure.app import Task

TRACEBACK_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class Returned:
    value: Any


@dataclass(frozen=True, slots=True)
class Raised:
    """The handler raised. ``kind``: ``error``, ``retry`` (tenure.Retry), ``fail``
    (tenure.Fail) or ``cancelled``."""

    kind: str
    traceback: str
    retry_in: float | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TimedOut:
    after: float


@dataclass(frozen=True, slots=True)
class Crashed:
    """The process running the handler died under it."""

    reason: str


@dataclass(frozen=True, slots=True)
class Settled:
    """The handler completed its job itself, in its own transaction
    (``job.transaction()``); ``error`` is what it raised afterwards, if anything."""

    error: str | None = None


@dataclass(frozen=True, slots=True)
class Stopped:
    """The supervisor stopped the attempt (lease lost, drain budget spent, or
    collateral of stopping another attempt in the same process)."""


AttemptResult = Returned | Raised | TimedOut | Crashed | Settled | Stopped

# How an executor asks the supervisor to act for a running handler:
# ``await link("progress", job, data)`` or ``await link("heartbeat", job, None)``.
Link = Callable[[str, Job, Any], Coroutine[Any, Any, None]]


def describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= TRACEBACK_LIMIT else text[:TRACEBACK_LIMIT] + "\n[truncated]"


def raised(exc: BaseException) -> Raised:
    """Classify what a handler raised."""
    text = describe(exc)
    if isinstance(exc, Retry):
        return Raised("retry", text, exc.in_, exc.reason)
    if isinstance(exc, Fail):
        return Raised("fail", text)
    if isinstance(exc, asyncio.CancelledError):
        return Raised("cancelled", text)
    return Raised("error", text)


def outcome_of(ctx: JobContext, value: Any, exc: BaseException | None) -> AttemptResult:
    """What a handler's end means: settled by itself, returned, or raised."""
    if ctx.settled:
        return Settled(None if exc is None else describe(exc))
    return Returned(value) if exc is None else raised(exc)


class Executor(Protocol):
    """Runs attempts; the supervisor asks it how many more it can take."""

    def capacity(self) -> int: ...

    async def start(self) -> None: ...

    async def run(self, job: Job, timeout: float | None) -> AttemptResult: ...

    def stop(self, job_id: str) -> None: ...

    async def close(self) -> None: ...


class ThreadExecutor:
    """Sync handlers on threads, async handlers on one executor event loop.

    Each attempt is one future on the supervisor's loop, resolved by whichever
    comes first: the handler's end (reported from its thread through the
    :class:`Mailbox`), a stop, or the deadline's timer.
    """

    def __init__(
        self,
        tasks: Mapping[str, Task[Any, Any]],
        link: Link,
        slots: int,
        transaction: Transaction | None = None,
    ) -> None:
        self.tasks = tasks
        self.link = link
        self.transaction = transaction
        self.slots = slots
        self._threads = DaemonThreads(slots, "tenure-handler")
        self._aio: Portal | None = None
        self._ends: dict[str, asyncio.Future[AttemptResult]] = {}
        self._ended: Mailbox  # once started

    def capacity(self) -> int:
        return self.slots - len(self._ends)

    async def start(self) -> None:
        self._ended = Mailbox(asyncio.get_running_loop())

    async def run(self, job: Job, timeout: float | None) -> AttemptResult:
        loop = asyncio.get_running_loop()
        end: asyncio.Future[AttemptResult] = loop.create_future()
        self._ends[job.id] = end
        timer = None if timeout is None else loop.call_later(timeout, _end, end, TimedOut(timeout))
        handler: Future[Any] | None = None
        try:
            ctx = self._context(job, loop)
            fn = self.tasks[job.task].fn
            if asyncio.iscoroutinefunction(fn):
                handler = self._submit_async(fn, ctx, end)
            else:
                self._threads.submit(functools.partial(
                    contextvars.copy_context().run, _run_sync, fn, ctx, end, self._ended
                ))  # fmt: skip
            return await end
        finally:
            self._ends.pop(job.id, None)
            if timer is not None:
                timer.cancel()
            if handler is not None and not handler.done():
                handler.cancel()  # an async handler is cancelled; a thread is abandoned

    def _context(self, job: Job, loop: asyncio.AbstractEventLoop) -> JobContext:
        def call(op: str, data: Any) -> None:
            asyncio.run_coroutine_threadsafe(self.link(op, job, data), loop).result()

        return JobContext(
            id=job.id,
            task=job.task,
            queue=job.queue,
            attempt=job.attempts,
            fence=job.fence,
            args=job.args,
            _progress=lambda data: call("progress", data),
            _heartbeat=lambda: call("heartbeat", None),
            _transaction=self.transaction,
        )

    def _submit_async(
        self,
        fn: Callable[..., Any],
        ctx: JobContext,
        end: asyncio.Future[AttemptResult],
    ) -> Future[Any]:
        if self._aio is None:
            self._aio = Portal("tenure-async-handlers")
        handler = asyncio.run_coroutine_threadsafe(_run_async(fn, ctx), self._aio.loop)

        def ended(f: Future[Any]) -> None:
            if f.cancelled():
                return  # stopped or timed out: the end is already known
            exc = f.exception()
            self._ended.put(end, outcome_of(ctx, None if exc is not None else f.result(), exc))

        handler.add_done_callback(ended)
        return handler

    def stop(self, job_id: str) -> None:
        end = self._ends.get(job_id)
        if end is not None:
            _end(end, Stopped())

    async def close(self) -> None:
        self._threads.shutdown()
        if self._aio is not None:
            self._aio.close()


def _end(end: asyncio.Future[AttemptResult], result: AttemptResult) -> None:
    """The first end of an attempt wins; a later one (a handler thread that
    returns after its deadline, say) is thrown away."""
    if not end.done():
        end.set_result(result)


class Mailbox:
    """Ends reported from handler threads, delivered to the loop in bunches:
    one wake-up of the loop carries every end reported until it runs."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._ends: collections.deque[tuple[asyncio.Future[AttemptResult], AttemptResult]] = (
            collections.deque()
        )
        self._loop = loop
        self._called = False

    def put(self, end: asyncio.Future[AttemptResult], result: AttemptResult) -> None:
        self._ends.append((end, result))
        if not self._called:
            self._called = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        self._called = False
        ends = self._ends
        while ends:
            _end(*ends.popleft())


def _run_sync(
    fn: Callable[..., Any],
    ctx: JobContext,
    end: asyncio.Future[AttemptResult],
    ended: Mailbox,
) -> None:
    """In a handler thread: run the handler, then report its end to the loop."""
    try:
        with running(ctx):
            result = outcome_of(ctx, fn(**ctx.args), None)
    except BaseException as exc:
        result = outcome_of(ctx, None, exc)
    ended.put(end, result)


async def _run_async(fn: Callable[..., Any], ctx: JobContext) -> Any:
    with running(ctx):
        return await fn(**ctx.args)
