import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenure.config import QueuePolicy
from tenure.core.events import failure_events
from tenure.core.retry import CANCELLED, backoff, decide, decide_for, decide_unknown_task
from tenure.core.states import DeadReason, Outcome, State
from tenure.job import Attempt, Job

POLICY = QueuePolicy(backoff_base=1.0, backoff_max=60.0, backoff_jitter=0.0)


def _decide(outcome, attempts=1, stalls=0, max_attempts=3, max_stalls=3, **kw):
    return decide(
        outcome,
        attempts=attempts,
        stalls=stalls,
        max_attempts=max_attempts,
        max_stalls=max_stalls,
        policy=kw.pop("policy", POLICY),
        **kw,
    )


def test_an_error_with_budget_left__is_retried_after_backoff():
    d = _decide(Outcome.ERROR, attempts=1)
    assert d.state is State.SCHEDULED and d.delay == 1.0 and not d.stall


def test_backoff_doubles_and_is_capped():
    assert [backoff(a, POLICY) for a in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(100, POLICY) == 60.0
    assert backoff(10**9, POLICY) == 60.0


@given(st.integers(1, 10_000), st.floats(0, 1))
def test_jittered_backoff_stays_within_its_bounds(attempt, jitter):
    policy = POLICY.replace(backoff_jitter=jitter)
    plain = backoff(attempt, POLICY)
    got = backoff(attempt, policy, random.Random(attempt))
    assert plain * (1 - jitter) - 1e-9 <= got <= plain


def test_the_last_attempt_failing__sends_the_job_dead_with_max_attempts():
    d = _decide(Outcome.ERROR, attempts=3, max_attempts=3)
    assert d.state is State.DEAD and d.dead_reason is DeadReason.MAX_ATTEMPTS


def test_fail_raised__is_dead_at_once_with_reason_error():
    d = _decide(Outcome.ERROR, attempts=1, fatal=True)
    assert d.state is State.DEAD and d.dead_reason is DeadReason.ERROR


def test_an_explicit_retry_in__overrides_backoff():
    assert _decide(Outcome.ERROR, retry_in=7.5).delay == 7.5
    d = _decide(Outcome.ERROR, retry_in=0)
    assert d.state is State.QUEUED


def test_a_stall_is_queued_again_at_once_and_consumes_a_stall():
    d = _decide(Outcome.STALLED, attempts=1, stalls=0)
    assert d.state is State.QUEUED and d.stall and d.delay == 0


def test_a_crash_consumes_a_stall_too():
    assert _decide(Outcome.CRASHED).stall


def test_the_last_stall__sends_the_job_dead_with_reason_stalled():
    d = _decide(Outcome.STALLED, attempts=1, stalls=1, max_stalls=2)
    assert d.state is State.DEAD and d.dead_reason is DeadReason.STALLED and d.stall


def test_a_crash_on_the_last_attempt__is_dead_with_reason_crashed():
    d = _decide(Outcome.CRASHED, attempts=3, stalls=0, max_attempts=3)
    assert d.dead_reason is DeadReason.CRASHED


def test_a_timeout_consumes_no_stall_and_backs_off():
    d = _decide(Outcome.TIMEOUT, attempts=1)
    assert d.state is State.SCHEDULED and not d.stall
    assert _decide(Outcome.TIMEOUT, attempts=3).dead_reason is DeadReason.TIMEOUT


def test_at_most_once__never_retries():
    policy = POLICY.replace(delivery="at-most-once")
    for outcome in (Outcome.ERROR, Outcome.CRASHED, Outcome.STALLED, Outcome.TIMEOUT):
        assert _decide(outcome, attempts=1, policy=policy).state is State.DEAD


@pytest.mark.parametrize("outcome", [Outcome.COMPLETED, Outcome.RELEASED])
def test_success_and_release_are_not_decisions(outcome):
    with pytest.raises(ValueError):
        _decide(outcome)


@given(
    st.sampled_from([Outcome.ERROR, Outcome.CRASHED, Outcome.STALLED, Outcome.TIMEOUT]),
    st.integers(1, 20),
    st.integers(0, 20),
    st.integers(1, 20),
    st.integers(1, 20),
)
def test_a_job_never_outlives_its_budgets(outcome, attempts, stalls, max_attempts, max_stalls):
    d = _decide(outcome, attempts=attempts, stalls=stalls, max_attempts=max_attempts,
                max_stalls=max_stalls)  # fmt: skip
    stalls_after = stalls + int(d.stall)
    if attempts >= max_attempts or (stalls_after >= max_stalls and d.stall):
        assert d.state is State.DEAD
    else:
        assert d.state in (State.QUEUED, State.SCHEDULED)


def _claimed(*ended: tuple[Outcome, float], now: float) -> Job:
    """A job claimed at ``now`` after attempts that ended with these outcomes,
    each started at the time given."""
    history = [Attempt(i + 1, i + 1, "w", t, t + 0.01, o) for i, (o, t) in enumerate(ended)]
    history.append(Attempt(len(ended) + 1, len(ended) + 1, "w", now, None, None))
    return Job("j", "t", "default", {}, State.ACTIVE, 0, 0.0, 0.0, history=tuple(history))


def test_an_unknown_task__is_handed_back_at_once_and_passed_over_ever_longer_within_the_grace():
    policy = QueuePolicy(unknown_task_grace=600)
    R = Outcome.RELEASED
    first = decide_unknown_task(_claimed(now=100.0), policy)
    assert (first.state, first.delay) == (State.QUEUED, 0.5)
    third = decide_unknown_task(_claimed((R, 100.0), (R, 100.5), now=101.5), policy)
    assert third.delay == 2.0
    many = decide_unknown_task(_claimed(*[(R, 100.0 + i) for i in range(20)], now=150.0), policy)
    assert many.delay == 30.0  # the longest wait
    near_end = decide_unknown_task(_claimed((R, 100.0), now=699.0), policy)
    assert near_end.delay == pytest.approx(1.0)  # never beyond the grace


def test_an_unknown_task_past_its_grace__is_dead_with_reason_unknown_task():
    R = Outcome.RELEASED
    job = _claimed((R, 100.0), (R, 300.0), now=700.0)
    dead = decide_unknown_task(job, QueuePolicy(unknown_task_grace=600))
    assert (dead.state, dead.dead_reason) == (State.DEAD, DeadReason.UNKNOWN_TASK)
    assert decide_unknown_task(_claimed(now=5.0), QueuePolicy(unknown_task_grace=0)).state is (
        State.DEAD
    )


def test_the_grace_counts_from_the_first_of_the_hand_backs_in_a_row_only():
    R, E = Outcome.RELEASED, Outcome.ERROR
    # Released long ago, then an attempt that ran (a worker knew the task): a new grace.
    job = _claimed((R, 0.0), (E, 1000.0), (R, 2000.0), now=2100.0)
    assert decide_unknown_task(job, QueuePolicy(unknown_task_grace=600)).state is State.QUEUED


def test_a_job_cancelled_while_it_ran__is_cancelled_whatever_its_attempt_and_budget():
    job = Job("j", "t", "default", {}, State.ACTIVE, 0, 0.0, 0.0, attempts=1, fence=1)
    assert decide_for(job, Outcome.ERROR, POLICY).state is State.SCHEDULED
    requested = dataclasses.replace(job, cancel_requested=True)
    for outcome in (Outcome.ERROR, Outcome.CRASHED, Outcome.STALLED, Outcome.TIMEOUT):
        assert decide_for(requested, outcome, POLICY) == CANCELLED
    assert _decide(Outcome.CANCELLED) == CANCELLED


def test_a_cancelled_attempt__records_its_detector_then_cancelled():
    assert failure_events(Outcome.CANCELLED, CANCELLED, rescued=False) == [
        ("cancelled", {"outcome": "cancelled"})
    ]
    assert failure_events(Outcome.CRASHED, CANCELLED, rescued=True) == [
        ("stalled", {"detector": "worker_gone"}),
        ("cancelled", {"outcome": "crashed"}),
    ]
