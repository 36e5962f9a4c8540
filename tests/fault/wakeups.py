"""An idle worker across a storage fault: does the first job enqueued after
it wake the worker, or does the worker find it only at its safety poll (a
minute on Redis)? Storage that comes back without the worker's liveness
connection (a restart, a failover) has it register again as a new worker
first."""

from __future__ import annotations

from collections.abc import Callable

from tenure import State
from tenure.chaos.lab import Lab
from tenure.errors import BackendUnavailable

WAKE_WITHIN = 5.0  # seconds from an enqueue until an idle worker began it


def worker_ids(lab: Lab) -> set[str] | None:
    """The ids of the registered workers; None while storage does not answer."""
    try:
        return {w.id for w in lab.app.call(lab.app.backend.workers())} or None
    except BackendUnavailable:
        return None


def woken_after(lab: Lab, fault: Callable[[], None]) -> float:
    """Seconds from an enqueue to its job's start, on a worker that was idle
    through ``fault`` and has registered again since."""
    lab.worker()
    first = lab.enqueue("chaos.sleep", seconds=0)
    lab.wait("a job to complete", lambda: lab.job(first.id).state is State.COMPLETED)
    before = lab.wait("the worker to be registered", lambda: worker_ids(lab))
    fault()
    lab.wait("the worker to register again", lambda: (worker_ids(lab) or before) - before)
    job = lab.enqueue("chaos.sleep", seconds=0)
    began = lab.wait("the job to begin", lambda: lab.attempt(job.id, 1), timeout=90)
    return began.started_at - job.created_at


def woken_line(fault: str, woken: float) -> str:
    return f"\n{fault}: an idle worker began a job {woken * 1000:.0f} ms after its enqueue"
