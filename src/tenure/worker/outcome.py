"""What an attempt's result means for its job: the supervisor's settle step.

The retry decision comes from ``tenure.core.retry``; the backend only applies it.
"""

from __future__ import annotations

import logging

from tenure.backends.base import Backend
from tenure.config import QueuePolicy
from tenure.core.retry import CANCELLED, Decision, decide_for, decide_unknown_task
from tenure.core.states import Outcome, State
from tenure.errors import InvalidInput
from tenure.job import Job
from tenure.worker.completer import Completer
from tenure.worker.executors.base import (
    AttemptResult,
    Cancelled,
    Crashed,
    Raise,
    Raised,
    Returned,
    Settled,
    Stopped,
    TimedOut,
)
from tenure.worker.logfields import attempt_fields
from tenure.worker.unknown import UnknownTasks

log = logging.getLogger("tenure.worker")


async def settle(
    backend: Backend,
    job: Job,
    policy: QueuePolicy,
    result: AttemptResult,
    completer: Completer | None = None,
) -> Decision | None:
    """Complete the job (through the batching ``completer`` when given), or
    record the failure and apply the retry decision, which it returns."""
    match result:
        case Returned(value):
            try:
                if completer is None:
                    await backend.complete(job.id, job.fence, value)
                else:
                    await completer.complete(job.id, job.fence, value)
                return None
            except InvalidInput as exc:  # the result is not JSON, or too large
                return await _fail(backend, job, policy, Outcome.ERROR, f"bad result: {exc}")
        case Raised(Raise.RETRY, tb, retry_in, reason):
            text = f"Retry requested: {reason}" if reason else "Retry requested"
            return await _fail(backend, job, policy, Outcome.ERROR, text, retry_in=retry_in)
        case Raised(kind, tb):
            return await _fail(backend, job, policy, Outcome.ERROR, tb, fatal=kind is Raise.FAIL)
        case TimedOut(after):
            text = f"attempt {job.attempts} exceeded its deadline of {after} s"
            return await _fail(backend, job, policy, Outcome.TIMEOUT, text)
        case Settled(error):
            if error is not None:
                log.warning("job %s completed in its transaction, then raised", job.id,
                            extra=attempt_fields(job, traceback=error))  # fmt: skip
        case Crashed(reason):
            text = f"attempt {job.attempts}: {reason}"
            return await _fail(backend, job, policy, Outcome.CRASHED, text)
        case Stopped():
            return await hand_back(backend, job, policy)
        case Cancelled(how):
            text = f"attempt {job.attempts} cancelled: {how}"
            await backend.fail(job.id, job.fence, Outcome.CANCELLED, text, CANCELLED)
            log.info("job %s (%s) cancelled while it ran: %s", job.id, job.task, how,
                     extra=attempt_fields(job, outcome=str(Outcome.CANCELLED)))  # fmt: skip
            return CANCELLED
    return None


def cancelled(result: AttemptResult) -> Cancelled:
    """How an attempt whose handler was told of its job's cancel ended."""
    match result:
        case Returned():
            how = "the handler returned (its result is discarded)"
        case Raised(kind, tb):
            how = f"the handler raised {tb.rstrip().rsplit(chr(10), 1)[-1]}"
            how = "the handler was cancelled" if kind is Raise.CANCELLED else how
        case TimedOut(after):
            how = f"it passed its deadline of {after} s"
        case Crashed(reason):
            how = reason
        case Cancelled():
            return result
        case _:
            how = "it was stopped (past the queue's cancel_grace, or before it began)"
    return Cancelled(how)


async def settle_unknown_task(
    backend: Backend, job: Job, policy: QueuePolicy, unknown: UnknownTasks
) -> Decision:
    """A job for a task this worker does not know goes back in its place, no
    attempt spent, for a worker that knows it (a rolling deploy), while this
    worker passes the task over (``unknown``), for the queue's
    ``unknown_task_grace``; then it is dead-lettered (``unknown_task``)."""
    decision = decide_unknown_task(await backend.get(job.id), policy)
    if decision.state is not State.DEAD:
        log.info("job %s: no handler for task %r here; handed back, and passed over here "
                 "for %.1f s", job.id, job.task, decision.delay,
                 extra=attempt_fields(job))  # fmt: skip
        unknown.pass_over(job.task, decision.delay)  # first: a cycle in flight may claim
        await backend.release(job.id, job.fence)
        return decision
    text = (
        f"unknown task {job.task!r}: no worker that claimed it had a handler of that name "
        f"within the queue's unknown_task_grace ({policy.unknown_task_grace:g} s)"
    )
    await backend.fail(job.id, job.fence, Outcome.ERROR, text, decision)
    _log_failure(job, Outcome.ERROR, text, decision)
    return decision


async def hand_back(backend: Backend, job: Job, policy: QueuePolicy) -> Decision | None:
    """Give a stopped attempt back without penalty; at-most-once jobs are never run twice."""
    if policy.delivery == "at-most-once":
        text = "stopped by a drain; an at-most-once job is never delivered twice"
        return await _fail(backend, job, policy, Outcome.CRASHED, text)
    else:
        await backend.release(job.id, job.fence)
        log.info("job %s: attempt %d handed back (released)", job.id, job.attempts,
                 extra=attempt_fields(job))  # fmt: skip
        return None


async def _fail(
    backend: Backend,
    job: Job,
    policy: QueuePolicy,
    outcome: Outcome,
    error: str,
    *,
    retry_in: float | None = None,
    fatal: bool = False,
) -> Decision:
    decision = decide_for(job, outcome, policy, retry_in=retry_in, fatal=fatal)
    await backend.fail(job.id, job.fence, outcome, error, decision)
    _log_failure(job, outcome, error, decision)
    return decision


def _log_failure(job: Job, outcome: Outcome, error: str, decision: Decision) -> None:
    """One record per attempt that ended other than ok: WARNING while the job
    goes on, ERROR when it is dead-lettered; the traceback rides along."""
    fields = attempt_fields(job, outcome=str(outcome), traceback=error)
    summary = error.rstrip().rsplit("\n", 1)[-1]  # a traceback's last line: the exception
    if decision.state is State.DEAD:
        fields["dead_reason"] = str(decision.dead_reason)
        log.error("job %s (%s) dead-lettered after attempt %d (%s): %s", job.id, job.task,
                  job.attempts, decision.dead_reason, summary, extra=fields)  # fmt: skip
    else:
        fields["retry_in"] = decision.delay
        log.warning("job %s (%s) attempt %d ended %s: %s; retrying in %.1f s", job.id, job.task,
                    job.attempts, outcome, summary, decision.delay, extra=fields)  # fmt: skip
