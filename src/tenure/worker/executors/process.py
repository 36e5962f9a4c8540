"""The process pool: executor processes, watched by the supervisor.

Executors are forked by the zygote (``zygote_handle.py``), which imported the App
once; if the zygote dies, its executors die with it, and the next fork starts
another. Each executor runs one sync handler at a time, or up to
``async_slots`` async handlers on its event loop. While jobs are short, a busy
executor is sent its next sync attempts ahead (``placement.py``) and goes on to
them without waiting for the supervisor. The supervisor learns of an executor's
death at once, from end of file on its pipe, records its running attempts
``crashed`` (those sent ahead go to another executor, as if never sent) and
forks a replacement. At a deadline, a lost lease, a drain's budget spent, or a
cancelled job's handler not stopped within the queue's ``cancel_grace``, it
kills the executor (SIGKILL: a handler holding the GIL cannot refuse) and
replaces it; attempts killed alongside the one that had to stop are handed
back without penalty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tenure.backends.base import LeaseRef
from tenure.errors import TenureError
from tenure.job import Job
from tenure.worker.executors.base import Crashed, Link, OnEnd, Stopped
from tenure.worker.executors.child_handle import Child, Running, StopReason, fork
from tenure.worker.executors.placement import Placement
from tenure.worker.executors.wire import (
    Done,
    Exit,
    Fatal,
    Frame,
    Heartbeat,
    Progress,
    Ready,
    Spawn,
    Started,
    Upstream,
)
from tenure.worker.executors.zygote_handle import Zygote
from tenure.worker.executors.zygote_main import ForkedZygote

log = logging.getLogger("tenure.executor")
T = TypeVar("T")

CLOSE_WAIT = 5.0  # seconds close() waits for the tasks watching executors to end
GROW_STEP = 8  # executors forked at once after the first
# Seconds before forking again after an executor failed to start (doubling
# with each failure in a row, up to the maximum).
RESTART_PAUSE = 0.1
RESTART_PAUSE_MAX = 10.0


class ProcessPool:
    """``concurrency`` executor processes for the App at ``app_path``, forked
    by ``zygote`` if the caller forked one (the CLI does), else by a zygote the
    pool starts.

    An attempt begun is sent to an executor at once if one is free, else it
    waits, in order, and goes to the first that frees: no task per attempt;
    its end is told from the read callback of its executor's pipe.
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
        zygote: ForkedZygote | None = None,
    ) -> None:
        self.zygote = Zygote(app_path, zygote, on_death=self._zygote_died)
        self.is_async = is_async
        self.link = link
        self.concurrency = concurrency
        self.max_jobs = max_jobs_per_executor
        self.on_capacity = on_capacity  # called when an executor is ready
        self.placement = Placement(async_slots, max_jobs_per_executor)
        self._closing = False
        self._failed_starts = 0  # executors in a row that failed to start or fork
        self._tasks: set[asyncio.Task[Any]] = set()  # watchers and answers, kept referenced

    # -- capacity and placement (placement.py) -------------------------------

    @property
    def children(self) -> list[Child]:
        """The executors: starting, running, or dying until their death is handled."""
        return self.placement.children

    def capacity(self) -> int:
        """How many more jobs can start now, whatever their kind."""
        return self.placement.capacity()

    def room(self) -> int:
        """How many more jobs ``begin`` sends to an executor now: as many as
        can start, and one more per executor to run after its current one."""
        return self.placement.room(asyncio.get_running_loop().time())

    def withdraw(self) -> list[Job]:
        return []  # every attempt begun has, or is about to get, an executor

    def _place(self) -> None:
        self.placement.place(asyncio.get_running_loop().time())

    # -- life cycle ----------------------------------------------------------

    async def start(self) -> None:
        """Fork the executors; return once one is ready (the others call
        ``on_capacity`` as they are)."""
        await self.zygote.start()
        # The first alone, the others a few at a time after it: the first job
        # needs one executor, and each fork costs this loop a few tenths of a
        # millisecond that, all asked for at once, would come before that job.
        first = self._keep(self._add())
        await asyncio.wait({first})  # unlike an await, a cancel of start() leaves it be
        if first.result():
            self._keep(self._grow(self.concurrency - 1))
            return
        starting = {self._keep(self._add()) for _ in range(self.concurrency - 1)}
        while starting:
            done, starting = await asyncio.wait(starting, return_when=asyncio.FIRST_COMPLETED)
            if any(task.result() for task in done):
                return
        raise TenureError("no executor process started (the log says why)")

    async def _grow(self, count: int) -> None:
        while count > 0 and not self._closing:
            step = min(count, GROW_STEP)
            await asyncio.gather(*(self._add() for _ in range(step)))
            count -= step

    async def _add(self, again: bool = True) -> bool | None:
        """Fork an executor into the pool; whether it started (None: it could
        not be forked)."""
        zygote = self.zygote.pid
        try:
            child = await fork(self.zygote, self._on_frames)
        except TenureError:
            if self._closing:
                return False
            if again and zygote is not None and self.zygote.pid != zygote:
                return await self._add(again=False)  # it died under us: ask the next one, once
            log.exception("could not fork an executor")
            return None
        if self._closing:  # closed while it started: close() did not see it
            child.kill()
            await child.wait()
            return False
        self.children.append(child)
        self._keep(self._watch(child), f"executor-{child.pid}")
        try:
            await child.ready
        except TenureError as exc:
            if not self._closing:
                log.error("executor %d did not start: %s", child.pid, exc)
            return False
        self._place()
        self.on_capacity()
        return True

    def _keep(self, coroutine: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

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
            case Progress() | Heartbeat() | Upstream() | Spawn():
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
        ready = child.ready
        started = ready.done() and not ready.cancelled() and ready.exception() is None
        if not ready.done():
            ready.set_exception(TenureError(f"executor {child.pid} {how} while starting"))
        waiting = [r for r in child.waiting() if r.stop_reason is None]
        ran = [r for r in child.jobs.values() if r not in waiting]
        child.jobs.clear()
        child.line.clear()
        if ran and not child.killed:
            log.error("executor %d %s, running %d job(s)", child.pid, how, len(ran))
        for running in reversed(waiting):  # never started: first to go elsewhere
            running.started = 0.0
            self.placement.waiting.appendleft(running)
        now = asyncio.get_running_loop().time()
        for running in ran:
            if child.retiring:
                running.stop()
            running.end(Crashed(f"executor process {child.pid} {how}"), now)
        self._place()
        if child in self.children:
            self.children.remove(child)
            if not self._closing:
                self._failed_starts = 0 if started else self._failed_starts + 1
                await self._replace()

    async def _replace(self) -> None:
        """Fork an executor in place of one that died: at once, unless the
        last ones failed to start or to fork; then after a pause that doubles
        with each failure (an executor that cannot start is not forked in a
        loop that takes a core)."""
        while not self._closing:
            if self._failed_starts:
                pause = RESTART_PAUSE * 2 ** min(self._failed_starts - 1, 16)
                await asyncio.sleep(min(pause, RESTART_PAUSE_MAX))
            if await self._add() is not None:
                return  # started, or it dies and its death replaces it
            self._failed_starts += 1

    def _zygote_died(self) -> None:
        for child in self.children:  # they die with it: what they ran is collateral
            child.kill_all()

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
        await self.zygote.close()

    # -- attempts ------------------------------------------------------------

    def begin(self, job: Job, timeout: float | None, on_end: OnEnd) -> None:
        self.placement.waiting.append(Running(job, self.is_async(job.task), on_end, timeout))
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
        for running in self.placement.waiting:
            if running.lease == lease:  # not placed yet: it never will be
                self.placement.waiting.remove(running)
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
