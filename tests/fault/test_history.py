"""The history checker on small made-up histories: each must-be-zero row
fires on the fault it names, and stays zero on a healthy history (a checker
that cannot fail proves nothing)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from tenure.core.states import DeadReason, Outcome, State
from tenure.core.workflows import CancelReason, Workflow, WorkflowState
from tenure.job import Attempt, Job
from tests.fault import flow_history as fh
from tests.fault import history as h

W1, W2 = "host.101.aaaa", "host.202.bbbb"  # worker ids: host.pid.random
T0 = 1_000.0  # wall; monotonic times below are wall - T0


def attempt(fence: int, worker: str, start: float, end: float | None, outcome: str | None):
    return Attempt(fence, fence, worker, T0 + start, None if end is None else T0 + end,
                   None if outcome is None else Outcome(outcome))  # fmt: skip


def job(job_id: str, *attempts: Attempt, kind: str = "ok", queue: str = "q", **kw: Any) -> Job:
    done = attempts[-1].outcome is Outcome.COMPLETED if attempts else False
    fields: dict[str, Any] = {
        "id": job_id, "task": "soak.run", "queue": queue, "args": {"tag": job_id, "kind": kind},
        "state": State.COMPLETED if done else State.QUEUED, "priority": 0, "run_at": T0,
        "created_at": T0, "history": attempts, "fence": attempts[-1].fence if attempts else 0,
        "result": {"fence": attempts[-1].fence} if done else None,
        "finished_at": attempts[-1].ended_at if done else None,
    }  # fmt: skip
    fields.update(kw)
    return Job(**fields)


def run_of(*execs: tuple[str, int, int, float, float | None], **kw: Any) -> h.Run:
    """A run whose handlers ran ``(job, fence, pid, start, end)`` (end None: killed)."""
    events = []
    for job_id, fence, pid, start, end in execs:
        events.append(h.Event("start", job_id, fence, pid, start, tag=job_id))
        if end is not None:
            events.append(h.Event("end", job_id, fence, pid, end, tag=job_id, how="ok"))
    tags = {e.job for e in events} | set(kw.pop("more", ()))
    requests = [h.Request(t, "ok", "q", t, called_mono=0.0, acked_wall=T0) for t in sorted(tags)]
    return h.Run(requests=requests, events=events, deliveries={"q": "at-least-once"}, **kw)


def failed(report: h.Report) -> dict[str, float]:
    return {r.name: r.value for r in report.violations()}


def test_a_healthy_history__has_every_must_be_zero_row_at_zero():
    run = run_of(("a", 1, 11, 0.0, 0.5), ("b", 1, 22, 0.1, 0.3))
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.6, "completed")),
            "b": job("b", attempt(1, W2, 0.1, 0.4, "completed"))}  # fmt: skip
    report = h.check(run, jobs)
    assert failed(report) == {}
    assert report.as_dict()["completed"] == 2
    assert set(h.MUST_BE_ZERO) <= set(report.as_dict())


def test_an_acknowledged_job_missing_from_storage__is_lost():
    run = run_of(("a", 1, 11, 0.0, 0.5), more=["gone"])
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.6, "completed"))}
    assert failed(h.check(run, jobs)) == {h.LOST: 1}


def test_two_completed_attempts__are_a_duplicate_completion():
    run = run_of(("a", 1, 11, 0.0, 0.5), ("a", 2, 22, 1.0, 1.5))
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.6, "completed"),
                     attempt(2, W2, 1.0, 1.6, "completed"))}  # fmt: skip
    assert failed(h.check(run, jobs)) == {h.DUPLICATE: 1, h.REDELIVERED: 1}


def test_a_crashed_attempt_without_a_fault__is_a_healthy_attempt_recorded_crashed():
    run = run_of(("a", 1, 11, 0.0, None), ("a", 2, 22, 1.0, 1.5))
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.8, "crashed"),
                     attempt(2, W2, 1.0, 1.6, "completed"))}  # fmt: skip
    assert failed(h.check(run, jobs)) == {h.HEALTHY: 1}


def test_a_crashed_attempt_of_a_killed_worker__is_explained_and_timed():
    run = run_of(("a", 1, 11, 0.0, None), ("a", 2, 22, 1.0, 1.5),
                 faults=[h.Fault("kill-worker", T0 + 0.5, T0 + 0.5, worker_pid=101)])  # fmt: skip
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.8, "crashed"),
                     attempt(2, W2, 1.0, 1.6, "completed"))}  # fmt: skip
    report = h.check(run, jobs)
    assert failed(report) == {}
    assert abs(report.as_dict()["  recovery after kill-worker, max"] - 0.3) < 1e-6


def test_a_crash_recorded_long_after_its_workers_kill__is_not_explained_by_it():
    run = run_of(("a", 1, 11, 0.0, None), ("a", 2, 22, 31.0, 31.5),
                 faults=[h.Fault("kill-worker", T0 + 0.5, T0 + 0.5, worker_pid=101)])  # fmt: skip
    jobs = {"a": job("a", attempt(1, W1, 0.0, 30.0, "crashed"),
                     attempt(2, W2, 31.0, 31.6, "completed"))}  # fmt: skip
    assert failed(h.check(run, jobs)) == {h.HEALTHY: 1}


def test_a_kill_just_after_the_recorded_crash__explains_it_as_storage_stamps_early():
    # PostgreSQL stamps the recovery with its transaction's start, before the kill it saw.
    run = run_of(("a", 1, 11, 0.0, None), ("a", 2, 22, 1.0, 1.5),
                 faults=[h.Fault("kill-worker", T0 + 0.9, T0 + 0.9, worker_pid=101)])  # fmt: skip
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.4, "crashed"),
                     attempt(2, W2, 1.0, 1.6, "completed"))}  # fmt: skip
    assert failed(h.check(run, jobs)) == {}


def test_a_claim_landing_just_after_its_worker_was_killed__is_explained_by_the_kill():
    run = run_of(faults=[h.Fault("kill-worker", T0 + 0.5, T0 + 0.5, worker_pid=101)], more=["a"])
    jobs = {"a": job("a", attempt(1, W1, 0.7, 0.9, "crashed"), state=State.DEAD,
                     dead_reason=DeadReason.CRASHED)}  # fmt: skip
    assert failed(h.check(run, jobs)) == {}


def test_a_kill_of_another_worker__explains_nothing():
    run = run_of(("a", 1, 11, 0.0, None), ("a", 2, 22, 1.0, 1.5),
                 faults=[h.Fault("kill-worker", T0 + 0.5, T0 + 0.5, worker_pid=202)])  # fmt: skip
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.8, "crashed"),
                     attempt(2, W2, 1.0, 1.6, "completed"))}  # fmt: skip
    assert failed(h.check(run, jobs)) == {h.HEALTHY: 1}


def test_an_attempt_claimed_after_a_server_restart_and_recorded_crashed__is_flagged():
    server = h.Fault("kill-server", T0 + 0.5, T0 + 1.5)
    run = run_of(("a", 1, 11, 0.0, None), ("b", 1, 11, 2.0, 2.4), ("b", 2, 22, 3.0, 3.2),
                 faults=[server])  # fmt: skip
    jobs = {
        # in flight at the kill: explained
        "a": job(
            "a",
            attempt(1, W1, 0.0, 2.0, "crashed"),
            state=State.DEAD,
            dead_reason=DeadReason.CRASHED,
        ),
        "b": job("b", attempt(1, W1, 2.0, 2.5, "crashed"), attempt(2, W2, 3.0, 3.3, "completed")),
    }
    report = h.check(run, jobs)
    assert failed(report) == {h.HEALTHY: 1}
    [row] = [r for r in report.rows if r.name == h.HEALTHY]
    assert row.examples[0].startswith("b:")


def test_an_overlap_after_a_long_stop__is_explained_but_not_after_a_short_one():
    execs = [("a", 1, 11, 0.0, 4.0), ("a", 2, 22, 3.0, 3.5)]
    jobs = {"a": job("a", attempt(1, W1, 0.0, 2.9, "stalled"),
                     attempt(2, W2, 3.0, 3.6, "completed"))}  # fmt: skip
    for kind, want in (("stop-long", {}), ("stop-short", {h.HEALTHY: 1, h.OVERLAP: 1})):
        stop = h.Fault(kind, T0 + 0.5, T0 + 3.8, worker_pid=101, pids=(101, 11))
        assert failed(h.check(run_of(*execs, faults=[stop]), jobs)) == want, kind


def test_an_attempt_settled_long_after_its_handler_returned__is_flagged():
    run = run_of(("a", 1, 11, 0.0, 1.0), ("a", 2, 22, 0.5, 0.9), wall_minus_mono=T0)
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.4, "stalled"), attempt(2, W1, 0.5, 30.0,
                                                                     "released"),
                     attempt(3, W2, 31.0, 31.5, "completed"))}  # fmt: skip
    run.events.append(h.Event("start", "a", 3, 33, 31.0, tag="a"))
    run.events.append(h.Event("end", "a", 3, 33, 31.4, tag="a", how="ok"))
    stop = h.Fault("stop-long", T0 - 0.1, T0 + 0.45, worker_pid=101, pids=(101, 11))
    run.faults.append(stop)
    assert failed(h.check(run, jobs)) == {h.SETTLE_LAG: 1}


def test_a_result_of_another_fence__is_a_stale_settle_accepted():
    run = run_of(("a", 1, 11, 0.0, 0.5))
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.6, "completed"), result={"fence": 7})}
    assert failed(h.check(run, jobs)) == {h.STALE: 1}


def test_a_completion_whose_handler_ended_after_a_later_fence_started__is_stale():
    run = run_of(("a", 1, 11, 0.0, 2.0), ("a", 2, 22, 1.0, 1.2))
    jobs = {"a": job("a", attempt(2, W2, 1.0, 1.3, "error"), attempt(1, W1, 0.0, 2.1, "completed"),
                     fence=1)}  # fmt: skip
    assert h.STALE in failed(h.check(run, jobs))


def test_a_fence_started_by_two_handlers__is_flagged():
    run = run_of(("a", 1, 11, 0.0, 0.5), ("a", 1, 22, 0.1, 0.4))
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.6, "completed"))}
    assert failed(h.check(run, jobs)) == {h.SAME_FENCE: 1}


def test_an_at_most_once_job_started_twice__is_flagged():
    run = run_of(("a", 1, 11, 0.0, None), ("a", 2, 22, 1.0, 1.5),
                 faults=[h.Fault("kill-worker", T0 + 0.5, T0 + 0.5, worker_pid=101)])  # fmt: skip
    run.deliveries = {"q": "at-most-once"}
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.8, "crashed"),
                     attempt(2, W2, 1.0, 1.6, "completed"))}  # fmt: skip
    assert failed(h.check(run, jobs)) == {h.AMO_TWICE: 1}


def test_an_at_most_once_job_handed_back_unbegun_by_a_drain__then_run__is_no_double_start():
    run = run_of(("a", 2, 22, 1.0, 1.5),
                 faults=[h.Fault("term", T0 + 0.2, T0 + 0.6, worker_pid=101)])  # fmt: skip
    run.deliveries = {"q": "at-most-once"}
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.5, "released"),
                     attempt(2, W2, 1.0, 1.6, "completed"))}  # fmt: skip
    assert failed(h.check(run, jobs)) == {}


def test_a_delayed_job_started_before_its_delay__is_flagged():
    run = run_of(("a", 1, 11, 0.5, 0.6))
    run.requests = [h.Request("a", "ok", "q", "a", called_mono=0.0, acked_wall=T0, delay=1.0)]
    jobs = {"a": job("a", attempt(1, W1, 0.5, 0.7, "completed"))}
    assert failed(h.check(run, jobs)) == {h.EARLY_START: 1}


def test_two_unfinished_jobs_with_one_key__are_a_key_duplicate():
    run = run_of(more=["a", "b"])
    jobs = {"a": job("a", key="k", created_at=T0), "b": job("b", key="k", created_at=T0 + 1)}
    assert failed(h.check(run, jobs)) == {h.KEY_DUPLICATE: 1, h.UNFINISHED: 2}


def test_a_fail_job_that_completed__ends_wrong_for_its_kind():
    run = run_of(("a", 1, 11, 0.0, 0.5))
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.6, "completed"), kind="fail")}
    assert failed(h.check(run, jobs)) == {h.WRONG_END: 1}
    dead = job("a", attempt(1, W1, 0.0, 0.6, "error"), kind="fail", state=State.DEAD,
               dead_reason=DeadReason.ERROR)  # fmt: skip
    assert failed(h.check(run, {"a": dead})) == {}


def test_a_completion_no_handler_returned__is_a_ghost():
    run = run_of(("a", 1, 11, 0.0, None))
    jobs = {"a": job("a", attempt(1, W1, 0.0, 0.6, "completed"))}
    assert failed(h.check(run, jobs)) == {h.GHOST: 1}


def test_a_run_directory__is_read_back_with_cut_lines_counted(tmp_path: Path):
    (tmp_path / "manifest.json").write_bytes(
        orjson.dumps({"url": "x", "deliveries": {"q": "at-least-once"}}))  # fmt: skip
    request = {"tag": "a", "kind": "ok", "queue": "q", "job_id": "a", "called_mono": 0.0}
    (tmp_path / "requests.jsonl").write_bytes(orjson.dumps(request) + b"\n")
    fault = {"kind": "kill-worker", "started": 1.0, "ended": 1.0, "worker_pid": 5, "pids": [5]}
    (tmp_path / "faults.jsonl").write_bytes(orjson.dumps(fault) + b"\n")
    event = {"ev": "start", "job": "a", "fence": 1, "pid": 9, "mono": 0.1, "tag": "a"}
    (tmp_path / "events.9.jsonl").write_bytes(orjson.dumps(event) + b'\n{"ev": "en')
    run = h.load(tmp_path)
    assert (len(run.requests), len(run.faults), len(run.events), run.unreadable) == (1, 1, 1, 1)
    assert run.faults[0].pids == (5,)


def test_what_storage_held__is_kept_and_read_back_unchanged(tmp_path: Path):
    jobs = {
        "a": job(
            "a", attempt(1, W1, 0.0, 0.6, "crashed"), attempt(2, W2, 1.0, 1.6, "completed"), key="k"
        )
    }
    h.dump_jobs(jobs, tmp_path / "jobs.jsonl")
    assert h.load_jobs(tmp_path / "jobs.jsonl") == jobs


# -- workflows: chain(h, group(m1, m2), c), c the fan-in callback -----------------

WF = "wf-1"
UPS = {"h": (), "m1": ("h",), "m2": ("h",), "c": ("m1", "m2")}
HEALTHY_FLOW = [("h", 1, 11, 0.0, 0.5), ("m1", 1, 11, 0.6, 1.0), ("m2", 1, 22, 0.6, 1.2),
                ("c", 1, 22, 1.3, 1.5)]  # fmt: skip


def step(job_id: str, *attempts: Attempt, **kw: Any) -> Job:
    return job(job_id, *attempts, workflow=WF, upstream=UPS[job_id], **kw)


def flow_jobs(**instead: Job) -> dict[str, Job]:
    """The steps as storage holds them after the healthy run, but ``instead``."""
    jobs = {j: step(j, attempt(1, W1 if pid == 11 else W2, start, end + 0.05, "completed"))
            for j, _, pid, start, end in HEALTHY_FLOW}  # fmt: skip
    return {**jobs, **instead}


def flow_check(execs: list[tuple[str, int, int, float, float | None]], jobs: dict[str, Job],
               state: str = "completed", *, fail: str | None = None,
               handed: list[int | None] | None = None, ran: bool = True,
               **kw: Any) -> h.Report:  # fmt: skip
    """Judge the run of ``execs`` whose workflow's record ended ``state``;
    ``fail``: a step of the group that fails for good, as asked; ``handed``:
    the fences the callback read of its upstream (unless it never ``ran``)."""
    run = run_of(*execs, more=jobs, wall_minus_mono=T0, **kw)
    asked = [fh.StepRequest(j, "fail" if j == fail else "ok", tuple(UPS.get(j, ("h",))),
                            fanin=j == "c") for j in jobs]  # fmt: skip
    run.workflows = [fh.WorkflowRequest(WF, 0.0, tuple(asked), T0)]
    run.handed = {("c", 1): [1, 1] if handed is None else handed} if ran else {}
    record = Workflow(WF, WorkflowState(state), T0, T0 + 2.0, None, False, ("c",))
    return h.check(run, jobs, {WF: record})


def test_a_healthy_workflow__has_every_workflow_row_at_zero():
    report = flow_check(HEALTHY_FLOW, flow_jobs())
    assert failed(report) == {}
    assert set(fh.WF_MUST_BE_ZERO) <= set(report.as_dict())
    assert report.as_dict()["  ended completed"] == 1
    assert report.as_dict()["workflow steps"] == 4


def test_a_step_started_before_its_upstream_returned__is_flagged():
    execs = [("h", 1, 11, 0.0, 0.5), ("m1", 1, 11, 0.3, 1.0), *HEALTHY_FLOW[2:]]
    jobs = flow_jobs(m1=step("m1", attempt(1, W1, 0.3, 1.05, "completed")))
    report = flow_check(execs, jobs)
    assert failed(report) == {fh.WF_EARLY: 1}
    assert "before upstream h ended" in report.violations()[0].examples[0]


def test_a_failed_step__cancels_the_callback_and_fails_the_workflow_and_that_is_clean():
    execs = [*HEALTHY_FLOW[:2], ("m2", 1, 22, 0.6, None)]
    dead = step("m2", attempt(1, W2, 0.6, 0.7, "error"), state=State.DEAD,
                dead_reason=DeadReason.ERROR, kind="fail")  # fmt: skip
    cancelled = step("c", state=State.CANCELLED, cancel_reason=CancelReason.UPSTREAM_FAILED)
    report = flow_check(execs, flow_jobs(m2=dead, c=cancelled), "failed", fail="m2", ran=False)
    assert failed(report) == {}
    assert report.as_dict()["  ended failed"] == 1
    assert report.as_dict()["  cancelled, upstream failed"] == 1


def test_a_callback_started_though_a_step_it_waits_on_failed__is_flagged():
    dead = step("m2", attempt(1, W2, 0.6, 0.7, "error"), state=State.DEAD,
                dead_reason=DeadReason.ERROR, kind="fail")  # fmt: skip
    execs = [*HEALTHY_FLOW[:2], ("m2", 1, 22, 0.6, None), HEALTHY_FLOW[3]]
    report = flow_check(execs, flow_jobs(m2=dead), "failed", fail="m2", handed=[1, None])
    # and the workflow's record says failed while its last step completed
    assert failed(report) == {fh.WF_EARLY: 1, fh.WF_WRONG: 1}


def test_a_may_fail_step_that_died__lets_the_callback_run_with_a_failed_value():
    dead = step("m2", attempt(1, W2, 0.6, 0.7, "error"), state=State.DEAD,
                dead_reason=DeadReason.ERROR, may_fail=True, finished_at=T0 + 0.7,
                kind="fail")  # fmt: skip
    execs = [*HEALTHY_FLOW[:2], ("m2", 1, 22, 0.6, None), HEALTHY_FLOW[3]]
    assert failed(flow_check(execs, flow_jobs(m2=dead), handed=[1, None])) == {}
    assert failed(flow_check(execs, flow_jobs(m2=dead), handed=[1, 1])) == {fh.WF_UPSTREAM: 1}
    early = [*HEALTHY_FLOW[:2], ("m2", 1, 22, 0.6, None), ("c", 1, 22, 0.4, 0.5)]
    assert fh.WF_EARLY in failed(flow_check(early, flow_jobs(m2=dead), handed=[1, None]))


def test_a_step_whose_handler_returned_twice__completed_twice_unless_a_fault_explains_it():
    execs = [*HEALTHY_FLOW, ("m1", 2, 22, 1.1, 1.2)]
    twice = step("m1", attempt(1, W1, 0.6, 1.05, "released"),
                 attempt(2, W2, 1.1, 1.25, "completed"))  # fmt: skip
    jobs = flow_jobs(m1=twice)
    assert failed(flow_check(execs, jobs, handed=[2, 1])) == {fh.WF_TWICE: 1}
    term = h.Fault("term", T0 + 0.9, T0 + 1.02, worker_pid=101)
    assert failed(flow_check(execs, jobs, handed=[2, 1], faults=[term])) == {}


def test_two_completed_attempts_of_a_step__are_a_step_completed_twice():
    execs = [*HEALTHY_FLOW, ("m1", 2, 22, 1.1, 1.2)]
    twice = step("m1", attempt(1, W1, 0.6, 1.05, "completed"),
                 attempt(2, W2, 1.1, 1.25, "completed"))  # fmt: skip
    report = flow_check(execs, flow_jobs(m1=twice), handed=[2, 1])
    assert failed(report) == {h.DUPLICATE: 1, h.REDELIVERED: 1, fh.WF_TWICE: 1}


def test_a_workflow_left_running_or_missing__is_stuck():
    waiting = step("c", state=State.WAITING)
    report = flow_check(HEALTHY_FLOW[:3], flow_jobs(c=waiting), "running", ran=False)
    assert failed(report) == {fh.WF_STUCK: 1, h.UNFINISHED: 1}
    run = run_of(*HEALTHY_FLOW)
    run.workflows = [fh.WorkflowRequest(WF, 0.0, (fh.StepRequest("h", "ok"),), T0)]
    assert failed(h.check(run, flow_jobs(), {})) == {fh.WF_STUCK: 1}


def test_a_fan_in_started_twice__is_flagged_unless_a_fault_explains_the_first():
    execs = [*HEALTHY_FLOW[:3], ("c", 1, 11, 1.3, None), ("c", 2, 22, 2.0, 2.1)]
    again = step("c", attempt(1, W1, 1.3, 1.9, "crashed"), attempt(2, W2, 2.0, 2.15, "completed"))
    report = flow_check(execs, flow_jobs(c=again))
    assert failed(report) == {h.HEALTHY: 1, fh.WF_FANIN: 1}
    kill = h.Fault("kill-worker", T0 + 1.4, T0 + 1.4, worker_pid=101)
    assert failed(flow_check(execs, flow_jobs(c=again), faults=[kill])) == {}


def test_a_workflow_ended_other_than_its_steps__is_flagged():
    assert failed(flow_check(HEALTHY_FLOW, flow_jobs(), "failed")) == {fh.WF_WRONG: 1}
    cancelled = step("c", state=State.CANCELLED, cancel_reason=CancelReason.UPSTREAM_FAILED)
    report = flow_check(HEALTHY_FLOW[:3], flow_jobs(c=cancelled), "failed", ran=False)
    assert failed(report) == {fh.WF_WRONG: 1}  # cancelled, though no upstream failed
    meant = flow_check(HEALTHY_FLOW, flow_jobs(), fail="m2")
    assert failed(meant) == {fh.WF_WRONG: 1}


def test_a_step_stored_waiting_on_other_steps_than_asked__is_flagged():
    jobs = flow_jobs(c=job("c", attempt(1, W2, 1.3, 1.55, "completed"), workflow=WF,
                           upstream=("m2", "m1")))  # fmt: skip
    assert failed(flow_check(HEALTHY_FLOW, jobs, handed=[1, 1])) == {fh.WF_UPSTREAM: 1}


def test_workflows_and_what_the_fan_in_was_handed__are_read_back(tmp_path: Path):
    (tmp_path / "manifest.json").write_bytes(orjson.dumps({"url": "x", "deliveries": {}}))
    asked = fh.WorkflowRequest(
        WF, 0.5, (fh.StepRequest("h", "ok"), fh.StepRequest("c", "ok", ("h",), fanin=True)), T0
    )
    (tmp_path / "workflows.jsonl").write_bytes(orjson.dumps(asdict(asked)) + b"\n")
    line = {"ev": "upstream", "job": "c", "fence": 2, "pid": 9, "mono": 0.1, "fences": [1, None]}
    (tmp_path / "events.9.jsonl").write_bytes(orjson.dumps(line) + b"\n")
    cancel = fh.CancelRequest(WF, 0.9, None)
    (tmp_path / "cancels.jsonl").write_bytes(orjson.dumps(asdict(cancel)) + b"\n")
    run = h.load(tmp_path)
    assert (run.workflows, run.cancels) == ([asked], [cancel])
    assert run.handed == {("c", 2): [1, None]}
    record = Workflow(WF, WorkflowState.FAILED, T0, T0 + 1, None, True, ("c",))
    fh.dump_workflows({WF: record}, tmp_path / "w.jsonl")
    assert fh.load_workflows(tmp_path / "w.jsonl") == {WF: record}
    cancelled = step("c", state=State.CANCELLED, cancel_reason=CancelReason.UPSTREAM_FAILED)
    h.dump_jobs({"c": cancelled}, tmp_path / "jobs.jsonl")
    assert h.load_jobs(tmp_path / "jobs.jsonl") == {"c": cancelled}


def test_a_workflow_cancelled_when_asked__is_clean_and_not_when_nobody_asked():
    execs = [HEALTHY_FLOW[0], ("m1", 1, 11, 0.6, None)]
    jobs = flow_jobs(
        m1=step("m1", attempt(1, W1, 0.6, 0.9, "cancelled"), state=State.CANCELLED),
        m2=step("m2", state=State.CANCELLED),
        c=step("c", state=State.CANCELLED),
    )
    asked = [fh.CancelRequest(WF, 0.7, "cancelled")]
    report = flow_check(execs, jobs, "cancelled", ran=False, cancels=asked)
    assert failed(report) == {}
    assert report.as_dict()["  ended cancelled"] == 1
    # the record and each of the three steps cancelled by hand
    assert failed(flow_check(execs, jobs, "cancelled", ran=False)) == {fh.WF_WRONG: 4}


def test_a_workflow_that_ended_otherwise_after_a_cancel_answered_cancelled__is_flagged():
    asked = [fh.CancelRequest(WF, 1.4, "cancelled")]
    assert failed(flow_check(HEALTHY_FLOW, flow_jobs(), cancels=asked)) == {fh.WF_WRONG: 1}
    late = [fh.CancelRequest(WF, 1.6, "completed")]  # it had ended: the cancel changed nothing
    assert failed(flow_check(HEALTHY_FLOW, flow_jobs(), cancels=late)) == {}
