"""What happens to a job after an attempt that did not complete.

Decided here, once, and handed to the backend as a fact (a :class:`Decision`);
backends never re-derive it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenure.core.states import STALL_OUTCOMES, DeadReason, Outcome, State

if TYPE_CHECKING:
    from tenure.config import QueuePolicy
    from tenure.job import Job


@dataclass(frozen=True, slots=True)
class Decision:
    """The fate of a job after an unsuccessful attempt.

    ``state`` is ``queued`` (run again at once), ``scheduled`` (after ``delay``
    seconds), ``dead`` (with ``dead_reason``) or ``cancelled`` (the job was
    cancelled while it ran). ``stall`` says whether the attempt consumes one of
    the job's ``max_stalls`` budget.
    """

    state: State
    delay: float = 0.0
    dead_reason: DeadReason | None = None
    stall: bool = False


# The fate of a job cancelled while it ran. Storage applies it to any attempt
# of such a job that ends other than completed, whatever decision came with the
# write: the worker that decided may not have known of the cancel yet.
CANCELLED = Decision(State.CANCELLED)


def backoff(attempt: int, policy: QueuePolicy, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter, capped: the wait before attempt ``attempt + 1``.

    ``base * 2**(attempt-1)``, capped at ``backoff_max``, then reduced by up to
    ``backoff_jitter`` of itself at random so that a crowd of failures spreads out.
    """
    exponent = min(max(attempt - 1, 0), 64)
    delay = min(policy.backoff_max, policy.backoff_base * (2.0**exponent))
    if policy.backoff_jitter:
        delay *= 1.0 - policy.backoff_jitter * (rng or random).random()
    return delay


def decide(
    outcome: Outcome,
    *,
    attempts: int,
    stalls: int,
    max_attempts: int,
    max_stalls: int,
    policy: QueuePolicy,
    retry_in: float | None = None,
    fatal: bool = False,
    rng: random.Random | None = None,
) -> Decision:
    """Decide the fate of a job whose attempt number ``attempts`` ended with ``outcome``.

    ``attempts`` and ``stalls`` are the job's counters before this decision
    (``attempts`` already counts the attempt that just ended). ``fatal`` means
    the handler raised ``Fail``: no retry can help.
    ``retry_in`` is an explicit wait asked for by ``Retry(in_=...)``. An
    at-most-once queue never delivers a job twice: every failure is final.
    """
    if outcome in (Outcome.COMPLETED, Outcome.RELEASED):
        raise ValueError(f"{outcome} is not a failure")
    if outcome is Outcome.CANCELLED:
        return CANCELLED
    stall = outcome in STALL_OUTCOMES
    if fatal:
        return Decision(State.DEAD, dead_reason=DeadReason.ERROR, stall=stall)
    exhausted = (stall and stalls + 1 >= max_stalls) or attempts >= max_attempts
    if exhausted or policy.delivery == "at-most-once":
        reason = DeadReason.MAX_ATTEMPTS if outcome is Outcome.ERROR else DeadReason(outcome.value)
        return Decision(State.DEAD, dead_reason=reason, stall=stall)
    if stall:
        # The handler did nothing wrong that we know of: give the job back at once.
        return Decision(State.QUEUED, stall=True)
    delay = backoff(attempts, policy, rng) if retry_in is None else retry_in
    return Decision(State.SCHEDULED if delay > 0 else State.QUEUED, delay=delay)


def decide_for(
    job: Job,
    outcome: Outcome,
    policy: QueuePolicy,
    *,
    retry_in: float | None = None,
    fatal: bool = False,
) -> Decision:
    """:func:`decide` for a job as claimed: its counters (its attempts since its
    last retry from the DLQ: a retried job has a fresh budget), and its own
    ``max_attempts`` when it has one. A job whose cancel was requested is
    cancelled: it never runs again."""
    if job.cancel_requested:
        return CANCELLED
    return decide(
        outcome,
        attempts=job.attempts - job.budget_from,
        stalls=job.stalls,
        max_attempts=job.max_attempts or policy.max_attempts,
        max_stalls=policy.max_stalls,
        policy=policy,
        retry_in=retry_in,
        fatal=fatal,
    )


# How long a worker that does not know a job's task passes that task over in
# its claims after handing the job back: doubling from the first to the
# longest, so that old workers in a long rolling deploy do not keep claiming
# it, and still look again (to dead-letter it once the grace has run out).
UNKNOWN_TASK_WAITS = (0.5, 30.0)


def decide_unknown_task(job: Job, policy: QueuePolicy) -> Decision:
    """The fate of a job claimed by a worker that does not know its task: while
    the queue's ``unknown_task_grace`` lasts, handed back ``queued`` in its place
    (released: no attempt spent), for any worker that knows the task to take at
    once, while the worker that handed it back passes the task over for
    ``delay`` seconds; then ``dead`` (``unknown_task``).

    ``job`` comes with its history. The grace counts from the start of the first
    of the attempts handed back in a row just before this one, in storage's clock."""
    ended = [a for a in job.history if a.outcome is not None]
    running = [a.started_at for a in job.history if a.outcome is None]
    now = running[-1] if running else max((a.started_at for a in ended), default=0.0)
    handed_back = 0
    since = now
    for attempt in reversed(ended):
        if attempt.outcome is not Outcome.RELEASED:
            break
        handed_back += 1
        since = attempt.started_at
    left = policy.unknown_task_grace - (now - since)
    if left <= 0:
        return Decision(State.DEAD, dead_reason=DeadReason.UNKNOWN_TASK)
    first, longest = UNKNOWN_TASK_WAITS
    return Decision(State.QUEUED, delay=min(first * 2.0 ** min(handed_back, 16), longest, left))
