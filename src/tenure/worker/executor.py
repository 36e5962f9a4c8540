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


# What an executor calls, on the supervisor's loop, when an attempt has ended.
OnEnd = Callable[[AttemptResult], None]


class Executor(Protocol):
    """Runs attempts; the supervisor asks it how many more it can take."""

    def capacity(self) -> int: ...

    async def start(self) -> None: ...

    def begin(self, job: Job, timeout: float | None, on_end: OnEnd) -> None:
        """Start an attempt now (it counts against capacity at once); call
        ``on_end`` with its result, exactly once, from the loop."""

    def stop(self, job_id: str) -> None: ...

    async def close(self) -> None: ...


class Attempt:
    """One attempt on a :class:`ThreadExecutor`, until its first end."""

    __slots__ = ("ended", "handler", "job_id", "on_end", "timer")

    def __init__(self, job_id: str, on_end: OnEnd) -> None:
        self.job_id = job_id
        self.on_end = on_end
        self.timer: asyncio.TimerHandle | None = None
        self.handler: Future[Any] | None = None  # an async handler's, to cancel
        self.ended = False


class ThreadExecutor:
    """Sync handlers on threads, async handlers on one executor event loop.

    An attempt ends with whichever comes first: the handler's end (reported
    from its thread through the :class:`Mailbox`), a stop, or the deadline's
    timer. No task or future on the supervisor's loop stands for it: the end
    calls the supervisor back directly.
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
        self._attempts: dict[str, Attempt] = {}
        self._ended: Mailbox  # once started

    def capacity(self) -> int:
        return self.slots - len(self._attempts)

    async def start(self) -> None:
        self._ended = Mailbox(asyncio.get_running_loop(), self._end)

    def begin(self, job: Job, timeout: float | None, on_end: OnEnd) -> None:
        loop = asyncio.get_running_loop()
        attempt = self._attempts[job.id] = Attempt(job.id, on_end)
        if timeout is not None:
            attempt.timer = loop.call_later(timeout, self._end, attempt, TimedOut(timeout))
        try:
            ctx = self._context(job, loop)
            task = self.tasks[job.task]
            if task.is_async:
                attempt.handler = self._submit_async(task.fn, ctx, attempt)
            else:
                self._threads.submit(functools.partial(
                    contextvars.copy_context().run, _run_sync, task.fn, ctx, attempt, self._ended
                ))  # fmt: skip
        except Exception as exc:  # it never started: it ends now, and frees its slot
            loop.call_soon(self._end, attempt, raised(exc))

    def _end(self, attempt: Attempt, result: AttemptResult) -> None:
        """The first end of an attempt wins; a later one (a handler thread that
        returns after its deadline, say) is thrown away. A thread cannot be
        stopped: it is abandoned; an async handler is cancelled."""
        if attempt.ended:
            return
        attempt.ended = True
        del self._attempts[attempt.job_id]
        if attempt.timer is not None:
            attempt.timer.cancel()
        if attempt.handler is not None and not attempt.handler.done():
            attempt.handler.cancel()
        attempt.on_end(result)

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
        self, fn: Callable[..., Any], ctx: JobContext, attempt: Attempt
    ) -> Future[Any]:
        if self._aio is None:
            self._aio = Portal("tenure-async-handlers")
        handler = asyncio.run_coroutine_threadsafe(_run_async(fn, ctx), self._aio.loop)

        def ended(f: Future[Any]) -> None:
            if f.cancelled():
                return  # stopped or timed out: the end is already known
            exc = f.exception()
            self._ended.put(attempt, outcome_of(ctx, None if exc is not None else f.result(), exc))

        handler.add_done_callback(ended)
        return handler

    def stop(self, job_id: str) -> None:
        """End the attempt with Stopped, on the loop's next turn (never inside
        the caller's own bookkeeping)."""
        attempt = self._attempts.get(job_id)
        if attempt is not None:
            asyncio.get_running_loop().call_soon(self._end, attempt, Stopped())

    async def close(self) -> None:
        self._threads.shutdown()
        if self._aio is not None:
            self._aio.close()


class Mailbox:
    """Ends reported from handler threads, delivered on the loop in bunches:
    one wake-up of the loop carries every end reported until it runs."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Attempt, AttemptResult], None],
    ) -> None:
        self._ends: collections.deque[tuple[Attempt, AttemptResult]] = collections.deque()
        self._loop = loop
        self._deliver_one = deliver
        self._called = False

    def put(self, attempt: Attempt, result: AttemptResult) -> None:
        """From any thread."""
        self._ends.append((attempt, result))
        if not self._called:
            self._called = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        self._called = False  # before reading: an end put from now on calls again
        ends = self._ends
        while ends:
            self._deliver_one(*ends.popleft())


def _run_sync(fn: Callable[..., Any], ctx: JobContext, attempt: Attempt, ended: Mailbox) -> None:
    """In a handler thread: run the handler, then report its end to the loop."""
    try:
        with running(ctx):
            result = outcome_of(ctx, fn(**ctx.args), None)
    except BaseException as exc:
        result = outcome_of(ctx, None, exc)
    ended.put(attempt, result)


async def _run_async(fn: Callable[..., Any], ctx: JobContext) -> Any:
    with running(ctx):
        return await fn(**ctx.args)
