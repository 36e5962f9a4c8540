"""The thread executor: sync handlers on a thread pool, async handlers on an
event loop of their own (never the supervisor's, so a handler cannot delay a
heartbeat through the loop).

Its trade-off: a thread cannot be killed, so an attempt past its deadline,
whose lease was lost, or whose job was cancelled and did not stop within the
grace, is abandoned, and whatever it returns later is thrown away; it keeps
its thread until it ends.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import enum
import functools
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from tenure.backends.base import LeaseRef
from tenure.context import JobContext, Transaction
from tenure.core.workflows import Flow
from tenure.hooks import Hooks
from tenure.job import Job
from tenure.portal import Portal
from tenure.threads import DaemonThreads
from tenure.worker.executors.base import AttemptResult, Link, OnEnd, Stopped, TimedOut
from tenure.worker.executors.handlers import raised, run_async, run_sync
from tenure.worker.executors.mailbox import Mailbox

if TYPE_CHECKING:
    from tenure.app import Task

WAITING_PER_SLOT = 3  # attempts the thread executor takes beyond its slots, per slot


class Slot(enum.Enum):
    """An attempt's hold on a slot."""

    PENDING = "pending"  # begun, waits for a slot
    RUNNING = "running"  # holds one
    FREED = "freed"  # done with it, or never got one


class ThreadAttempt:
    """One attempt on a :class:`ThreadExecutor`, until its first end."""

    __slots__ = ("context", "ctx", "ended", "fn", "handler", "is_async", "job", "on_end", "slot",
                 "started", "timeout", "timer")  # fmt: skip

    def __init__(self, job: Job, timeout: float | None, on_end: OnEnd) -> None:
        self.job = job
        self.timeout = timeout
        self.on_end = on_end
        self.timer: asyncio.TimerHandle | None = None
        self.handler: Future[Any] | None = None  # an async handler's, to cancel
        self.ended = False  # on the loop: its first end is known
        self.slot = Slot.PENDING  # under the executor's lock
        self.started = 0.0  # time.monotonic() (the loop's clock) when it got a slot
        self.ctx: JobContext
        self.fn: Callable[..., Any]  # the handler
        self.is_async = False
        self.context = contextvars.copy_context()  # a sync handler runs in it


class ThreadExecutor:
    """Sync handlers on threads, async handlers on one executor event loop.

    An attempt ends with whichever comes first: the handler's end (reported
    from its thread through the :class:`Mailbox`), a stop, or the deadline's
    timer. No task or future on the supervisor's loop stands for it: the end
    calls the supervisor back directly.

    It takes WAITING_PER_SLOT attempts per slot beyond its slots: those wait,
    and the thread whose attempt ends hands its slot to the next at once and
    runs it (a sync one) in the same breath. A worker draining short jobs then
    seldom puts a handler thread to sleep or wakes one, or waits for the loop,
    between two jobs: switching and waking threads, most of it in the kernel,
    was a large share of its CPU per job (docs/design.md).
    """

    def __init__(
        self,
        tasks: Mapping[str, Task[Any, Any]],
        link: Link,
        slots: int,
        transaction: Transaction | None = None,
        *,
        hooks: Hooks | None = None,
    ) -> None:
        self.tasks = tasks
        self.hooks = hooks or Hooks()
        self.link = link
        self.transaction = transaction
        self.slots = slots
        self._threads = DaemonThreads(slots, "tenure-handler")
        self._aio: Portal | None = None
        self._attempts: dict[
            LeaseRef, ThreadAttempt
        ] = {}  # begun and not ended: running or waiting
        self._lock = threading.Lock()  # guards _busy, _pending and each attempt's slot
        self._busy = 0  # slots held
        self._pending: collections.deque[ThreadAttempt] = collections.deque()  # waiting for a slot
        # Once started. The loop is kept: on Python 3.11, asyncio.get_running_loop()
        # makes a getpid() system call each time, and a draining worker asks often.
        self._loop: asyncio.AbstractEventLoop
        self._ended: Mailbox[ThreadAttempt, AttemptResult]

    def capacity(self) -> int:
        return self.slots - len(self._attempts)

    def room(self) -> int:
        return (1 + WAITING_PER_SLOT) * self.slots - len(self._attempts)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ended = Mailbox(self._loop, self._reported)

    def begin(self, job: Job, timeout: float | None, on_end: OnEnd) -> None:
        attempt = self._attempts[job.id, job.fence] = ThreadAttempt(job, timeout, on_end)
        try:
            task = self.tasks[job.task]
            attempt.ctx = self._context(job)
            attempt.fn, attempt.is_async = task.fn, task.is_async
            if task.is_async and self._aio is None:
                self._aio = Portal("tenure-async-handlers")
        except Exception as exc:  # it never starts: it ends now
            attempt.slot = Slot.FREED
            self._loop.call_soon(self._end, attempt, raised(exc))
            return
        with self._lock:
            starts = self._busy < self.slots
            if starts:
                self._busy += 1
                attempt.slot = Slot.RUNNING
            else:
                self._pending.append(attempt)
        if starts:
            attempt.started = time.monotonic()
            self._launch(attempt)

    def _launch(self, attempt: ThreadAttempt) -> None:
        """On the loop: an attempt given a slot starts, and its deadline runs."""
        self._arm(attempt)
        self._run(attempt)

    def _arm(self, attempt: ThreadAttempt) -> None:
        if attempt.timeout is not None and not attempt.ended:
            attempt.timer = self._loop.call_at(
                attempt.started + attempt.timeout, self._end, attempt, TimedOut(attempt.timeout)
            )

    def _run(self, attempt: ThreadAttempt) -> None:
        """From any thread: run an attempt that holds a slot."""
        if not attempt.is_async:
            self._threads.submit(functools.partial(self._work, attempt))
            return
        assert self._aio is not None
        coroutine = run_async(attempt.fn, attempt.ctx, self.hooks)
        handler = asyncio.run_coroutine_threadsafe(coroutine, self._aio.loop)
        attempt.handler = handler
        handler.add_done_callback(functools.partial(self._async_ended, attempt))
        if attempt.ended:  # stopped meanwhile, before the loop could see the handler
            handler.cancel()

    def _work(self, attempt: ThreadAttempt | None) -> None:
        """In a handler thread: run sync attempts, this one and those it hands its slot to."""
        while attempt is not None:
            result = attempt.context.run(run_sync, attempt.fn, attempt.ctx, self.hooks)
            attempt = self._after(attempt, result)

    def _async_ended(self, attempt: ThreadAttempt, f: Future[AttemptResult]) -> None:
        if f.cancelled():
            return  # stopped or timed out: the end is known, the slot freed
        if (after := self._after(attempt, f.result())) is not None:
            self._run(after)

    def _after(self, attempt: ThreadAttempt, result: AttemptResult) -> ThreadAttempt | None:
        """In the thread an attempt ended in: report its end, and hand its slot
        to the next attempt waiting, which starts now. Returns that attempt if
        this thread should run it (a sync one in a handler thread); an async
        one is started here."""
        with self._lock:
            after = self._release(attempt)
        self._ended.put(attempt, result)
        if after is None:
            return None
        self._ended.put(after, None)  # started: the loop arms its deadline
        if after.is_async or attempt.is_async:
            self._run(after)
            return None
        return after

    def _release(self, attempt: ThreadAttempt) -> ThreadAttempt | None:
        """Under the lock: the slot an attempt held goes to the next waiting, if any."""
        if attempt.slot is not Slot.RUNNING:
            return None
        attempt.slot = Slot.FREED
        if not self._pending:
            self._busy -= 1
            return None
        after = self._pending.popleft()
        after.slot = Slot.RUNNING
        after.started = time.monotonic()
        return after

    def _reported(self, attempt: ThreadAttempt, result: AttemptResult | None) -> None:
        if result is None:  # started by the thread that freed its slot
            self._arm(attempt)
        else:
            self._end(attempt, result)

    def _end(self, attempt: ThreadAttempt, result: AttemptResult) -> None:
        """The first end of an attempt wins; a later one (a handler thread that
        returns after its deadline, say) is thrown away. A thread cannot be
        stopped: it is abandoned, and its slot given to the next attempt; an
        async handler is cancelled."""
        if attempt.ended:
            return
        attempt.ended = True
        del self._attempts[attempt.job.id, attempt.job.fence]
        if attempt.timer is not None:
            attempt.timer.cancel()
        if attempt.handler is not None and not attempt.handler.done():
            attempt.handler.cancel()
        with self._lock:
            if attempt.slot is Slot.PENDING:  # stopped before it started: it never will
                self._pending.remove(attempt)
                attempt.slot = Slot.FREED
            after = self._release(attempt)
        if after is not None:
            self._launch(after)
        attempt.on_end(result, time.monotonic() - attempt.started if attempt.started else 0.0)

    def withdraw(self) -> list[Job]:
        with self._lock:
            waiting, self._pending = list(self._pending), collections.deque()
            for attempt in waiting:
                attempt.slot = Slot.FREED
        for attempt in waiting:
            attempt.ended = True
            del self._attempts[attempt.job.id, attempt.job.fence]
        return [attempt.job for attempt in waiting]

    def _context(self, job: Job) -> JobContext:
        def progress(data: Any) -> None:
            asyncio.run_coroutine_threadsafe(self.link.progress(job, data), self._loop).result()

        def heartbeat() -> None:
            asyncio.run_coroutine_threadsafe(self.link.heartbeat(job), self._loop).result()

        def upstream() -> list[Any]:
            return asyncio.run_coroutine_threadsafe(self.link.upstream(job), self._loop).result()

        def spawn(seq: int, flow: Flow) -> list[str]:
            asked = self.link.spawn(job, seq, flow)
            return asyncio.run_coroutine_threadsafe(asked, self._loop).result()

        return JobContext(
            id=job.id,
            task=job.task,
            queue=job.queue,
            attempt=job.attempts,
            fence=job.fence,
            args=job.args,
            key=job.key,
            traceparent=job.traceparent,
            _progress=progress,
            _heartbeat=heartbeat,
            _transaction=self.transaction,
            workflow=job.workflow,
            _upstream=upstream,
            _spawn=spawn,
        )

    def stop(self, lease: LeaseRef) -> None:
        """End the attempt with Stopped, on the loop's next turn (never inside
        the caller's own bookkeeping)."""
        attempt = self._attempts.get(lease)
        if attempt is not None:
            self._loop.call_soon(self._end, attempt, Stopped())

    def abort(self, lease: LeaseRef, grace: float) -> None:
        """See Executor.abort. A sync handler that does not stop within ``grace``
        cannot be killed: its attempt ends (Stopped), the handler is abandoned
        on its thread, and what it returns later is thrown away."""
        attempt = self._attempts.get(lease)
        if attempt is None or attempt.ended:
            return
        if attempt.slot is not Slot.RUNNING:  # not started (or never will): it goes now
            self._loop.call_soon(self._end, attempt, Stopped())
            return
        attempt.ctx._cancel()
        self._loop.call_later(grace, self._end, attempt, Stopped())

    async def close(self) -> None:
        self._threads.shutdown()
        if self._aio is not None:
            self._aio.close()
