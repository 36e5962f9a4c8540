"""Redis faults with real `tenure worker` processes (spawned by the chaos lab):
the server restarted mid-run, and a worker's liveness connection cut.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis as redis_sync

from tenure import Outcome, State
from tenure.chaos.lab import Lab
from tenure.errors import BackendUnavailable
from tests.servers import RedisServer


def completed(lab: Lab) -> int | None:
    """How many of the lab's jobs completed; None while Redis does not answer."""
    try:
        return lab.app.queue(lab.queue).counts()[State.COMPLETED]
    except BackendUnavailable:
        return None


def registered(lab: Lab, n: int) -> bool:
    return len(lab.app.call(lab.app.backend.workers())) >= n


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_a_restarted_server__loses_nothing_and_recovers_in_flight_attempts_once(
    aof_redis: RedisServer, how: str
) -> None:
    with Lab(aof_redis.url, f"restart-{how}", lease_ttl=2.0, heartbeat_interval=0.25) as lab:
        lab.worker("--concurrency", "2")
        lab.worker("--concurrency", "2")
        jobs = lab.app.enqueue_many("chaos.sleep", [{"seconds": 0.2}] * 40, queue=lab.queue)
        lab.wait("some progress", lambda: (completed(lab) or 0) > 4)
        if how == "kill":
            aof_redis.kill()  # SIGKILL: what was acknowledged is in the AOF
            aof_redis.start()
        else:
            aof_redis.restart()
        lab.wait("every job to finish", lambda: completed(lab) == len(jobs), timeout=90)
        for job in jobs:
            outcomes = [a.outcome for a in lab.job(job.id).history]
            assert outcomes[-1] is Outcome.COMPLETED, outcomes
            assert outcomes.count(Outcome.COMPLETED) == 1, outcomes
            assert len(outcomes) <= 2, outcomes  # at most the one interrupted attempt
            assert set(outcomes[:-1]) <= {Outcome.CRASHED}, outcomes
        assert all(w.poll() is None for w in lab.workers), "a worker died with Redis"


def test_a_cut_liveness_connection__the_worker_comes_back_as_a_new_one(
    aof_redis: RedisServer,
) -> None:
    with Lab(aof_redis.url, "cut", lease_ttl=2.0, heartbeat_interval=0.25) as lab:
        lab.worker("--concurrency", "1")
        job = lab.enqueue("chaos.sleep", seconds=3)
        lab.wait("the handler to start", lambda: lab.running_on(job.id))
        with redis_sync.Redis.from_url(aof_redis.url, decode_responses=True) as admin:
            named = [c for c in admin.client_list() if c["name"].startswith("tenure:worker:")]
            assert len(named) == 1
            admin.client_kill_filter(_id=named[0]["id"])
        started = time.monotonic()
        done = lab.wait("completion", lambda: _finished(lab, job.id), timeout=30)
        assert done.state is State.COMPLETED
        assert [a.outcome for a in done.history] == [Outcome.CRASHED, Outcome.COMPLETED]
        assert done.history[0].worker != done.history[1].worker  # one process, a new identity
        assert lab.workers[0].poll() is None
        assert time.monotonic() - started < 20


def _finished(lab: Lab, job_id: str) -> Any:
    job = lab.job(job_id)
    return job if job.state in (State.COMPLETED, State.DEAD) else None
