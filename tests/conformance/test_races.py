"""Races: many processes on one storage, and a rescued job whose old holder lives on."""

from __future__ import annotations

import json
import multiprocessing
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tenure.core.states import Outcome, State
from tenure.errors import LeaseLost
from tests.conformance import race_worker
from tests.conformance.helpers import (
    SHORT_LEASE,
    all_jobs,
    claim_one,
    enqueue_one,
    register,
    rescue_until,
    spec,
)

PROCESSES = 8
JOBS = 400


def _run_processes(
    target: Callable[..., None], args_for: Callable[[int, Any], tuple[Any, ...]]
) -> None:
    ctx = multiprocessing.get_context("spawn")
    # Each process waits at the barrier once its backend is open, so all of them
    # start together (a process that opened first would otherwise drain alone).
    start = ctx.Barrier(PROCESSES)
    procs = [ctx.Process(target=target, args=args_for(i, start)) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0] * PROCESSES


@pytest.mark.slow
def test_processes_draining_one_queue__complete_every_job_exactly_once(
    backend: Any, backend_url: str, tmp_path: Path
) -> None:
    ids = {j.id for j in backend.enqueue([spec(args={"i": i}) for i in range(JOBS)])}
    outs = [tmp_path / f"claims-{i}.json" for i in range(PROCESSES)]
    _run_processes(
        race_worker.drain_queue,
        lambda i, start: (backend_url, f"racer-{i}", i, start, str(outs[i])),
    )
    claims = [tuple(c) for out in outs for c in json.loads(out.read_text())]
    duplicates = [c for c, n in Counter(claims).items() if n > 1]
    assert duplicates == []
    assert Counter(job_id for job_id, _ in claims) == Counter(ids)
    assert backend.counts("default")[State.COMPLETED] == JOBS
    for job in all_jobs(backend):
        stored = backend.get(job.id)
        assert stored.state == State.COMPLETED
        assert stored.fence == 1
        assert stored.attempts == 1
        assert [(a.fence, a.outcome) for a in stored.history] == [(1, Outcome.COMPLETED)]
    assert sum(1 for out in outs if json.loads(out.read_text())) >= 2, "no contention happened"


@pytest.mark.slow
def test_processes_enqueueing_one_key__make_one_job(
    backend: Any, backend_url: str, tmp_path: Path
) -> None:
    outs = [tmp_path / f"ids-{i}.json" for i in range(PROCESSES)]
    _run_processes(
        race_worker.enqueue_with_key,
        lambda i, start: (backend_url, "the-key", 10, start, str(outs[i])),
    )
    ids = {job_id for out in outs for job_id in json.loads(out.read_text())}
    assert len(ids) == 1
    assert [j.id for j in all_jobs(backend)] == list(ids)


def test_rescued_job_with_live_old_holder__only_the_new_holder_settles(
    backend: Any, backend_url: str, open_backend: Callable[[str], Any]
) -> None:
    backend.set_policy("default", SHORT_LEASE)
    old_worker = register(backend, "old-holder")
    other = open_backend(backend_url)
    new_worker = register(other, "new-holder")
    enqueue_one(backend)
    old = claim_one(backend, old_worker)
    rescued = rescue_until(other, old.id)  # the old holder froze: no heartbeat
    assert rescued.outcome == Outcome.STALLED
    new = claim_one(other, new_worker)
    assert new.id == old.id
    assert new.fence == old.fence + 1
    # the old holder wakes up
    assert backend.heartbeat(old_worker, {(old.id, old.fence)}).lost == {(old.id, old.fence)}
    with pytest.raises(LeaseLost):
        backend.complete(old.id, old.fence, "stale result")
    assert other.heartbeat(new_worker, {(new.id, new.fence)}).lost == set()
    other.complete(new.id, new.fence, "fresh result")
    stored = backend.get(old.id)
    assert stored.state == State.COMPLETED
    assert stored.result == "fresh result"
    assert [(a.worker, a.outcome) for a in stored.history] == [
        (old_worker, Outcome.STALLED),
        (new_worker, Outcome.COMPLETED),
    ]


def test_old_holders_heartbeat__does_not_renew_the_new_holders_lease(
    backend: Any, backend_url: str, open_backend: Callable[[str], Any]
) -> None:
    backend.set_policy("default", SHORT_LEASE)
    old_worker = register(backend, "old-holder")
    other = open_backend(backend_url)
    new_worker = register(other, "new-holder")
    enqueue_one(backend)
    old = claim_one(backend, old_worker)
    rescue_until(other, old.id)
    new = claim_one(other, new_worker)
    lease_before = other.get(new.id).lease_expires_at
    backend.heartbeat(old_worker, {(old.id, old.fence)})
    after = other.get(new.id)
    assert after.worker == new_worker
    assert after.fence == new.fence
    assert after.lease_expires_at == lease_before
