"""Workflows ended, by outcome (``Backend.workflow_outcomes``: the counter
``tenure_workflows_total``): each end counts once, for good; and a large
workflow's store answers what a read finds."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from tenure.config import QueuePolicy
from tenure.core.states import State
from tenure.core.workflows import WorkflowState, chain, compile_flow, group
from tenure.errors import JobNotFound
from tests.conformance.aging import age
from tests.conformance.helpers import register
from tests.conformance.test_workflows import finish, kill, run, step


def outcomes(completed: int, failed: int, cancelled: int) -> dict[WorkflowState, int]:
    return {
        WorkflowState.COMPLETED: completed,
        WorkflowState.FAILED: failed,
        WorkflowState.CANCELLED: cancelled,
    }


def test_workflow_outcomes__count_each_end_and_outlive_pruning(backend: Any, worker: str) -> None:
    for queue in ("default", "other"):
        backend.set_policy(queue, QueuePolicy(keep_completed=60.0))
    assert backend.workflow_outcomes() == outcomes(0, 0, 0)
    done, done_jobs = run(backend, chain(step("a"), step("b", "other")))
    finish(backend, worker, "a")
    broken, _ = run(backend, chain(step("x"), step("y")))
    dead = kill(backend, worker, "x")
    run(backend, group(step("z", "third")))
    gone, _ = run(backend, chain(step("w", "third")))
    other = register(backend, "worker-2", ("other", "third"))
    backend.cancel_workflow(gone.id)
    backend.cancel_workflow(gone.id)  # once cancelled, it stays so: no second end
    finish(backend, other, "b", ("other",))
    assert backend.workflow_outcomes() == outcomes(1, 1, 1)
    # A DLQ retry resumes the failed workflow: its end counts again, its failure stays counted.
    backend.retry_dead("default", [dead.id])
    finish(backend, worker, "x")
    finish(backend, worker, "y")
    assert backend.get_workflow(broken.id).state == WorkflowState.COMPLETED
    assert backend.workflow_outcomes() == outcomes(2, 1, 1)
    age(backend, [j.id for j in done_jobs.values()], 120.0)
    assert backend.prune(100) == 2
    with pytest.raises(JobNotFound):
        backend.get_workflow(done.id)
    assert backend.workflow_outcomes() == outcomes(2, 1, 1)


def test_a_large_workflow_s_answer__is_what_a_read_finds(backend: Any) -> None:
    """The answer of a store is storage's own (its clock, its states), as a
    read finds it: a group of more steps than one call writes, in two
    queues, sources delayed, due later or due already, and a callback."""
    now = time.time()
    sources = [step(f"s{i}", "default" if i % 3 else "other") for i in range(1200)]
    timed = [step("later", delay=60.0), step("due", run_at=now - 5), step("at", run_at=now + 60)]
    callback = step("cb", run_at=now + 30)  # waits: due at its run_at once released
    stored = backend.enqueue_workflow(compile_flow(chain(group(*sources, *timed), callback)))
    assert stored == backend.get_workflow(stored.id)
    states = Counter(j.state for j in stored.jobs)
    assert states == {State.QUEUED: 1201, State.SCHEDULED: 2, State.WAITING: 1}
