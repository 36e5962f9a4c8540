"""Workflows in storage (tenure.core.workflows): a dependent is released, or
cancelled, or made to wait again, by the transition of the step it waits on,
fenced like it; the same on every backend."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import pytest

from tenure.config import QueuePolicy
from tenure.core.events import EventKind
from tenure.core.states import Outcome, State
from tenure.core.workflows import (
    CancelReason,
    Flow,
    Step,
    WorkflowSpec,
    WorkflowState,
    chain,
    compile_flow,
    group,
)
from tenure.errors import InvalidInput, JobNotFound, LeaseLost
from tenure.job import Job
from tests.conformance.helpers import (
    SHORT_LEASE,
    decision_for,
    enqueue_one,
    nonzero_counts,
    register,
    rescue_until,
    spec,
)


def step(name: str, queue: str = "default", *, may_fail: bool = False, **kw: Any) -> Step:
    return Step(spec(name, {"name": name}, queue=queue, **kw), may_fail)


def run(backend: Any, flow: Flow, **kw: Any) -> tuple[WorkflowSpec, dict[str, Job]]:
    """Store ``flow``; return its spec and its jobs by task name."""
    wf = compile_flow(flow, **kw)
    stored = backend.enqueue_workflow(wf)
    assert stored.id == wf.id
    return wf, {j.task: j for j in stored.jobs}


def state(backend: Any, job: Job) -> State:
    return backend.get(job.id).state  # type: ignore[no-any-return]


def take(backend: Any, worker: str, task: str, queues: tuple[str, ...] = ("default",)) -> Job:
    """Claim the one claimable job, which must be of ``task``."""
    jobs: list[Job] = backend.claim(worker, list(queues), 10)
    assert [j.task for j in jobs] == [task], jobs
    return jobs[0]


def finish(backend: Any, worker: str, task: str, queues: tuple[str, ...] = ("default",)) -> Job:
    job = take(backend, worker, task, queues)
    backend.complete(job.id, job.fence, {"done": task})
    return job


def kill(backend: Any, worker: str, task: str, queues: tuple[str, ...] = ("default",)) -> Job:
    """Claim the job of ``task`` and make it dead (Fail raised)."""
    job = take(backend, worker, task, queues)
    fatal = decision_for(backend, job, Outcome.ERROR, fatal=True)
    backend.fail(job.id, job.fence, Outcome.ERROR, "Fail: no", fatal)
    assert state(backend, job) == State.DEAD
    return job


def kinds(backend: Any, job: Job) -> list[str]:
    """The kinds of the job's events, read to the last (a big group's are many)."""
    found: list[str] = []
    after = None
    while events := backend.read_events(None, after, 1000):
        found += [e.kind for e in events if e.job_id == job.id]
        after = events[-1].id
    return found


# -- the graph ------------------------------------------------------------------


def test_a_chain__runs_each_step_after_the_previous_completed(backend: Any, worker: str) -> None:
    wf, jobs = run(backend, chain(step("a"), step("b"), step("c")))
    a, b, c = jobs["a"], jobs["b"], jobs["c"]
    assert (a.state, b.state, c.state) == (State.QUEUED, State.WAITING, State.WAITING)
    assert {j.workflow for j in jobs.values()} == {wf.id}
    assert (a.upstream, b.upstream, c.upstream) == ((), (a.id,), (b.id,))
    assert nonzero_counts(backend) == {State.QUEUED: 1, State.WAITING: 2}
    finish(backend, worker, "a")
    assert (state(backend, b), state(backend, c)) == (State.QUEUED, State.WAITING)
    finish(backend, worker, "b")
    assert state(backend, c) == State.QUEUED
    assert backend.get_workflow(wf.id).state == WorkflowState.RUNNING
    finish(backend, worker, "c")
    done = backend.get_workflow(wf.id)
    assert done.state == WorkflowState.COMPLETED
    assert done.finished_at is not None
    assert done.sinks == (c.id,) and not done.many
    assert [j.id for j in done.jobs] == [a.id, b.id, c.id]
    assert "ready" in kinds(backend, b)
    assert EventKind.WORKFLOW_ENDED in kinds(backend, c)


def test_a_group_then_a_step__is_a_fan_in_released_by_the_last_completion(
    backend: Any, worker: str
) -> None:
    wf, jobs = run(backend, chain(group(step("a"), step("b"), step("c")), step("d")))
    d = jobs["d"]
    assert d.upstream == (jobs["a"].id, jobs["b"].id, jobs["c"].id)
    claimed = backend.claim(worker, ["default"], 10)
    assert sorted(j.task for j in claimed) == ["a", "b", "c"]
    for job in claimed[:2]:
        backend.complete(job.id, job.fence, job.task)
        assert state(backend, d) == State.WAITING
    backend.complete(claimed[2].id, claimed[2].fence, claimed[2].task)
    assert state(backend, d) == State.QUEUED
    finish(backend, worker, "d")
    assert backend.get_workflow(wf.id).state == WorkflowState.COMPLETED


def test_a_step_then_a_group__fans_out_and_the_result_is_the_groups(
    backend: Any, worker: str
) -> None:
    wf, jobs = run(backend, chain(step("a"), group(step("b"), step("c"))))
    assert wf.many and backend.get_workflow(wf.id).many
    assert backend.get_workflow(wf.id).sinks == (jobs["b"].id, jobs["c"].id)
    finish(backend, worker, "a")
    claimed = backend.claim(worker, ["default"], 10)
    assert sorted(j.task for j in claimed) == ["b", "c"]
    assert all(j.upstream == (jobs["a"].id,) for j in claimed)


def test_nested_flows__wait_for_the_last_step_of_each_branch(backend: Any, worker: str) -> None:
    _, jobs = run(backend, chain(group(chain(step("a"), step("b")), step("c")), step("d")))
    assert jobs["d"].upstream == (jobs["b"].id, jobs["c"].id)
    assert jobs["b"].upstream == (jobs["a"].id,)
    assert {jobs["a"].state, jobs["c"].state} == {State.QUEUED}


def test_steps_on_other_queues__are_released_there(backend: Any) -> None:
    worker = register(backend, "worker-1", ("default", "slow"))
    wf, jobs = run(backend, chain(step("a"), step("b", "slow"), step("c")))
    finish(backend, worker, "a")
    assert state(backend, jobs["b"]) == State.QUEUED
    finish(backend, worker, "b", ("slow",))
    assert state(backend, jobs["c"]) == State.QUEUED
    finish(backend, worker, "c")
    assert backend.get_workflow(wf.id).state == WorkflowState.COMPLETED


def test_a_steps_delay__counts_from_its_release(backend: Any, worker: str) -> None:
    _, jobs = run(backend, chain(step("a"), step("b", delay=60)))
    finish(backend, worker, "a")
    b = backend.get(jobs["b"].id)
    assert b.state == State.SCHEDULED
    assert b.run_at >= time.time() + 50


def test_a_stale_attempt__releases_nothing(backend: Any, worker: str) -> None:
    _, jobs = run(backend, chain(step("a"), step("b")))
    first = take(backend, worker, "a")
    retry = decision_for(backend, first, Outcome.ERROR, retry_in=0)  # queued again at once
    backend.fail(first.id, first.fence, Outcome.ERROR, "boom", retry)
    second = take(backend, worker, "a")
    with pytest.raises(LeaseLost):
        backend.complete(first.id, first.fence, "stale")
    assert backend.complete_many([(first.id, first.fence, b'"stale"')]) == {(first.id, first.fence)}
    assert state(backend, jobs["b"]) == State.WAITING
    backend.complete(second.id, second.fence, "fresh")
    assert state(backend, jobs["b"]) == State.QUEUED


def test_complete_many_and_complete_and_claim__release_too(backend: Any, worker: str) -> None:
    _, jobs = run(backend, chain(group(step("a"), step("b")), step("c"), step("d")))
    claimed = backend.claim(worker, ["default"], 10)
    lost, _ = backend.complete_and_claim(
        [(j.id, j.fence, b"1") for j in claimed], worker, ["default"], 0
    )
    assert lost == set()
    c = take(backend, worker, "c")
    assert backend.complete_many([(c.id, c.fence, b"2")]) == set()
    assert state(backend, jobs["d"]) == State.QUEUED


def test_a_step_completed_by_another_backend_than_its_claimer__releases_too(
    backend: Any, worker: str, backend_url: str, open_killable: Callable[[str], Any]
) -> None:
    """A backend may complete a step it did not claim (PostgreSQL's cycle
    leaves out the parts that release steps for jobs it claimed plain)."""
    _, jobs = run(backend, chain(step("a"), step("b")))
    a = take(backend, worker, "a")
    plain = enqueue_one(backend)
    other = open_killable(backend_url)
    register(other, "worker-2")
    [mine] = other.claim("worker-2", ["default"], 1)
    assert mine.id == plain.id
    lost, _ = other.complete_and_claim(
        [(mine.id, mine.fence, b"1"), (a.id, a.fence, b"2")], "worker-2", ["default"], 0
    )
    assert lost == set()
    assert state(backend, jobs["b"]) == State.QUEUED


def test_a_big_group__releases_its_callback_once(backend: Any, worker: str) -> None:
    n = 600
    _, jobs = run(backend, chain(group(*(step(f"s{i}") for i in range(n))), step("end")))
    end = jobs["end"]
    left = n
    while left:
        claimed = backend.claim(worker, ["default"], 100)
        assert state(backend, end) == State.WAITING
        assert backend.complete_many([(j.id, j.fence, b"1") for j in claimed]) == set()
        left -= len(claimed)
    assert state(backend, end) == State.QUEUED
    assert kinds(backend, end).count("ready") == 1


# -- failure --------------------------------------------------------------------


def test_a_dead_step__cancels_what_waits_on_it_and_fails_the_workflow(
    backend: Any, worker: str
) -> None:
    wf, jobs = run(backend, chain(step("a"), step("b"), step("c")))
    kill(backend, worker, "a")
    for name in "bc":
        job = backend.get(jobs[name].id)
        assert job.state == State.CANCELLED
        assert job.cancel_reason == CancelReason.UPSTREAM_FAILED
        assert job.finished_at is not None
    failed = backend.get_workflow(wf.id)
    assert failed.state == WorkflowState.FAILED
    assert failed.finished_at is not None
    assert backend.claim(worker, ["default"], 10) == []


def test_a_may_fail_step__lets_its_dependents_run(backend: Any, worker: str) -> None:
    wf, jobs = run(backend, chain(group(step("a", may_fail=True), step("b")), step("c")))
    assert jobs["a"].may_fail and not jobs["b"].may_fail
    claimed = {j.task: j for j in backend.claim(worker, ["default"], 10)}
    fatal = decision_for(backend, claimed["a"], Outcome.ERROR, fatal=True)
    backend.fail(claimed["a"].id, claimed["a"].fence, Outcome.ERROR, "Fail: no", fatal)
    backend.complete(claimed["b"].id, claimed["b"].fence, "b")
    assert state(backend, jobs["c"]) == State.QUEUED
    finish(backend, worker, "c")
    assert backend.get_workflow(wf.id).state == WorkflowState.COMPLETED


def test_a_step_dead_of_stalls__cancels_its_dependents(backend: Any) -> None:
    backend.set_policy("default", SHORT_LEASE.replace(max_stalls=1, max_attempts=5))
    worker = register(backend, "worker-1")
    wf, jobs = run(backend, chain(step("a"), step("b")))
    a = take(backend, worker, "a")
    assert rescue_until(backend, a.id).state == State.DEAD
    assert state(backend, jobs["b"]) == State.CANCELLED
    assert backend.get_workflow(wf.id).state == WorkflowState.FAILED


def test_a_dead_step_retried__resumes_its_workflow(backend: Any, worker: str) -> None:
    wf, jobs = run(backend, chain(step("a"), step("b"), step("c")))
    a = kill(backend, worker, "a")
    assert backend.retry_dead("default", [a.id]) == 1
    b = backend.get(jobs["b"].id)
    assert (b.state, b.cancel_reason, b.finished_at) == (State.WAITING, None, None)
    assert state(backend, jobs["c"]) == State.WAITING
    assert backend.get_workflow(wf.id).state == WorkflowState.RUNNING
    assert "waiting" in kinds(backend, b)
    finish(backend, worker, "a")
    finish(backend, worker, "b")
    finish(backend, worker, "c")
    assert backend.get_workflow(wf.id).state == WorkflowState.COMPLETED


def test_a_step_waiting_on_two_failed_steps__waits_again_only_when_both_are_retried(
    backend: Any, worker: str
) -> None:
    _, jobs = run(backend, chain(group(step("a"), step("b")), step("c")))
    claimed = {j.task: j for j in backend.claim(worker, ["default"], 10)}
    for job in claimed.values():
        fatal = decision_for(backend, job, Outcome.ERROR, fatal=True)
        backend.fail(job.id, job.fence, Outcome.ERROR, "Fail", fatal)
    assert state(backend, jobs["c"]) == State.CANCELLED
    backend.retry_dead("default", [claimed["a"].id])
    assert state(backend, jobs["c"]) == State.CANCELLED
    backend.retry_dead("default", [claimed["b"].id])
    assert state(backend, jobs["c"]) == State.WAITING


# -- cancel ---------------------------------------------------------------------


def test_cancelling_a_workflow__cancels_every_unfinished_step(backend: Any, worker: str) -> None:
    wf, jobs = run(backend, chain(group(step("a"), step("b")), step("c")))
    claimed = {j.task: j for j in backend.claim(worker, ["default"], 1)}
    [running] = claimed.values()
    cancelled = backend.cancel_workflow(wf.id)
    assert cancelled.state == WorkflowState.CANCELLED
    by_id = cancelled.by_id()
    assert by_id[running.id].state == State.ACTIVE and by_id[running.id].cancel_requested
    others = [j for j in jobs.values() if j.id != running.id]
    assert all(by_id[j.id].state == State.CANCELLED for j in others)
    assert backend.claim(worker, ["default"], 10) == []
    backend.complete(running.id, running.fence, "late")  # its attempt still ends
    assert backend.get_workflow(wf.id).state == WorkflowState.CANCELLED


def test_cancelling_a_waiting_step__cancels_what_waits_on_it(backend: Any, worker: str) -> None:
    wf, jobs = run(backend, chain(step("a"), step("b"), step("c")))
    b = backend.cancel(jobs["b"].id)
    assert (b.state, b.cancel_reason) == (State.CANCELLED, None)
    c = backend.get(jobs["c"].id)
    assert (c.state, c.cancel_reason) == (State.CANCELLED, CancelReason.UPSTREAM_FAILED)
    finish(backend, worker, "a")
    assert backend.get_workflow(wf.id).state == WorkflowState.FAILED


def test_an_unknown_workflow__is_not_found(backend: Any) -> None:
    with pytest.raises(JobNotFound):
        backend.get_workflow("wf-00000000-0000-7000-8000-000000000000")
    with pytest.raises(JobNotFound):
        backend.cancel_workflow("wf-00000000-0000-7000-8000-000000000000")


def test_a_finished_workflow__cannot_be_cancelled_but_says_so(backend: Any, worker: str) -> None:
    wf, _ = run(backend, chain(step("a")))
    finish(backend, worker, "a")
    assert backend.cancel_workflow(wf.id).state == WorkflowState.COMPLETED  # unchanged


# -- spawn ----------------------------------------------------------------------


def test_a_spawn__runs_at_once_and_what_waits_on_the_spawner_waits_on_it_too(
    backend: Any, worker: str
) -> None:
    wf, jobs = run(backend, chain(step("a"), step("b")))
    a = take(backend, worker, "a")
    extra = compile_flow(group(step("x"), step("y")))
    spawned = backend.spawn(a.id, a.fence, 1, extra)
    assert [j.task for j in spawned] == ["x", "y"]
    assert all(j.workflow == wf.id and j.state == State.QUEUED for j in spawned)
    x, y = spawned
    assert backend.get(jobs["b"].id).upstream == (a.id, x.id, y.id)
    assert backend.spawn(a.id, a.fence, 1, compile_flow(step("z"))) == spawned  # seq 1: made
    backend.complete(a.id, a.fence, "a")
    assert state(backend, jobs["b"]) == State.WAITING
    for job in backend.claim(worker, ["default"], 10):
        backend.complete(job.id, job.fence, job.task)
    assert state(backend, jobs["b"]) == State.QUEUED
    assert len(backend.get_workflow(wf.id).jobs) == 4


def test_a_second_spawn__comes_after_the_first_in_upstream(backend: Any, worker: str) -> None:
    _, jobs = run(backend, chain(group(step("a"), step("b")), step("c")))
    claimed = {j.task: j for j in backend.claim(worker, ["default"], 10)}
    a = claimed["a"]
    [x] = backend.spawn(a.id, a.fence, 1, compile_flow(step("x")))
    [y] = backend.spawn(a.id, a.fence, 2, compile_flow(chain(step("y1"), step("y2"))))
    y2 = next(j for j in backend.get_workflow(jobs["c"].workflow).jobs if j.task == "y2")
    assert y.task == "y1"
    assert backend.get(jobs["c"].id).upstream == (a.id, x.id, y2.id, claimed["b"].id)


def test_a_spawn_from_a_sink__adds_to_the_workflows_result(backend: Any, worker: str) -> None:
    wf, _jobs = run(backend, chain(step("a")))
    a = take(backend, worker, "a")
    [x] = backend.spawn(a.id, a.fence, 1, compile_flow(step("x")))
    backend.complete(a.id, a.fence, "a")
    running = backend.get_workflow(wf.id)
    assert running.state == WorkflowState.RUNNING
    assert running.sinks == (a.id, x.id)
    finish(backend, worker, "x")
    assert backend.get_workflow(wf.id).state == WorkflowState.COMPLETED


def test_a_stale_spawn__is_refused_and_a_plain_jobs_too(backend: Any, worker: str) -> None:
    run(backend, chain(step("a"), step("b")))
    first = take(backend, worker, "a")
    again = decision_for(backend, first, retry_in=0)  # queued again at once
    backend.fail(first.id, first.fence, Outcome.ERROR, "x", again)
    take(backend, worker, "a")
    with pytest.raises(LeaseLost):
        backend.spawn(first.id, first.fence, 1, compile_flow(step("x")))
    plain = enqueue_one(backend, "plain")
    claimed = take(backend, worker, "plain")
    assert claimed.id == plain.id
    with pytest.raises(InvalidInput):
        backend.spawn(plain.id, claimed.fence, 1, compile_flow(step("x")))
    assert all(j.task != "x" for j in backend.list(limit=100).jobs)


# -- storing --------------------------------------------------------------------


def test_a_workflow_key__makes_it_idempotent_while_it_runs(backend: Any, worker: str) -> None:
    first, _ = run(backend, chain(step("a"), step("b")), key="nightly")
    again = backend.enqueue_workflow(compile_flow(chain(step("a"), step("b")), key="nightly"))
    assert again.id == first.id
    assert nonzero_counts(backend) == {State.QUEUED: 1, State.WAITING: 1}
    finish(backend, worker, "a")
    finish(backend, worker, "b")
    third = backend.enqueue_workflow(compile_flow(chain(step("a")), key="nightly"))
    assert third.id != first.id


def test_get_many__returns_the_jobs_in_the_order_asked_skipping_unknown_ones(
    backend: Any,
) -> None:
    a = enqueue_one(backend, "a")
    b = enqueue_one(backend, "b", queue="other")
    unknown = "00000000-0000-7000-8000-000000000000"
    assert [j.id for j in backend.get_many([b.id, unknown, a.id])] == [b.id, a.id]
    assert backend.get_many([]) == []


def test_a_bad_graph__stores_nothing(backend: Any) -> None:
    good = compile_flow(chain(step("a"), step("b")))
    bad = WorkflowSpec(good.id, None, good.steps, (5,), False)
    with pytest.raises(InvalidInput):
        backend.enqueue_workflow(bad)
    assert nonzero_counts(backend) == {}


def test_retention__prunes_a_finished_workflow_with_its_last_job(backend: Any, worker: str) -> None:
    from tests.conformance.aging import age

    backend.set_policy("default", QueuePolicy(keep_completed=60.0))
    wf, jobs = run(backend, chain(step("a"), step("b")))
    finish(backend, worker, "a")
    finish(backend, worker, "b")
    age(backend, [j.id for j in jobs.values()], 120.0)
    assert backend.prune(100) == 2
    with pytest.raises(JobNotFound):
        backend.get_workflow(wf.id)


def _bad_graphs(stored: Job) -> list[WorkflowSpec]:
    """Graphs that name steps wrongly, or reuse ids (``stored``: a job's)."""
    good = compile_flow(chain(step("a"), step("b")))
    a, b = good.steps
    later = dataclasses.replace(a, upstream=(1,))  # waits for a step after it
    itself = dataclasses.replace(b, upstream=(1,))
    twice = dataclasses.replace(b, upstream=(0, 0))
    same_id = dataclasses.replace(b, spec=dataclasses.replace(b.spec, id=a.spec.id))
    taken = dataclasses.replace(b, spec=dataclasses.replace(b.spec, id=stored.id))
    return [
        WorkflowSpec(good.id, None, (later, b), (1,), False),
        WorkflowSpec(good.id, None, (a, itself), (1,), False),
        WorkflowSpec(good.id, None, (a, twice), (1,), False),
        WorkflowSpec(good.id, None, (a, same_id), (1,), False),
        WorkflowSpec(good.id, None, (a, taken), (1,), False),
        WorkflowSpec(good.id, None, (a, b), (), False),
        WorkflowSpec(good.id, None, (a, b), (1, 1), False),
        WorkflowSpec(good.id, None, (), (), False),
    ]


def test_bad_graphs_and_reused_ids__are_invalid_and_store_nothing(backend: Any) -> None:
    stored = enqueue_one(backend, "plain")
    for bad in _bad_graphs(stored):
        with pytest.raises(InvalidInput):
            backend.enqueue_workflow(bad)
    assert nonzero_counts(backend) == {State.QUEUED: 1}
    first, _ = run(backend, chain(step("a")))
    with pytest.raises(InvalidInput):  # its id again, with fresh steps
        backend.enqueue_workflow(compile_flow(chain(step("b")), workflow_id=first.id))
    assert nonzero_counts(backend) == {State.QUEUED: 2}


def test_an_active_step_cancelled__cancels_what_waits_on_it_when_its_attempt_ends(
    backend: Any, worker: str
) -> None:
    wf, jobs = run(backend, chain(step("a"), step("b")))
    a = take(backend, worker, "a")
    assert backend.cancel(a.id).cancel_requested
    assert state(backend, jobs["b"]) == State.WAITING  # a still runs
    backend.fail(a.id, a.fence, Outcome.ERROR, "stopped", decision_for(backend, a, retry_in=0))
    b = backend.get(jobs["b"].id)
    assert (state(backend, a), b.state) == (State.CANCELLED, State.CANCELLED)
    assert b.cancel_reason == CancelReason.UPSTREAM_FAILED
    assert backend.get_workflow(wf.id).state == WorkflowState.FAILED


def test_purging_or_deleting_steps__leaves_the_rest_of_the_workflow_readable(
    backend: Any,
) -> None:
    worker = register(backend, "worker-1", ("default", "other"))
    wf, jobs = run(backend, chain(step("a"), group(step("b"), step("c", "other"))))
    kill(backend, worker, "a")
    assert backend.purge_dead("default", [jobs["a"].id]) == 1
    assert backend.delete_queue("other") == 1
    left = backend.get_workflow(wf.id)
    assert [j.id for j in left.jobs] == [jobs["b"].id]
    assert backend.cancel_workflow(wf.id).id == wf.id


def test_cancelling_a_failed_workflow__ends_it_cancelled_and_a_retry_resumes_nothing(
    backend: Any, worker: str
) -> None:
    wf, jobs = run(backend, chain(group(step("a"), step("b")), step("c")))
    claimed = {j.task: j for j in backend.claim(worker, ["default"], 10)}
    fatal = decision_for(backend, claimed["a"], Outcome.ERROR, fatal=True)
    backend.fail(claimed["a"].id, claimed["a"].fence, Outcome.ERROR, "Fail", fatal)
    assert backend.get_workflow(wf.id).state == WorkflowState.FAILED
    cancelled = backend.cancel_workflow(wf.id)
    assert cancelled.state == WorkflowState.CANCELLED
    assert cancelled.by_id()[claimed["b"].id].cancel_requested
    backend.retry_dead("default", [claimed["a"].id])
    assert state(backend, jobs["c"]) == State.CANCELLED
    assert backend.get_workflow(wf.id).state == WorkflowState.CANCELLED


def test_workflow_counts__follow_each_workflow_to_its_end(backend: Any, worker: str) -> None:
    run(backend, chain(step("a"), step("b", "other")))
    run(backend, chain(step("x", "third")))
    gone, _ = run(backend, chain(step("y", "other")))
    assert backend.workflow_counts() == {
        WorkflowState.RUNNING: 3,
        WorkflowState.COMPLETED: 0,
        WorkflowState.FAILED: 0,
        WorkflowState.CANCELLED: 0,
    }
    other = register(backend, "worker-2", ("other", "third"))
    finish(backend, worker, "a")
    kill(backend, other, "x", ("third",))
    backend.cancel_workflow(gone.id)
    finish(backend, other, "b", ("other",))
    assert backend.workflow_counts() == {
        WorkflowState.RUNNING: 0,
        WorkflowState.COMPLETED: 1,
        WorkflowState.FAILED: 1,
        WorkflowState.CANCELLED: 1,
    }
