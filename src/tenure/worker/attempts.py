"""The table of attempts in flight: from the claim to the settle, one record each.

Each attempt is one :class:`~tenure.worker.attempt.Attempt`, keyed by its
lease. Claimed, it is begun on the executor, or, claimed ahead, waits in
``ahead`` for room. Its end calls back (``_ended``); a success joins the next
cycle's completions, and their write calls back (``_written``); anything else
is settled in a task. Either way it is then finished (``_finish``): its
record goes. What can wait (a policy to fetch, a failure to record, a settle
to retry) runs in a task (``in_task``).

The lease keeper renews the leases of this table (it is the keeper's
``Holder``). An attempt whose lease was lost (the sweeper recovered it, or a
drain handed it back) is marked ``lost``: it is stopped and never settles.
One whose job was cancelled while it ran is marked ``cancelling``: however it
ends, the job ends ``cancelled``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from tenure.backends.base import LeaseRef
from tenure.config import QueuePolicy
from tenure.core.retry import Decision
from tenure.core.states import State
from tenure.errors import BackendUnavailable, JobNotFound, LeaseLost, StorageLost, TenureError
from tenure.job import Job
from tenure.worker.attempt import Attempt, Stage
from tenure.worker.executors.base import AttemptResult, Cancelled, Returned, Settled
from tenure.worker.logfields import attempt_fields
from tenure.worker.outcome import cancelled, settle, settle_unknown_task
from tenure.worker.unknown import UnknownTasks

if TYPE_CHECKING:
    from tenure.worker.parts import Parts

log = logging.getLogger("tenure.worker")

SETTLE_RETRIES = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 5.0, 5.0)
# A job deleted while it ran, or gone with a primary that failed over before it
# replicated the job: nothing is left to settle, and no traceback would help.
GONE = "job %s: no longer in storage; attempt %d is not recorded"
NOT_BEGUN = Cancelled("it had not begun")  # claimed ahead, cancelled before a slot freed


class Attempts:
    """Every attempt this worker holds, from its claim until it is settled."""

    def __init__(self, parts: Parts) -> None:
        self.app = parts.app
        self.backend = parts.backend
        self.executor = parts.executor
        self.completer = parts.completer
        self.policies = parts.policies
        self.faults = parts.faults
        self.pace = parts.pace
        self.wake = parts.wake.set  # a slot freed, or a record went: the cycle loop looks again
        self.draining = parts.stop.draining
        self.metrics = parts.metrics
        self.by_lease: dict[LeaseRef, Attempt] = {}  # claimed and not yet finished
        self.ahead: deque[Attempt] = deque()  # claimed ahead: their turn for room, in order
        self.starting = 0  # attempts in stage STARTING: claimed, not begun
        self.unknown = UnknownTasks()  # tasks met without a handler: claims pass them over
        self.processed = 0
        self.finished = asyncio.Event()  # a record went
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def unbegun(self) -> int:
        """Jobs claimed that wait for a slot: here, or in the executor."""
        return len(self.ahead) + max(-self.executor.capacity(), 0)

    def _to(self, attempt: Attempt, stage: Stage) -> None:
        if attempt.stage is Stage.STARTING:
            self.starting -= 1
        attempt.stage = stage

    def start(self, job: Job) -> None:
        """A job was claimed: hold its lease and begin its attempt."""
        if self.metrics is not None:
            self.metrics.started(job)
        lease = (job.id, job.fence)
        attempt = self.by_lease[lease] = Attempt(job, lease)
        self.starting += 1
        policy = self.policies.by_queue.get(job.queue)
        task = self.app.tasks.get(job.task)
        if policy is None or task is None:
            self.in_task(self._start_slowly(attempt))
            return
        self._begin(attempt, task.policy(policy))

    # -- the lease keeper's Holder ----------------------------------------

    def held(self) -> list[LeaseRef]:
        """The leases to renew: every attempt's, but those known lost."""
        return [lease for lease, attempt in self.by_lease.items() if not attempt.lost]

    def lease_lost(self, lease: LeaseRef) -> None:
        """The lease is no longer held: stop the attempt; it never settles."""
        attempt = self.by_lease.get(lease)
        if attempt is None or attempt.lost or attempt.settling:
            return  # a settling one was settled a moment ago, or its settle says how it went
        attempt.lost = True
        job = attempt.job
        log.warning("job %s (%s): lease of attempt %d lost (fence %d): stopping it", job.id,
                    job.task, job.attempts, job.fence, extra=attempt_fields(job))  # fmt: skip
        if attempt.stage is Stage.STARTING:
            if attempt in self.ahead:  # never began: it just goes
                self.ahead.remove(attempt)
                self._finish(lease)
            return  # waits for its policy: it never begins
        self.executor.stop(lease)

    def cancel_requested(self, lease: LeaseRef) -> None:
        """The job was cancelled while this worker runs it: tell its handler, which
        has the queue's cancel_grace to stop; then it is stopped. Whatever ends
        the attempt from now on, the job ends cancelled. Told once."""
        attempt = self.by_lease.get(lease)
        if attempt is None or attempt.lost or attempt.cancelling or attempt.settling:
            return
        attempt.cancelling = True
        job = attempt.job
        policy = self.policies.by_queue.get(job.queue) or QueuePolicy()
        log.info("job %s (%s): cancelled while running attempt %d; stopping it within %g s",
                 job.id, job.task, job.attempts, policy.cancel_grace,
                 extra=attempt_fields(job))  # fmt: skip
        if attempt in self.ahead:  # never began: it ends now
            self.ahead.remove(attempt)
            self.in_task(self._settle_then_finish(attempt, NOT_BEGUN))
            return
        self.executor.abort(lease, policy.cancel_grace)

    # -- begin, end, settle -----------------------------------------------

    def _begin(self, attempt: Attempt, policy: QueuePolicy) -> None:
        attempt.policy = policy
        if attempt.cancelling:  # cancelled before it began
            self.in_task(self._settle_then_finish(attempt, NOT_BEGUN))
        elif self.executor.capacity() <= 0 and self.draining.is_set():
            self.in_task(self.hand_back_unbegun(attempt.job))  # claimed ahead: never begins
        elif self.executor.room() <= 0:  # claimed ahead: it begins when a slot frees
            self.ahead.append(attempt)
        else:
            self._to(attempt, Stage.RUNNING)
            job = attempt.job
            attempt.timeout = job.timeout or policy.timeout
            self.executor.begin(job, attempt.timeout, functools.partial(self._ended, attempt))

    def begin_ahead(self) -> None:
        """Hand jobs claimed ahead to the executor while it has room: when an
        attempt ends, and when the process pool has replaced an executor."""
        while self.ahead and self.executor.room() > 0 and not self.draining.is_set():
            attempt = self.ahead.popleft()
            assert attempt.policy is not None  # read before it waited
            self._begin(attempt, attempt.policy)

    def withdraw_unbegun(self) -> list[Job]:
        """Take back every job claimed that has not begun (a drain hands them back)."""
        unbegun = [attempt.job for attempt in self.ahead] + self.executor.withdraw()
        self.ahead.clear()
        return unbegun

    async def _start_slowly(self, attempt: Attempt) -> None:
        job = attempt.job
        try:
            policy = await self.policies.get(job.queue)
            if attempt.lost:
                pass  # handed back, or recovered, while we waited: never run it
            elif job.task not in self.app.tasks:
                decision = await settle_unknown_task(self.backend, job, policy, self.unknown)
                self.after_failure(decision, job.id)
            else:
                self._begin(attempt, self.app.tasks[job.task].policy(policy))
                return
        except LeaseLost as exc:
            log.warning("job %s: %s", job.id, exc)
        except Exception:
            log.exception("job %s: could not start attempt %d", job.id, job.attempts)
        self._finish(attempt.lease)

    def _ended(self, attempt: Attempt, result: AttemptResult, ran: float) -> None:
        job = attempt.job
        if self.metrics is not None:
            self.metrics.ended(job.queue, result, ran, lost=attempt.lost)
        self.pace.ran(ran)
        self.begin_ahead()
        self._to(attempt, Stage.SETTLING)
        if attempt.lost:  # recovered by the sweeper, or handed back: never settle
            self._finish(attempt.lease)
        elif attempt.cancelling and not isinstance(result, Settled):
            self.in_task(self._settle_then_finish(attempt, cancelled(result)))
        elif isinstance(result, Returned) and (item := self.completer.item(job, result.value)):
            written = functools.partial(self._written, attempt, result)
            self.completer.add(item, written, step=job.workflow is not None)
        else:
            self.in_task(self._settle_then_finish(attempt, result))

    def _written(
        self, attempt: Attempt, result: AttemptResult, error: BaseException | None
    ) -> None:
        if isinstance(error, BackendUnavailable):
            self.in_task(self._settle_then_finish(attempt, result))
            return
        job = attempt.job
        if error is None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("completed job %s (%s), attempt %d", job.id, job.task, job.attempts,
                          extra=attempt_fields(job))  # fmt: skip
        elif isinstance(error, LeaseLost):
            log.warning("job %s: %s", job.id, error, extra=attempt_fields(job))
        elif isinstance(error, JobNotFound):
            log.warning(GONE, job.id, job.attempts, extra=attempt_fields(job))
        elif not isinstance(error, StorageLost):  # that one is said once, by the cycle
            log.error("job %s: could not settle attempt %d", job.id, job.attempts, exc_info=error,
                      extra=attempt_fields(job))  # fmt: skip
        self._finish(attempt.lease)

    async def _settle_then_finish(self, attempt: Attempt, result: AttemptResult) -> None:
        self._to(attempt, Stage.SETTLING)
        job = attempt.job
        try:
            await self._settle(attempt, result)
        except LeaseLost as exc:
            log.warning("job %s: %s", job.id, exc)
        except JobNotFound:
            log.warning(GONE, job.id, job.attempts)
        except Exception:
            log.exception("job %s: could not settle attempt %d", job.id, job.attempts)
        finally:
            self._finish(attempt.lease)

    async def _settle(self, attempt: Attempt, result: AttemptResult) -> None:
        """Settle, riding out a storage hiccup while the lease is still heartbeated."""
        job, policy = attempt.job, attempt.policy
        assert policy is not None  # read before it began
        for delay in SETTLE_RETRIES:
            if attempt.lost:
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
        if (attempt := self.by_lease.pop(lease, None)) is not None:
            self._to(attempt, Stage.WRITTEN)
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
        except (LeaseLost, JobNotFound):
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
