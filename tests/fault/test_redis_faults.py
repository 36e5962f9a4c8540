"""Redis faults with real `tenure worker` processes (spawned by the chaos lab):
the server restarted mid-run, and a worker's liveness connection cut.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis as redis_sync

from tenure import Outcome, State
from tenure.backends.base import WorkerInfo
from tenure.backends.factory import from_url
from tenure.chaos.lab import Lab
from tenure.errors import BackendUnavailable, LivenessLost
from tenure.job import JobSpec
from tests.fault.wakeups import WAKE_WITHIN, woken_after, woken_line
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


def test_a_restarted_server__an_idle_worker_wakes_when_a_job_comes(
    aof_redis: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with Lab(aof_redis.url, "restart-idle", lease_ttl=2.0, heartbeat_interval=0.25) as lab:
        woken = woken_after(lab, aof_redis.restart)
    with capsys.disabled():
        print(woken_line("redis restart", woken))
    assert woken < WAKE_WITHIN


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


def test_a_worker_that_lost_its_connection_to_a_restart__kills_no_connection_of_the_new_server(
    aof_redis: RedisServer,
) -> None:
    """Redis numbers its clients afresh at each start: the id of a liveness
    connection from before a restart may be another client's after it, and a
    worker that learns it lost its own must not have that one killed (it was
    another worker's liveness connection: its attempts were recorded crashed)."""
    with redis_sync.Redis.from_url(aof_redis.url) as admin:

        def client_id_of(name: str) -> int | None:
            return next((int(c["id"]) for c in admin.client_list() if c["name"] == name), None)

        async def scenario() -> None:
            backend = from_url(aof_redis.url)
            await backend.open()
            try:
                # Clients before it, so that the new server's numbers reach its id later
                # than this test's own clients reconnect.
                earlier = [redis_sync.Redis.from_url(aof_redis.url) for _ in range(20)]
                for client in earlier:
                    client.ping()
                await backend.register_worker(WorkerInfo("w-old", "host", 1, ("default",)))
                named = next(c["name"] for c in admin.client_list()
                             if c["name"].endswith(":worker:w-old"))  # fmt: skip
                old_id = client_id_of(named)
                assert old_id is not None
                aof_redis.kill()
                aof_redis.start()
                others = []  # the new server's clients, up to the one numbered old_id
                while (victim_id := client_id_of("victim")) is None:
                    other = redis_sync.Redis.from_url(aof_redis.url)
                    others.append(other)
                    if int(other.client_id()) >= old_id:
                        other.client_setname("victim")
                assert victim_id == old_id, "the new server skipped the old id"
                with pytest.raises(LivenessLost):
                    await backend.heartbeat("w-old", set())
                assert client_id_of("victim") == old_id, "another client's connection was killed"
                for client in earlier + others:
                    client.close()
            finally:
                await backend.close()

        asyncio.run(scenario())


def test_a_worker_registered_while_a_sweep_reloads_the_scripts__is_not_taken_for_dead(
    aof_redis: RedisServer,
) -> None:
    """A restarted Redis has no scripts: the first sweep meets NOSCRIPT, loads
    them and runs its scripts again. A worker that registers again and claims
    in between is in the registry read then, and its liveness connection must
    be in the CLIENT LIST the sweep judges it by (one read before it connected
    had it buried and its attempts recorded crashed while they ran)."""

    async def scenario() -> None:
        sweeper, worker = from_url(aof_redis.url), from_url(aof_redis.url)
        await sweeper.open()
        await worker.open()
        try:
            [job] = await worker.enqueue([JobSpec.create("t", {}, queue="q")])
            await worker.register_worker(WorkerInfo("w-old", "host", 1, ("q",)))
            aof_redis.restart()  # the registry and the job stay; the scripts and connections go
            for backend in (sweeper, worker):  # connected again, still running no script
                await backend.runner.command("PING", repeatable=True)
            load, claimed = sweeper.runner.load, []

            async def register_again_then_load() -> None:
                sweeper.runner.load = load  # type: ignore[method-assign]
                await worker.register_worker(WorkerInfo("w-new", "host", 1, ("q",)))
                claimed.extend((await worker.complete_and_claim([], "w-new", ["q"], 1))[1])
                await load()

            sweeper.runner.load = register_again_then_load  # type: ignore[method-assign]
            report = await sweeper.rescue()
            assert [j.id for j in claimed] == [job.id]
            assert report.dead_workers == ("w-old",)
            assert report.rescued == ()
            renewal = await worker.heartbeat("w-new", {(job.id, claimed[0].fence)})
            assert not renewal.lost
        finally:
            await worker.close()
            await sweeper.close()

    asyncio.run(scenario())
