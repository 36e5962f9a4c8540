"""The process pool: executor processes, watched by the supervisor.

Each executor runs one sync handler at a time, or up to ``async_slots`` async
handlers on its event loop. While jobs are short, a busy executor is sent its
next sync attempt ahead (``QUEUED``) and goes on to it without waiting for the
supervisor. The supervisor learns of an executor's death at once, from end of
file on its pipe, records its running attempts ``crashed`` (one sent ahead
goes to another executor, as if never sent) and starts a replacement. At a
deadline, a lost lease, a drain's budget spent, or a cancelled job's handler
not stopped within the queue's ``cancel_grace``, it kills the executor
(SIGKILL: a handler holding the GIL cannot refuse) and replaces it; attempts
killed alongside the one that had to stop are handed back without penalty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from tenure.backends.base import LeaseRef
from tenure.errors import TenureError
from tenure.job import Job
from tenure.worker.executors.base import Crashed, Link, OnEnd, Stopped
from tenure.worker.executors.children import Child, Running, StopReason, spawn
from tenure.worker.executors.wire import (
    Done,
    Exit,
    Fatal,
    Frame,
    Heartbeat,
    Progress,
    Ready,
    Started,
)

log = logging.getLogger("tenure.executor")

# Seconds: a sync attempt waits in an executor's pipe only behind one that
# started less than this ago (a long one would hold it up).
QUEUE_BEHIND = 0.05
QUEUED = 1  # sync attempts that may wait in an executor's pipe
CLOSE_WAIT = 5.0  # seconds close() waits for the tasks watching executors to end


class ProcessPool:
    """``concurrency`` executor processes for the App at ``app_path``.

    An attempt begun is sent to an executor at once if one is free, else it
    waits here, in order, and goes to the first that frees: no task per
    attempt; its end is told from the read callback of its executor's pipe.
    """

    def __init__(
        self,
        app_path: str,
        is_async: Callable[[str], bool],
        link: Link,
        *,
        concurrency: int,
        async_slots: int = 1,
        max_jobs_per_executor: int | None = None,
        on_capacity: Callable[[], None] = lambda: None,
    ) -> None:
        self.app_path = app_path
        self.is_async = is_async
        self.link = link
        self.concurrency = concurrency
        self.async_slots = async_slots
        self.max_jobs = max_jobs_per_executor
        self.on_capacity = on_capacity  # called when a replacement executor is ready
        self.children: list[Child] = []
        self.started = 0
        self._closing = False
        # Attempts, not jobs: a worker may hold two attempts of one job (the
        # second claimed after the first was recovered from under it).
        self._waiting: deque[Running] = deque()  # begun, waiting for an executor
        self._tasks: set[asyncio.Task[None]] = set()  # watchers and answers, kept referenced

    # -- capacity and placement ----------------------------------------------

    def capacity(self) -> int:
        """How many more jobs can start now, whatever their kind."""
        free = -len(self._waiting)
        for c in self.children:  # asked often: kept lean
            if c.ready.done() and not (c.retiring or c.killed or c.gone):
                if not c.jobs:
                    free += 1
                elif not c.line:
                    free += self.async_slots - len(c.jobs)
        return max(free, 0)

    def room(self) -> int:
        """How many more jobs ``begin`` sends to an executor now: as many as
        can start, and one more per executor to run after its current one."""
        now = asyncio.get_running_loop().time()
        return max(sum(self._spots(c, now) for c in self.children) - len(self._waiting), 0)

    def _spots(self, c: Child, now: float) -> int:
        if not self._usable(c):
            return 0
        if c.jobs and not c.line:
            return self.async_slots - len(c.jobs)
        if c.jobs and not self._queues(c, now):
            return 0
        left = QUEUED + 1 if self.max_jobs is None else self.max_jobs - c.done - len(c.jobs)
        return max(min(QUEUED + 1 - len(c.line), left), 0)

    def withdraw(self) -> list[Job]:
        return []  # every attempt begun has, or is about to get, an executor

    @staticmethod
    def _usable(c: Child) -> bool:
        return c.ready.done() and not (c.retiring or c.killed or c.gone)

    def _queues(self, c: Child, now: float) -> bool:
        """Whether a sync attempt may wait in ``c``'s pipe now: it runs one, of
        a pace short enough not to keep the next waiting long, and waits for
        no more than that one."""
        return (
            0 < len(c.line) == len(c.jobs) <= QUEUED
            and self._usable(c)
            and now - c.line[0].started < QUEUE_BEHIND
            and c.line[0].stop_reason is None
            and (self.max_jobs is None or c.done + len(c.jobs) < self.max_jobs)
        )

    def _slot(self, is_async: bool) -> Child | None:
        """The executor an attempt of this kind goes to now, if any."""
        usable = [c for c in self.children if self._usable(c)]
        if is_async:
            shared = [c for c in usable if c.jobs and not c.line
                      and len(c.jobs) < self.async_slots]  # fmt: skip
            if shared:
                return max(shared, key=lambda c: len(c.jobs))
        if (idle := next((c for c in usable if not c.jobs), None)) is not None or is_async:
            return idle
        now = asyncio.get_running_loop().time()
        queues = [c for c in usable if self._queues(c, now)]
        return min(queues, key=lambda c: (len(c.line), -c.line[0].started)) if queues else None

    def _place(self) -> None:
        """Send waiting attempts, in order, to the executors free for them."""
        while self._waiting:
            if (child := self._slot(self._waiting[0].is_async)) is None:
                return
            child.take(self._waiting.popleft(), asyncio.get_running_loop().time())

    # -- life cycle ----------------------------------------------------------

    async def start(self) -> None:
        for _ in range(self.concurrency):
            self.children.append(await self._spawn())
        await asyncio.gather(*(c.ready for c in self.children))

    async def _spawn(self) -> Child:
        child = await spawn(self.app_path, self._on_frames)
        self.started += 1
        self._keep(self._watch(child), f"executor-{child.pid}")
        return child

    def _keep(self, coroutine: Coroutine[Any, Any, None], name: str | None = None) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self, child: Child) -> None:
        """Wait for the child's pipe to close: then it is dead."""
        assert child.reader is not None
        try:
            await child.reader.closed
        except asyncio.CancelledError:
            child.kill()
            raise
        finally:
            child.close()
        await self._on_death(child)

    def _on_frames(self, child: Child, frames: list[Frame]) -> None:
        for message in frames:
            self._on_frame(child, message)
        self._place()

    def _on_frame(self, child: Child, message: Frame) -> None:
        match message:
            case Done():
                self._finish(child, message)
            case Ready():
                if not child.ready.done():
                    child.ready.set_result(None)
            case Fatal(error):
                if not child.ready.done():
                    child.ready.set_exception(TenureError(error or "executor failed"))
            case Started(id=job_id, fence=fence):
                running = child.jobs.get((job_id, fence))
                if running is not None and running.timeout is not None:
                    running.timer = asyncio.get_running_loop().call_later(
                        running.timeout, self._deadline, child, running
                    )
            case Progress() | Heartbeat():
                self._keep(child.answer(message, self.link))

    def _finish(self, child: Child, done: Done) -> None:
        now = asyncio.get_running_loop().time()
        if (running := child.ended((done.id, done.fence), now)) is None:
            return
        child.done += 1
        if child.line and child.line[0].stop_reason is not None:
            child.kill_all()  # stopped while it waited: it starts now
        self._maybe_retire(child)
        running.end(done.result(), now)

    async def _on_death(self, child: Child) -> None:
        child.gone = True  # nothing more goes to it
        code = await child.wait()
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        if not child.ready.done():
            child.ready.set_exception(TenureError(f"executor {child.pid} {how} while starting"))
        waiting = [r for r in child.waiting() if r.stop_reason is None]
        ran = [r for r in child.jobs.values() if r not in waiting]
        child.jobs.clear()
        child.line.clear()
        if ran and not child.killed:
            log.error("executor %d %s, running %d job(s)", child.pid, how, len(ran))
        for running in reversed(waiting):  # never started: first to go elsewhere
            running.started = 0.0
            self._waiting.appendleft(running)
        now = asyncio.get_running_loop().time()
        for running in ran:
            if child.retiring:
                running.stop()
            running.end(Crashed(f"executor process {child.pid} {how}"), now)
        self._place()
        if child in self.children:
            self.children.remove(child)
            if not self._closing:
                await self._replace()

    async def _replace(self) -> None:
        try:
            child = await self._spawn()
            if self._closing:  # closed while it started: close() did not see it
                child.kill()
                await child.wait()
                return
            self.children.append(child)
            await child.ready
            self._place()
            self.on_capacity()
        except TenureError:
            if not self._closing:
                log.exception("could not start a replacement executor")

    def _maybe_retire(self, child: Child) -> None:
        if self.max_jobs is not None and child.done >= self.max_jobs and not child.jobs:
            child.retiring = True
            child.send(Exit())

    async def close(self) -> None:
        self._closing = True
        for child in self.children:
            child.kill()
        for child in list(self.children):
            with contextlib.suppress(Exception):
                await child.wait()
        if self._tasks:  # watchers end with their process; one replacing an executor kills it
            await asyncio.wait(self._tasks, timeout=CLOSE_WAIT)

    # -- attempts ------------------------------------------------------------

    def begin(self, job: Job, timeout: float | None, on_end: OnEnd) -> None:
        self._waiting.append(Running(job, self.is_async(job.task), on_end, timeout))
        self._place()

    def _find(self, lease: LeaseRef) -> tuple[Child, Running] | None:
        for child in self.children:
            if (running := child.jobs.get(lease)) is not None:
                return child, running
        return None

    def stop(self, lease: LeaseRef) -> None:
        if (found := self._find(lease)) is not None:
            found[0].interrupt(found[1])
            return
        for running in self._waiting:
            if running.lease == lease:  # not placed yet: it never will be
                self._waiting.remove(running)
                running.stop()
                loop = asyncio.get_running_loop()
                loop.call_soon(running.end, Stopped(), loop.time())  # as if it had been placed
                return

    def abort(self, lease: LeaseRef, grace: float) -> None:
        """See Executor.abort: the executor tells the handler; after ``grace``
        seconds, one still running is stopped (its executor killed)."""
        if (found := self._find(lease)) is not None:
            found[0].abort(found[1], grace)
        else:
            self.stop(lease)  # not placed yet: it never will be

    def _deadline(self, child: Child, running: Running) -> None:
        running.stop_reason = StopReason.TIMEOUT
        log.warning("job %s passed its deadline of %s s", running.job.id, running.timeout)
        child.interrupt(running)
