"""PostgreSQL faults: a restarted server, terminated connections, a crowd of workers.

Real `tenure worker` processes (spawned by the chaos lab) on a real server
that the test restarts or whose backends it terminates.
"""

import asyncio
import os
import signal
import time
from typing import Any

import psycopg
import pytest

from tenure import Outcome, State
from tenure.backends.base import Backend, WorkerInfo
from tenure.backends.factory import from_url
from tenure.chaos.lab import Lab
from tenure.errors import BackendUnavailable, LeaseLost
from tenure.job import JobSpec


@pytest.fixture
def pg_url(postgres_server):
    return postgres_server.new_database()


def registered(lab: Lab, n: int) -> bool:
    return len(lab.app.call(lab.app.backend.workers())) >= n


def test_an_idle_worker_is_woken_by_notify_not_by_polling(pg_url):
    with Lab(pg_url, "wake") as lab:
        lab.worker("--concurrency", "1")
        lab.wait("the worker to register", lambda: registered(lab, 1))
        time.sleep(1.5)  # let its idle poll back off to its bound (1 s)
        latencies = []
        for _ in range(5):
            job = lab.enqueue("chaos.sleep", seconds=0)
            first = lab.wait("the pickup", lambda j=job: lab.attempt(j.id, 1, ended=True))
            latencies.append(first.started_at - job.created_at)
            time.sleep(0.3)
        print("wake-up latencies", latencies)
        assert sorted(latencies)[2] < 0.1, latencies  # the median; polling would take ~0.5 s


def test_a_terminated_liveness_connection__the_worker_comes_back_as_a_new_one(
    pg_url, postgres_server
):
    with Lab(pg_url, "terminate") as lab:
        lab.worker("--concurrency", "1")
        job = lab.enqueue("chaos.sleep", seconds=3)
        lab.wait("the handler to start", lambda: lab.running_on(job.id))
        db = pg_url.rsplit("/", 1)[1]
        killed = postgres_server.psql(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'tenure-liveness') t", db)  # fmt: skip
        assert killed == "1"
        done = lab.wait("completion", lambda: _finished(lab, job.id), timeout=30)
        assert done.state is State.COMPLETED
        history = done.history
        assert [a.outcome for a in history] == [Outcome.CRASHED, Outcome.COMPLETED]
        assert history[0].worker != history[1].worker  # the same process, a new identity
        assert lab.workers[0].poll() is None


def test_a_restarted_server__loses_nothing_and_recovers_in_flight_attempts_once(
    pg_url, postgres_server
):
    with Lab(pg_url, "restart") as lab:
        lab.worker("--concurrency", "2")
        lab.worker("--concurrency", "2")
        jobs = lab.app.enqueue_many("chaos.sleep", [{"seconds": 0.2}] * 40, queue=lab.queue)
        lab.wait("some progress", lambda: lab.app.queue(lab.queue).counts()[State.COMPLETED] > 4)
        postgres_server.restart()
        lab.wait(
            "every job to finish",
            lambda: lab.app.queue(lab.queue).counts()[State.COMPLETED] == len(jobs),
            timeout=90,
        )
        for job in jobs:
            outcomes = [a.outcome for a in lab.job(job.id).history]
            assert outcomes[-1] is Outcome.COMPLETED
            assert outcomes.count(Outcome.COMPLETED) == 1
            assert len(outcomes) <= 2, outcomes  # at most the one interrupted attempt
        assert all(w.poll() is None for w in lab.workers)


def test_sixteen_workers_never_hold_the_same_attempt(pg_url):
    with Lab(pg_url, "crowd") as lab:
        for _ in range(16):
            lab.worker("--pool", "thread", "--concurrency", "2")
        jobs = lab.app.enqueue_many("chaos.sleep", [{"seconds": 0}] * 600, queue=lab.queue)
        lab.wait(
            "every job to finish",
            lambda: lab.app.queue(lab.queue).counts()[State.COMPLETED] == len(jobs),
            timeout=120,
        )
        claims = [(a.attempt, a.fence, a.worker) for j in jobs for a in lab.job(j.id).history]
        assert len(claims) == len(jobs)  # one attempt per job: nobody took a job twice
        assert len({w for _, _, w in claims}) > 1, "no contention happened"


def _finished(lab, job_id):
    job = lab.job(job_id)
    return job if job.state in (State.COMPLETED, State.DEAD) else None


def test_a_server_down_for_seconds__is_said_once_and_the_worker_carries_on_after(
    pg_url, postgres_server
):
    """A storage fault is an episode: each kind of call says once that it fails
    and once that it works again; claims back off meanwhile, and no traceback
    floods the log."""
    with Lab(pg_url, "outage") as lab:
        worker = lab.worker("--concurrency", "1", "--log-level", "info")
        log = lab.logs / "worker-0.log"
        job = lab.enqueue("chaos.sleep", seconds=0)
        lab.wait("the job", lambda: lab.job(job.id).state is State.COMPLETED)
        before = log.read_text()
        postgres_server.stop()
        try:
            lab.wait("the claims to fail", lambda: "claim failed" in log.read_text())
            time.sleep(8)  # the outage: calls keep failing, quietly; the pool's backoff grows
        finally:
            postgres_server.start()
        back = time.monotonic()
        job = lab.wait("an enqueue", lambda: _enqueued(lab), timeout=30)
        lab.wait("the job", lambda: lab.job(job.id).state is State.COMPLETED, timeout=60)
        recovered = time.monotonic() - back
        lab.wait("the claims to work", lambda: "claim works again" in log.read_text())
        during = log.read_text()[len(before) :]
        print(during, f"ran a job {recovered:.1f} s after the server was back", sep="\n")
        assert "Traceback" not in during
        assert len(during.splitlines()) <= 16  # five kinds of call, twice each, and LISTEN's
        assert recovered < 20  # the pool's doubling backoff took 24 s after 30 s down
        assert worker.poll() is None


def test_a_worker_frozen_inside_its_sweep__keeps_no_other_sweep_out(pg_url, postgres_server):
    """SIGSTOP while the sweep's transaction is open (it holds the fleet's sweep
    lock): the server ends that session after it idles a second, and the
    others sweep again; woken, the worker carries on."""
    with Lab(pg_url, "frozen-sweep", sweep_interval=0.01) as lab:
        # A job no worker takes: the fleet is not idle, so the worker sweeps
        # every interval (an idle fleet's sweeps are skipped: rescue.py).
        lab.app.enqueue("chaos.sleep", {"seconds": 0}, queue="unserved")
        worker = lab.worker("--concurrency", "1")
        backend = lab.app.backend
        namespace = backend.namespace
        db = pg_url.rsplit("/", 1)[1]
        holding = (  # the sweep lock held by a session idle in its transaction
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            f" WHERE l.locktype = 'advisory' AND l.classid = {namespace} AND l.objid = 1"
            " AND l.objsubid = 1 AND l.granted AND a.state = 'idle in transaction'"
        )

        def frozen_inside() -> bool:
            if postgres_server.psql(holding, db) == "0":
                return False
            os.kill(worker.pid, signal.SIGSTOP)
            if postgres_server.psql(holding, db) != "0":
                return True
            os.kill(worker.pid, signal.SIGCONT)  # it had moved on: try again
            return False

        lab.wait("a freeze inside a sweep", frozen_inside)
        try:
            frozen = time.monotonic()
            lab.wait("a sweep of another", lambda: lab.app.call(backend.rescue()).swept, 10)
            took = time.monotonic() - frozen
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        assert 0.5 < took < 5, took  # the idle timeout (1 s), not the worker's thaw
        job = lab.enqueue("chaos.sleep", seconds=0)
        lab.wait("the woken worker to run a job", lambda: _finished(lab, job.id), timeout=30)
        assert worker.poll() is None


def test_a_worker_started_while_the_server_is_down__waits_for_it(pg_url, postgres_server):
    """A worker that starts before its database answers (a server restarting,
    a fleet started all at once) says so once and starts when it answers."""
    with Lab(pg_url, "late-server") as lab:
        postgres_server.stop()
        try:
            worker = lab.worker("--concurrency", "1", "--log-level", "info")
            log = lab.logs / "worker-0.log"
            lab.wait("the worker to find no server", lambda: "open failed" in log.read_text())
        finally:
            postgres_server.start()
        job = lab.wait("an enqueue", lambda: _enqueued(lab), timeout=30)
        lab.wait("the job", lambda: _finished(lab, job.id), timeout=60)
        assert worker.poll() is None
        assert "open works again" in log.read_text()


def _enqueued(lab):
    try:
        return lab.enqueue("chaos.sleep", seconds=0)
    except BackendUnavailable:
        return None


SWEEPING = (  # the backend running orphaned_leases, the sweep's look for gone holders
    # (its client backend: a parallel worker of the same statement shows the same
    # query, and exits when its part is done)
    "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND datname = current_database()"
    " AND backend_type = 'client backend'"
    " AND query LIKE '%%NOT EXISTS%%FOR UPDATE SKIP LOCKED%%' AND pid <> pg_backend_pid()"
)


def test_a_job_claimed_again_while_a_sweep_reads_gone_holders__is_not_recorded_crashed(pg_url):
    """A job held by a dead worker is handed back and claimed by a worker that
    registered while the sweep's statement was reading (after a server restart,
    every worker registers again at once). PostgreSQL gave that statement the
    job as the new claim left it, checked against a snapshot without the new
    worker: its live attempt was recorded crashed.

    The sweep's server process is frozen (SIGSTOP) inside that statement while
    the job changes hands; the jobs of a live worker make the statement long
    enough to be caught there."""
    asyncio.run(_claimed_again_while_swept(pg_url))


async def _claimed_again_while_swept(url: str) -> None:
    live, sweeper = from_url(url), from_url(url)
    watcher = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await live.open()
    await sweeper.open()
    try:
        await live.enqueue(JobSpec.create_many("t", [{}] * 20_000, queue="busy"))
        await live.register_worker(WorkerInfo("live", "host", 1, ("busy",)))
        assert len(await live.claim("live", ["busy"], 20_000)) == 20_000
        caught = 0  # sweeps caught before they reached the job (one may be caught too early)
        for n in range(20):
            caught += await _hand_over_while_swept(url, sweeper, watcher, n)
            if caught == 3:
                return
        pytest.fail(f"{caught} sweeps of 20 caught before they reached the job")
    finally:
        await watcher.close()
        await sweeper.close()
        await live.close()


async def _hand_over_while_swept(
    url: str, sweeper: Backend, watcher: psycopg.AsyncConnection[Any], n: int
) -> bool:
    """Whether a sweep was caught before it reached the job of a dead worker,
    which was claimed again meanwhile; if so, that claim must stand."""
    dead, newer = from_url(url), from_url(url)
    await dead.open()
    await newer.open()
    try:
        await dead.enqueue([JobSpec.create("t", {}, queue=f"q{n}")])
        await dead.register_worker(WorkerInfo(f"dead{n}", "host", 2, (f"q{n}",)))
        [job] = await dead.claim(f"dead{n}", [f"q{n}"], 1)
        await dead.close()  # as a kill -9 would: its liveness lock goes
        sweep = asyncio.ensure_future(sweeper.rescue())
        pid = None
        while pid is None and not sweep.done():
            pid = await (await watcher.execute(SWEEPING)).fetchone()
        if pid is None:
            await sweep
            return False
        os.kill(pid[0], signal.SIGSTOP)
        # Had the sweep locked the job already, the hand-over would wait for it.
        thaw = asyncio.get_running_loop().call_later(1.0, os.kill, pid[0], signal.SIGCONT)
        try:
            await newer.register_worker(WorkerInfo(f"new{n}", "host", 3, (f"q{n}",)))
            await newer.release(job.id, job.fence)
            claimed = await newer.claim(f"new{n}", [f"q{n}"], 1)
        except LeaseLost:  # the sweep recovered it first
            claimed = []
        finally:
            thaw.cancel()
            os.kill(pid[0], signal.SIGCONT)
        await sweep
        if not claimed:  # the sweep had locked the job already
            return False
        held = await newer.get(job.id)
        outcomes = [(a.worker, a.outcome) for a in held.history]
        assert held.state is State.ACTIVE and held.worker == f"new{n}", outcomes
        return True
    finally:
        await newer.close()
        await dead.close()


def test_a_handlers_transaction_after_its_session_was_ended__is_made_on_a_new_one(
    pg_url, postgres_server, open_backend
):
    """A handler's process keeps its connection for ``transaction()`` between
    jobs. The server ending that session (a restart, the kill of a primary that
    failed over) must not fail the next job's transaction: the connection holds
    the server's goodbye, and a new one is made."""
    backend = open_backend(pg_url)
    handler = from_url(pg_url)  # as a handler's process holds it: never opened
    backend.register_worker(WorkerInfo("w1", "host", 1, ("default",)))
    backend.enqueue([JobSpec.create("t", {}), JobSpec.create("t", {})])
    first, second = backend.claim("w1", ["default"], 2)
    with handler.transaction(first.id, first.fence, {"n": 1}):
        pass
    db = pg_url.rsplit("/", 1)[1]
    ended = postgres_server.psql(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = 'tenure-effects') t", db)  # fmt: skip
    assert ended == "1"
    with handler.transaction(second.id, second.fence, {"n": 2}):
        pass
    assert backend.get(second.id).state is State.COMPLETED
    asyncio.run(handler.close())
