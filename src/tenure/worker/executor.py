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
import contextvars
import functools
import queue
import threading
import traceback
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tenure.context import JobContext, Transaction, running
from tenure.errors import Fail, Retry
from tenure.job import Job
from tenure.portal import Portal

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
    """Sync handlers on threads, async handlers on one executor event loop."""

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
        self._threads = DaemonThreads(slots)
        self._aio: Portal | None = None
        self._stops: dict[str, asyncio.Event] = {}

    def capacity(self) -> int:
        return self.slots - len(self._stops)

    async def start(self) -> None:
        pass

    async def run(self, job: Job, timeout: float | None) -> AttemptResult:
        stopped = self._stops[job.id] = asyncio.Event()
        try:
            ctx = self._context(job)
            future = self._submit(self.tasks[job.task].fn, ctx)
            stop_wait = asyncio.ensure_future(stopped.wait())
            done, _ = await asyncio.wait({future, stop_wait}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            stop_wait.cancel()
            if future in done:
                exc = future.exception()
                return outcome_of(ctx, future.result() if exc is None else None, exc)
            future.cancel()  # an async handler is cancelled; a thread is abandoned
            return Stopped() if stopped.is_set() else TimedOut(timeout or 0.0)
        finally:
            self._stops.pop(job.id, None)

    def _context(self, job: Job) -> JobContext:
        loop = asyncio.get_running_loop()

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

    def _submit(self, fn: Callable[..., Any], ctx: JobContext) -> asyncio.Future[Any]:
        if asyncio.iscoroutinefunction(fn):
            if self._aio is None:
                self._aio = Portal("tenure-async-handlers")
            coro = _run_async(fn, ctx)
            return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._aio.loop))
        call = functools.partial(contextvars.copy_context().run, _run_sync, fn, ctx)
        return asyncio.wrap_future(self._threads.submit(call))

    def stop(self, job_id: str) -> None:
        event = self._stops.get(job_id)
        if event is not None:
            event.set()

    async def close(self) -> None:
        self._threads.shutdown()
        if self._aio is not None:
            self._aio.close()


class DaemonThreads:
    """A fixed pool of daemon threads. Unlike ThreadPoolExecutor's, they are not
    joined at exit, so an abandoned handler cannot hold up the worker's exit."""

    def __init__(self, size: int) -> None:
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None]
        self._work = queue.SimpleQueue()
        self._size = size
        for i in range(size):
            threading.Thread(target=self._serve, name=f"tenure-handler-{i}", daemon=True).start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._work.put((future, fn))
        return future

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            future, fn = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def shutdown(self) -> None:
        for _ in range(self._size):
            self._work.put(None)


def _run_sync(fn: Callable[..., Any], ctx: JobContext) -> Any:
    with running(ctx):
        return fn(**ctx.args)


async def _run_async(fn: Callable[..., Any], ctx: JobContext) -> Any:
    with running(ctx):
        return await fn(**ctx.args)
