"""The process pool: executor processes, watched by the supervisor.

Each executor runs one sync handler at a time, or up to ``async_slots`` async
handlers on its event loop. The supervisor learns of an executor's death at
once, from end of file on its pipe, records its attempts ``crashed`` and starts
a replacement. At a deadline, or when a lease is lost, or when a drain's budget
is spent, or when a cancelled job's handler has not stopped within the queue's
``cancel_grace``, it kills the executor (SIGKILL: a handler holding the GIL
cannot refuse) and replaces it; attempts killed alongside the one that had to
stop are handed back without penalty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from tenure.backends.base import LeaseRef
from tenure.errors import LeaseLost, TenureError
from tenure.job import Job
from tenure.worker.executors.base import Crashed, Link, OnEnd, Stopped
from tenure.worker.executors.children import Child, Running, StopReason, spawn
from tenure.worker.executors.wire import (
    Abort,
    Cancel,
    Done,
    Exit,
    Fatal,
    Frame,
    Heartbeat,
    Progress,
    Ready,
    Refusal,
    Reply,
    Run,
    Started,
)

log = logging.getLogger("tenure.executor")

ASYNC_CANCEL_GRACE = 1.0
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
            if c.ready.done() and not c.retiring and not c.killed:
                if not c.jobs:
                    free += 1
                elif not c.sync:
                    free += self.async_slots - len(c.jobs)
        return max(free, 0)

    def room(self) -> int:
        """As many as can start now: jobs wait for an executor in the supervisor."""
        return self.capacity()

    def withdraw(self) -> list[Job]:
        return []  # every attempt begun has, or is about to get, an executor

    @staticmethod
    def _usable(c: Child) -> bool:
        return c.ready.done() and not c.retiring and not c.killed

    def _slot(self, is_async: bool) -> Child | None:
        """The executor an attempt of this kind goes to now, if any."""
        usable = [c for c in self.children if self._usable(c)]
        if is_async:
            shared = [c for c in usable if c.jobs and not c.sync
                      and len(c.jobs) < self.async_slots]  # fmt: skip
            if shared:
                return max(shared, key=lambda c: len(c.jobs))
        return next((c for c in usable if not c.jobs), None)

    def _place(self) -> None:
        """Send waiting attempts, in order, to the executors free for them."""
        while self._waiting:
            running = self._waiting[0]
            if (child := self._slot(running.is_async)) is None:
                return
            self._waiting.popleft()
            job = running.job
            running.started = asyncio.get_running_loop().time()
            child.jobs[running.lease] = running
            child.sync += not running.is_async
            child.send(Run(job.id, job.fence, job.task, job.queue, job.attempts, job.args,
                           job.key, job.traceparent, running.is_async,
                           running.timeout is not None))  # fmt: skip

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
                self._keep(self._answer(child, message))

    async def _answer(self, child: Child, request: Progress | Heartbeat) -> None:
        running = child.jobs.get((request.id, request.fence))
        reply = Reply(request.req)
        try:
            if running is None or running.stop_reason is not None:
                raise LeaseLost(f"job {request.id} is no longer run by this executor")
            if isinstance(request, Progress):
                await self.link.progress(running.job, request.data)
            else:
                await self.link.heartbeat(running.job)
        except LeaseLost as exc:
            reply.error, reply.message = Refusal.LEASE_LOST, str(exc)
        except Exception as exc:
            reply.error, reply.message = Refusal.FAILED, str(exc)
        child.send(reply)

    def _finish(self, child: Child, done: Done) -> None:
        running = child.jobs.pop((done.id, done.fence), None)
        if running is None:
            return
        child.sync -= not running.is_async
        child.done += 1
        self._maybe_retire(child)
        running.end(done.result(), asyncio.get_running_loop().time())

    async def _on_death(self, child: Child) -> None:
        code = await child.wait()
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        if not child.ready.done():
            child.ready.set_exception(TenureError(f"executor {child.pid} {how} while starting"))
        ran, child.jobs, child.sync = child.jobs, {}, 0
        if ran and not child.killed:
            log.error("executor %d %s, running %d job(s)", child.pid, how, len(ran))
        now = asyncio.get_running_loop().time()
        for running in ran.values():
            if child.retiring:
                running.stop()
            running.end(Crashed(f"executor process {child.pid} {how}"), now)
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
            child, running = found
            running.stop()
            self._interrupt(child, running)
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
            child, running = found
            child.send(Abort(running.job.id, running.job.fence))
            asyncio.get_running_loop().call_later(grace, self._abort_overdue, child, running)
            return
        self.stop(lease)  # not placed yet: it never will be

    def _abort_overdue(self, child: Child, running: Running) -> None:
        if child.jobs.get(running.lease) is running:
            log.warning("job %s was cancelled and did not stop: killing its executor %d",
                        running.job.id, child.pid)  # fmt: skip
            running.stop()
            child.kill_all()

    def _deadline(self, child: Child, running: Running) -> None:
        running.stop_reason = StopReason.TIMEOUT
        log.warning("job %s passed its deadline of %s s", running.job.id, running.timeout)
        self._interrupt(child, running)

    def _interrupt(self, child: Child, running: Running) -> None:
        """Stop one attempt: cancel an async one (kill if it will not yield); kill a sync one."""
        if running.is_async and len(child.jobs) > 1:
            child.send(Cancel(running.job.id, running.job.fence))
            asyncio.get_running_loop().call_later(ASYNC_CANCEL_GRACE, self._kill_if_running,
                                                  child, running)  # fmt: skip
            return
        child.kill_all()

    def _kill_if_running(self, child: Child, running: Running) -> None:
        if child.jobs.get(running.lease) is running:
            child.kill_all()
