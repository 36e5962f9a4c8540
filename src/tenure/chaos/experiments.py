"""The experiments: each breaks real worker processes with real signals and
reads from storage what became of the jobs.

Every experiment returns a :class:`Report`: figures beside their targets, and
the guarantees it saw broken (nothing lost, no stale settle, no extra start).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenure.chaos.gil import regex_size_for
from tenure.chaos.lab import ExperimentFailed, Lab, process_gone
from tenure.core.states import Outcome, State


@dataclass(frozen=True)
class Figure:
    """One measured figure of an experiment, against its target."""

    name: str
    value: float
    target: str
    ok: bool
    unit: str = "s"


@dataclass
class Report:
    """What one experiment measured, and the guarantees it saw broken."""

    experiment: str
    figures: list[Figure] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations and all(f.ok for f in self.figures)

    def check(self, condition: bool, violation: str) -> None:
        if not condition:
            self.violations.append(violation)

    def figure(self, name: str, value: float, limit: float, target: str, unit: str = "s") -> None:
        self.figures.append(Figure(name, value, target, value <= limit, unit))


def kill9(url: str, *, runs: int = 3, handler: float = 8.0, kill_after: float = 2.0) -> Report:
    """The published methodology: two workers, a long handler, SIGKILL of the
    worker holding it ``kill_after`` seconds in (plus a random fraction of the
    sweep interval, so that the figures do not depend on a lucky phase).
    Recovery is read from storage."""
    report = Report("kill9")
    runs_ = [_kill9_once(url, report, handler, kill_after) for _ in range(runs)]
    recovered, restarted = [r for r, _ in runs_], [r for _, r in runs_]
    report.figure("recovery after kill -9, median", statistics.median(recovered), 1.0, "< 1 s")
    report.figure("recovery after kill -9, max", max(recovered), 2.0, "< 2 s")
    report.figure("restart after kill -9, max", max(restarted), 3.0, "< 3 s")
    return report


def _kill9_once(url: str, report: Report, handler: float, kill_after: float) -> tuple[float, float]:
    with Lab(url, "kill9") as lab:
        lab.worker("--concurrency", "1")
        lab.worker("--concurrency", "1")
        job = lab.enqueue("chaos.sleep", seconds=handler)
        holder, executor_pid = lab.wait("the handler to start", lambda: lab.running_on(job.id))
        # A random phase within one sweep interval: recovery depends on it, so sample it.
        kill_at = lab.job(job.id).history[0].started_at + kill_after + random.uniform(0, 1.0)
        time.sleep(max(0.0, kill_at - time.time()))
        killed_at = time.time()
        os.kill(holder.pid, signal.SIGKILL)  # the supervisor only: its children must follow
        first = lab.wait("the job's recovery", lambda: lab.attempt(job.id, 1, ended=True))
        report.check(first.outcome is Outcome.CRASHED, f"attempt 1 ended {first.outcome}")
        second = lab.wait("the job's restart", lambda: lab.attempt(job.id, 2))
        orphan_gone = _wait_gone(executor_pid, 2.0)
        report.check(orphan_gone, f"executor {executor_pid} ran on as an orphan")
        done = lab.wait("completion", lambda: _finished(lab, job.id), timeout=handler + 30)
        report.check(done.state is State.COMPLETED, f"job ended {done.state}")
        report.check(len(done.history) == 2, f"{len(done.history)} starts, expected 2")
        return (first.ended_at or float("inf")) - killed_at, second.started_at - killed_at


def freeze(url: str, *, lease_ttl: float = 3.0) -> Report:
    """SIGSTOP a worker's whole process group, then SIGCONT it: the job is
    recovered at lease expiry, and the woken worker settles nothing."""
    report = Report("freeze")
    sweep = 1.0
    with Lab(url, "freeze", lease_ttl=lease_ttl, heartbeat_interval=lease_ttl / 4,
             sweep_interval=sweep) as lab:  # fmt: skip
        # Both started first: a start under load is neither the recovery nor the
        # handler's time; whichever claims the job is the one frozen.
        workers = [lab.worker("--concurrency", "1") for _ in range(2)]
        lab.wait("both workers", lambda: all(lab.ready(w) for w in workers))
        job = lab.enqueue("chaos.sleep", seconds=lease_ttl * 3)  # outlives the freeze
        frozen, executor_pid = lab.wait("the handler to start", lambda: lab.running_on(job.id))
        stopped_at = time.time()
        os.killpg(frozen.pid, signal.SIGSTOP)
        first = lab.wait(
            "the stalled attempt's recovery", lambda: lab.attempt(job.id, 1, ended=True)
        )
        report.check(first.outcome is Outcome.STALLED, f"attempt 1 ended {first.outcome}")
        recovery = (first.ended_at or float("inf")) - stopped_at
        limit = lease_ttl + sweep + 0.5
        report.figure("recovery after freeze", recovery, limit, f"<= lease {lease_ttl:g} s + sweep")
        lab.wait("the restart elsewhere", lambda: lab.attempt(job.id, 2))
        os.killpg(frozen.pid, signal.SIGCONT)  # its handler is still mid-sleep
        woke_at = time.time()
        stopped = _wait_gone(executor_pid, lease_ttl * 2)
        report.check(stopped, "the woken worker let its stale handler run on")
        beat = lease_ttl / 4
        report.figure("woken worker stopped its handler after", time.time() - woke_at, beat + 0.5,
                      f"< one heartbeat ({beat:g} s)")  # fmt: skip
        done = lab.wait("completion by the other worker", lambda: _finished(lab, job.id))
        report.check(done.result is not None and done.result.get("pid") != executor_pid,
                     "the stale attempt's result was stored")  # fmt: skip
        report.check(lab.outcomes(job.id) == [Outcome.STALLED, Outcome.COMPLETED],
                     f"history became {lab.outcomes(job.id)}")  # fmt: skip
        report.check(frozen.poll() is None, "the woken worker died")
    return report


def slow(url: str, *, lease_ttl: float = 1.0, factor: float = 5.0) -> Report:
    """Healthy handlers running ``factor`` times the lease TTL, one holding the
    GIL in a long regex: each starts exactly once."""
    report = Report("slow")
    seconds = lease_ttl * factor
    size = regex_size_for(lease_ttl)
    with Lab(url, "slow", lease_ttl=lease_ttl, heartbeat_interval=lease_ttl / 4) as lab:
        lab.worker("--concurrency", "2")
        lab.worker("--concurrency", "1")
        jobs = [lab.enqueue("chaos.sleep", seconds=seconds),
                lab.enqueue("chaos.regex", seconds=seconds, size=size)]  # fmt: skip
        starts = 0
        for job_id in (j.id for j in jobs):
            done = _wait_finished(lab, job_id, seconds * 4 + 30)
            starts = max(starts, len(done.history))
            report.check(done.state is State.COMPLETED, f"{done.task} ended {done.state}")
            report.check(done.stalls == 0, f"{done.task} was taken for stalled")
        report.figures.append(Figure("starts per job", starts, "exactly 1", starts == 1, ""))
    return report


def drain(url: str, *, handler: float = 5.0, budget: float = 1.0) -> Report:
    """SIGTERM with a drain budget shorter than the handler: the job is handed
    back once, without penalty, and another worker picks it up at once."""
    report = Report("drain")
    with Lab(url, "drain") as lab:
        # Both workers are up before the job exists: which one takes it does not
        # matter, and a slow start cannot outlast the handler.
        pair = [lab.worker("--concurrency", "1", "--drain-timeout", str(budget)) for _ in "ab"]
        lab.wait("the workers to start", lambda: all(lab.ready(w) for w in pair))
        job = lab.enqueue("chaos.sleep", seconds=handler)
        leaving, _ = lab.wait("the handler to start", lambda: lab.running_on(job.id))
        termed_at = time.time()
        leaving.send_signal(signal.SIGTERM)
        code = leaving.wait(budget + 30)
        report.check(code == 0, f"the drained worker exited with {code}")
        report.figure("drain took", time.time() - termed_at, budget + 2.0, f"~ budget {budget:g} s")
        first = lab.wait("the hand-back", lambda: lab.attempt(job.id, 1, ended=True))
        report.check(first.outcome is Outcome.RELEASED, f"attempt 1 ended {first.outcome}")
        second = lab.wait("the pickup", lambda: lab.attempt(job.id, 2))
        pickup = second.started_at - (first.ended_at or 0.0)
        report.figure("picked up again after", pickup, 1.5, "at once (< idle poll bound)")
        done = lab.wait("completion", lambda: _finished(lab, job.id), handler + 30)
        report.check(done.attempts == 1, f"the hand-back cost an attempt ({done.attempts})")
        copies = sum(lab.app.queue(lab.queue).counts().values())
        report.check(copies == 1, f"{copies} copies of the job exist")
        report.check(lab.outcomes(job.id) == [Outcome.RELEASED, Outcome.COMPLETED],
                     f"history became {lab.outcomes(job.id)}")  # fmt: skip
    return report


def child(url: str, *, handler: float = 3.0) -> Report:
    """The handler's process dies (SIGKILL of the executor): the supervisor
    records the attempt crashed and recovers it, and replaces the executor."""
    report = Report("child")
    with Lab(url, "child") as lab:
        worker = lab.worker("--concurrency", "2")
        job = lab.enqueue("chaos.sleep", seconds=handler)
        _, executor_pid = lab.wait("the handler to start", lambda: lab.running_on(job.id))
        killed_at = time.time()
        os.kill(executor_pid, signal.SIGKILL)
        first = lab.wait("the crash to be recorded", lambda: lab.attempt(job.id, 1, ended=True))
        report.check(first.outcome is Outcome.CRASHED, f"attempt 1 ended {first.outcome}")
        recovery = (first.ended_at or float("inf")) - killed_at
        report.figure("recovery after the executor died", recovery, 0.5, "< 0.5 s")
        second = lab.wait("the restart", lambda: lab.attempt(job.id, 2))
        report.figure("restarted after", second.started_at - killed_at, 1.5, "< 1.5 s")
        done = lab.wait("completion", lambda: _finished(lab, job.id), handler + 30)
        report.check(done.state is State.COMPLETED and done.stalls == 1,
                     f"job ended {done.state} with {done.stalls} stalls")  # fmt: skip
        report.check(worker.poll() is None, "the worker died with its executor")
    return report


def _finished(lab: Lab, job_id: str) -> Any:
    job = lab.job(job_id)
    return job if job.state in (State.COMPLETED, State.DEAD) else None


def _wait_finished(lab: Lab, job_id: str, timeout: float) -> Any:
    return lab.wait("completion", lambda: _finished(lab, job_id), timeout)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_gone(pid):
            return True
        time.sleep(0.01)
    return process_gone(pid)


EXPERIMENTS: dict[str, Callable[..., Report]] = {
    "kill9": kill9,
    "freeze": freeze,
    "slow": slow,
    "drain": drain,
    "child": child,
}

__all__ = ["EXPERIMENTS", "ExperimentFailed", "Figure", "Report"]
