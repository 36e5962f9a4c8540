"""The process pool: executor processes, watched by the supervisor.

Executors are forked by the zygote (``zygotes.py``), which imported the App
once. Each runs one sync handler at a time, or up to ``async_slots`` async
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
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tenure.backends.base import LeaseRef
from tenure.errors import LeaseLost, TenureError
from tenure.job import Job
from tenure.worker.executors.base import AttemptResult, Crashed, Link, OnEnd, Stopped
from tenure.worker.executors.children import Child, Running, StopReason, fork
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
from tenure.worker.executors.zygote import ForkedZygote
from tenure.worker.executors.zygotes import Zygote

log = logging.getLogger("tenure.executor")
T = TypeVar("T")

ASYNC_CANCEL_GRACE = 1.0
CLOSE_WAIT = 5.0  # seconds close() waits for the tasks watching executors to end


class ProcessPool:
    """``concurrency`` executor processes for the App at ``app_path``, forked
    by ``zygote`` if the caller forked one (the CLI does), else by a zygote the
    pool starts."""

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
        self.async_slots = async_slots
        self.max_jobs = max_jobs_per_executor
        self.on_capacity = on_capacity  # called when an executor is ready
        self.children: list[Child] = []
        self._changed = asyncio.Event()
        self._closing = False
        # Attempts, not jobs: a worker may hold two attempts of one job (the
        # second claimed after the first was recovered from under it).
        self._unplaced: set[LeaseRef] = set()  # begun, waiting for an executor
        self._stopped_unplaced: set[LeaseRef] = set()
        self._tasks: set[asyncio.Task[Any]] = set()  # watchers and answers, kept referenced
        self._runs: set[asyncio.Task[AttemptResult]] = set()  # attempts begun

    # -- capacity and placement ----------------------------------------------

    def capacity(self) -> int:
        """How many more jobs can start now, whatever their kind."""
        free = 0
        for c in self._usable():
            if not c.jobs:
                free += 1
            elif all(r.is_async for r in c.jobs.values()):
                free += self.async_slots - len(c.jobs)
        return max(free - len(self._unplaced), 0)

    def room(self) -> int:
        """As many as can start now: jobs wait for an executor in the supervisor."""
        return self.capacity()

    def withdraw(self) -> list[Job]:
        return []  # every attempt begun has, or is about to get, an executor

    def _usable(self) -> list[Child]:
        return [c for c in self.children if c.ready.done() and not c.retiring and not c.killed]

    def _place(self, is_async: bool) -> Child | None:
        usable = self._usable()
        if is_async:
            shared = [c for c in usable if c.jobs and len(c.jobs) < self.async_slots
                      and all(r.is_async for r in c.jobs.values())]  # fmt: skip
            if shared:
                return max(shared, key=lambda c: len(c.jobs))
        return next((c for c in usable if not c.jobs), None)

    # -- life cycle ----------------------------------------------------------

    async def start(self) -> None:
        """Fork the executors; return once one is ready (the others call
        ``on_capacity`` as they are)."""
        await self.zygote.start()
        starting = {self._keep(self._add()) for _ in range(self.concurrency)}
        while starting:
            done, starting = await asyncio.wait(starting, return_when=asyncio.FIRST_COMPLETED)
            if any(task.result() for task in done):
                return
        raise TenureError("no executor process started (the log says why)")

    async def _add(self) -> bool:
        """Fork an executor into the pool; whether it started."""
        try:
            child = await fork(self.zygote)
        except TenureError:
            if not self._closing:
                log.exception("could not fork an executor")
            return False
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
        self._changed.set()
        self.on_capacity()
        return True

    def _keep(self, coroutine: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _watch(self, child: Child) -> None:
        """Read the child's frames until its pipe closes: then it is dead."""
        try:
            while (message := await child.read()) is not None:
                self._on_frame(child, message)
        except asyncio.CancelledError:
            child.kill()
            raise
        finally:
            child.transport.close()
        await self._on_death(child)

    def _on_frame(self, child: Child, message: Frame) -> None:
        match message:
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
            case Done():
                self._finish(child, message)
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
        child.done += 1
        if running.timer is not None:
            running.timer.cancel()
        running.end(done.result())
        self._maybe_retire(child)
        self._changed.set()

    async def _on_death(self, child: Child) -> None:
        code = await child.wait()
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        if not child.ready.done():
            child.ready.set_exception(TenureError(f"executor {child.pid} {how} while starting"))
        for running in child.jobs.values():
            if running.timer is not None:
                running.timer.cancel()
            if child.retiring:
                running.stop()
            running.end(Crashed(f"executor process {child.pid} {how}"))
        if child.jobs and not child.killed:
            log.error("executor %d %s, running %d job(s)", child.pid, how, len(child.jobs))
        child.jobs.clear()
        if child in self.children:
            self.children.remove(child)
            if not self._closing:
                await self._add()
        self._changed.set()

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
        self._unplaced.add((job.id, job.fence))  # counted against capacity from now on
        loop = asyncio.get_running_loop()
        task = loop.create_task(self.run(job, timeout))
        self._runs.add(task)
        task.add_done_callback(functools.partial(self._ran, on_end, loop.time()))

    def _ran(self, on_end: OnEnd, began: float, task: asyncio.Task[AttemptResult]) -> None:
        self._runs.discard(task)
        ran = asyncio.get_running_loop().time() - began
        if task.cancelled():
            on_end(Stopped(), ran)
        elif (exc := task.exception()) is not None:
            log.error("the process pool failed to run an attempt", exc_info=exc)
            on_end(Crashed(f"the process pool failed to run it: {exc!r}"), ran)
        else:
            on_end(task.result(), ran)

    async def run(self, job: Job, timeout: float | None) -> AttemptResult:
        is_async = self.is_async(job.task)
        lease = (job.id, job.fence)
        self._unplaced.add(lease)
        try:
            while lease not in self._stopped_unplaced:
                if (child := self._place(is_async)) is not None:
                    break
                self._changed.clear()
                await self._changed.wait()
            else:
                return Stopped()
        finally:
            self._unplaced.discard(lease)
            self._stopped_unplaced.discard(lease)
        running = Running(job, is_async, asyncio.get_running_loop().create_future(), timeout)
        child.jobs[lease] = running
        child.send(Run(job.id, job.fence, job.task, job.queue, job.attempts, job.args, job.key,
                       job.traceparent, is_async, timeout is not None))  # fmt: skip
        return await running.result

    def stop(self, lease: LeaseRef) -> None:
        for child in self.children:
            running = child.jobs.get(lease)
            if running is not None:
                running.stop()
                self._interrupt(child, running)
                return
        if lease in self._unplaced:  # not placed yet: it never will be
            self._stopped_unplaced.add(lease)
            self._changed.set()

    def abort(self, lease: LeaseRef, grace: float) -> None:
        """See Executor.abort: the executor tells the handler; after ``grace``
        seconds, one still running is stopped (its executor killed)."""
        for child in self.children:
            running = child.jobs.get(lease)
            if running is not None:
                child.send(Abort(running.job.id, running.job.fence))
                asyncio.get_running_loop().call_later(grace, self._abort_overdue, child, running)
                return
        self.stop(lease)  # not placed yet: it never will be

    def _abort_overdue(self, child: Child, running: Running) -> None:
        if child.jobs.get((running.job.id, running.job.fence)) is running:
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
        if child.jobs.get((running.job.id, running.job.fence)) is running:
            child.kill_all()
