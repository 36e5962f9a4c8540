"""The table of attempts in flight: from the claim to the settle, one row each.

An attempt claimed is begun on the executor, or, claimed ahead, waits here
for room (``ahead``). Its end calls back (``_ended``); a success joins the
next cycle's completions, and their write calls back (``_written``); anything
else is settled in a task. Either way it is then finished (``_finish``): its
lease is dropped and its row goes. What can wait (a policy to fetch, a
failure to record, a settle to retry) runs in a task (``in_task``).

An attempt whose lease was lost (the sweeper recovered it, or a drain handed
it back) is in ``lost``: it is stopped and never settles. One whose job was
cancelled while it ran is in ``cancelling``: however it ends, the job ends
``cancelled``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from tenure.app import App
from tenure.backends.base import Backend, LeaseRef
from tenure.config import QueuePolicy
from tenure.core.retry import Decision
from tenure.core.states import State
from tenure.errors import BackendUnavailable, LeaseLost, StorageLost, TenureError
from tenure.job import Job
from tenure.worker.completer import Completer
from tenure.worker.executors.base import AttemptResult, Cancelled, Executor, Returned, Settled
from tenure.worker.faults import StorageFaults
from tenure.worker.leases import LeaseKeeper
from tenure.worker.logfields import attempt_fields
from tenure.worker.outcome import cancelled, settle, settle_unknown_task
from tenure.worker.pacing import Pace
from tenure.worker.policies import Policies
from tenure.worker.unknown import UnknownTasks

if TYPE_CHECKING:
    from tenure.metrics import WorkerMetrics

log = logging.getLogger("tenure.worker")

SETTLE_RETRIES = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 5.0, 5.0)
NOT_BEGUN = Cancelled("it had not begun")  # claimed ahead, cancelled before a slot freed


class Attempts:
    """Every attempt this worker holds, from its claim until it is settled."""

    def __init__(
        self,
        app: App,
        backend: Backend,
        executor: Executor,
        *,
        keeper: LeaseKeeper,
        completer: Completer,
        policies: Policies,
        faults: StorageFaults,
        pace: Pace,
        wake: Callable[[], None],
        draining: asyncio.Event,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.app = app
        self.backend = backend
        self.executor = executor
        self.keeper = keeper
        self.completer = completer
        self.policies = policies
        self.faults = faults
        self.pace = pace
        self.wake = wake  # a slot freed, or a row went: the cycle loop looks again
        self.draining = draining
        self.metrics = metrics
        self.running: dict[LeaseRef, Job] = {}  # claimed and not yet finished
        self.lost: set[LeaseRef] = set()
        self.cancelling: set[LeaseRef] = set()
        self.ahead: deque[tuple[Job, QueuePolicy]] = deque()  # claimed ahead: no room yet
        self.starting = 0  # started, waiting for their policy before they begin
        self.unknown = UnknownTasks()  # tasks met without a handler: claims pass them over
        self.processed = 0
        self.finished = asyncio.Event()  # a row went
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def unbegun(self) -> int:
        """Jobs claimed that wait for a slot: here, or in the executor."""
        return len(self.ahead) + max(-self.executor.capacity(), 0)

    def start(self, job: Job) -> None:
        """A job was claimed: hold its lease and begin its attempt."""
        if self.metrics is not None:
            self.metrics.started(job)
        lease = (job.id, job.fence)
        self.running[lease] = job
        self.keeper.hold(lease, lambda: self.lease_lost(lease))
        policy = self.policies.by_queue.get(job.queue)
        task = self.app.tasks.get(job.task)
        if policy is None or task is None:
            self.starting += 1
            self.in_task(self._start_slowly(job))
            return
        self._begin(job, task.policy(policy))

    def lease_lost(self, lease: LeaseRef) -> None:
        """The lease is no longer held: stop the attempt; it never settles."""
        if (job := self.running.get(lease)) is not None:
            log.warning("job %s (%s): lease of attempt %d lost (fence %d): stopping it", job.id,
                        job.task, job.attempts, job.fence, extra=attempt_fields(job))  # fmt: skip
        self.lost.add(lease)
        for i, (job, _) in enumerate(self.ahead):
            if (job.id, job.fence) == lease:  # never began: it just goes
                del self.ahead[i]
                self._finish(lease)
                return
        self.executor.stop(lease)

    def cancel_requested(self, lease: LeaseRef) -> None:
        """The job was cancelled while this worker runs it: tell its handler, which
        has the queue's cancel_grace to stop; then it is stopped. Whatever ends
        the attempt from now on, the job ends cancelled."""
        if (job := self.running.get(lease)) is None or lease in self.lost:
            return
        self.cancelling.add(lease)
        policy = self.policies.by_queue.get(job.queue) or QueuePolicy()
        log.info("job %s (%s): cancelled while running attempt %d; stopping it within %g s",
                 job.id, job.task, job.attempts, policy.cancel_grace,
                 extra=attempt_fields(job))  # fmt: skip
        for i, (waiting, _) in enumerate(self.ahead):
            if (waiting.id, waiting.fence) == lease:  # never began: it ends now
                del self.ahead[i]
                self.in_task(self._settle_then_finish(waiting, policy, NOT_BEGUN))
                return
        self.executor.abort(lease, policy.cancel_grace)

    def _begin(self, job: Job, policy: QueuePolicy) -> None:
        if self.cancelling and (job.id, job.fence) in self.cancelling:  # before it began
            self.in_task(self._settle_then_finish(job, policy, NOT_BEGUN))
        elif self.executor.capacity() <= 0 and self.draining.is_set():
            self.in_task(self.hand_back_unbegun(job))  # claimed ahead: never begins
        elif self.executor.room() <= 0:  # claimed ahead: it begins when a slot frees
            self.ahead.append((job, policy))
        else:
            timeout = job.timeout or policy.timeout
            self.executor.begin(job, timeout, functools.partial(self._ended, job, policy))

    def begin_ahead(self) -> None:
        """Hand jobs claimed ahead to the executor while it has room: when an
        attempt ends, and when the process pool has replaced an executor."""
        while self.ahead and self.executor.room() > 0 and not self.draining.is_set():
            self._begin(*self.ahead.popleft())

    def withdraw_unbegun(self) -> list[Job]:
        """Take back every job claimed that has not begun (a drain hands them back)."""
        unbegun = [job for job, _ in self.ahead] + self.executor.withdraw()
        self.ahead.clear()
        return unbegun

    async def _start_slowly(self, job: Job) -> None:
        lease = (job.id, job.fence)
        try:
            policy = await self.policies.get(job.queue)
            if lease in self.lost:
                pass  # handed back, or recovered, while we waited: never run it
            elif job.task not in self.app.tasks:
                decision = await settle_unknown_task(self.backend, job, policy, self.unknown)
                self.after_failure(decision, job.id)
            else:
                self._begin(job, self.app.tasks[job.task].policy(policy))
                return
        except LeaseLost as exc:
            log.warning("job %s: %s", job.id, exc)
        except Exception:
            log.exception("job %s: could not start attempt %d", job.id, job.attempts)
        finally:
            self.starting -= 1
        self._finish(lease)

    def _ended(self, job: Job, policy: QueuePolicy, result: AttemptResult, ran: float) -> None:
        lease = (job.id, job.fence)
        if self.metrics is not None:
            self.metrics.ended(job.queue, result, ran, lost=lease in self.lost)
        self.pace.ran(ran)
        self.begin_ahead()
        self.keeper.settling(lease)
        if lease in self.lost:  # recovered by the sweeper, or handed back: never settle
            self._finish(lease)
        elif lease in self.cancelling and not isinstance(result, Settled):
            self.in_task(self._settle_then_finish(job, policy, cancelled(result)))
        elif isinstance(result, Returned) and (item := self.completer.item(job, result.value)):
            self.completer.add(item, functools.partial(self._written, job, policy, result))
        else:
            self.in_task(self._settle_then_finish(job, policy, result))

    def _written(
        self, job: Job, policy: QueuePolicy, result: AttemptResult, error: BaseException | None
    ) -> None:
        if isinstance(error, BackendUnavailable):
            self.in_task(self._settle_then_finish(job, policy, result))
            return
        if error is None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("completed job %s (%s), attempt %d", job.id, job.task, job.attempts,
                          extra=attempt_fields(job))  # fmt: skip
        elif isinstance(error, LeaseLost):
            log.warning("job %s: %s", job.id, error, extra=attempt_fields(job))
        elif not isinstance(error, StorageLost):  # that one is said once, by the cycle
            log.error("job %s: could not settle attempt %d", job.id, job.attempts, exc_info=error,
                      extra=attempt_fields(job))  # fmt: skip
        self._finish((job.id, job.fence))

    async def _settle_then_finish(
        self, job: Job, policy: QueuePolicy, result: AttemptResult
    ) -> None:
        try:
            await self._settle(job, policy, result)
        except LeaseLost as exc:
            log.warning("job %s: %s", job.id, exc)
        except Exception:
            log.exception("job %s: could not settle attempt %d", job.id, job.attempts)
        finally:
            self._finish((job.id, job.fence))

    async def _settle(self, job: Job, policy: QueuePolicy, result: AttemptResult) -> None:
        """Settle, riding out a storage hiccup while the lease is still heartbeated."""
        lease = (job.id, job.fence)
        for delay in SETTLE_RETRIES:
            if lease in self.lost:
                return  # recovered by the sweeper, or handed back: never settle
            try:
                decision = await settle(self.backend, job, policy, result, self.completer)
                self.after_failure(decision, job.id)
                self.faults.succeeded("settle")
                return
            except (BackendUnavailable, StorageLost) as exc:
                self.faults.failed("settle", exc)
                if isinstance(exc, StorageLost):
                    return
                log.debug("job %s: could not settle; retrying in %.1f s", job.id, delay)
                await asyncio.sleep(delay)
        log.error("job %s: gave up settling; its lease will expire and it will run again", job.id)

    def _finish(self, lease: LeaseRef) -> None:
        self.begin_ahead()
        self.keeper.drop(lease)
        self.lost.discard(lease)
        self.cancelling.discard(lease)
        if self.running.pop(lease, None) is not None:
            self.processed += 1
        self.finished.set()
        self.wake()

    async def hand_back_unbegun(self, job: Job) -> None:
        """Released, whatever the queue's delivery: no handler ever saw the job
        (an at-most-once job too: only an attempt that began cannot run again)."""
        try:
            await self.backend.release(job.id, job.fence)
            log.info("job %s: handed back (claimed, not begun)", job.id,
                     extra=attempt_fields(job))  # fmt: skip
        except LeaseLost:
            pass
        except Exception:
            log.exception("job %s: could not hand it back; its lease will expire", job.id)
        finally:
            self._finish((job.id, job.fence))

    def after_failure(self, decision: Decision | None, job_id: str) -> None:
        if decision is not None and decision.state is State.DEAD:
            self.tell_dead(job_id)

    def tell_dead(self, job_id: str) -> None:
        """Tell the on_dead hooks, in a task and a thread: a slow hook must delay
        neither a heartbeat nor the end of the attempt."""
        if self.app.hooks.deads:
            self.in_task(self._dead(job_id))

    async def _dead(self, job_id: str) -> None:
        try:
            job = await self.backend.get(job_id)
        except TenureError as exc:
            log.warning("on_dead hooks not called for job %s: %s", job_id, exc)
            return
        await asyncio.to_thread(self.app.hooks.dead, job)

    def in_task(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_tasks(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for what runs in tasks (hooks, settles)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
