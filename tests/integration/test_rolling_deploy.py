"""Rolling deploys: a job whose task a worker does not know waits for one that does."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tenure import App, DeadReason, Job, Outcome, State, WorkerConfig
from tenure.worker import Supervisor

CONFIG = WorkerConfig(idle_poll_min=0.005, idle_poll_max=0.05, pool="thread", concurrency=2)


OLD = """
import os, tenure
app = tenure.App(os.environ["TENURE_URL"])

@app.task
def ping() -> str:
    return "pong"
"""
NEW = (
    OLD
    + """
@app.task
def double(n: int) -> int:
    return 2 * n
"""
)


def versions(url: str) -> tuple[App, App]:
    """Two deploys of one application: the new one has a task the old one lacks."""
    old, new = App(url), App(url)
    for app in (old, new):

        @app.task
        def ping() -> str:
            return "pong"

    @new.task
    def double(n: int) -> int:
        return 2 * n

    return old, new


def start_worker(tmp_path: Path, url: str, name: str, source: str) -> subprocess.Popen[bytes]:
    """A worker process of one version (separate processes: their polls are not in step)."""
    (tmp_path / f"{name}.py").write_text(source)
    env = {**os.environ, "TENURE_URL": url, "PYTHONPATH": str(tmp_path)}
    code = (
        "from tenure.worker import run_worker; from tenure import WorkerConfig;"
        f"from {name} import app;"
        "run_worker(app, WorkerConfig(idle_poll_max=0.05, pool='thread'))"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env)


def wait_for(app: App, job_id: str, done: Callable[[Job], bool], timeout: float = 20) -> Job:
    deadline = time.monotonic() + timeout
    while not done(job := app.get_job(job_id)):
        assert time.monotonic() < deadline, (job.state, story(job))
        time.sleep(0.02)
    return job


def story(job: Job) -> list[tuple[str | None, str | None, float]]:
    """Each attempt's worker, outcome and start, from the first's."""
    first = job.history[0].started_at if job.history else 0.0
    return [(a.worker, a.outcome, round(a.started_at - first, 3)) for a in job.history]


async def until(app: App, job_id: str, done: Callable[[Job], bool], timeout: float = 20) -> Job:
    deadline = time.monotonic() + timeout
    while not done(job := await app.aget_job(job_id)):
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.02)
    return job


def released(job: Job) -> int:
    return sum(a.outcome is Outcome.RELEASED for a in job.history)


def test_a_job_only_new_workers_know__waits_for_one_and_spends_no_attempt(backend_url, tmp_path):
    with App(backend_url) as app:
        job = app.enqueue("double", {"n": 21})  # by name: the old code cannot even import it
        old = start_worker(tmp_path, backend_url, "old_tasks", OLD)
        new = None
        try:
            started = time.monotonic()
            wait_for(app, job.id, lambda j: released(j) >= 1)
            # The deploy rolls: a new worker joins, then the old one drains and goes.
            new = start_worker(tmp_path, backend_url, "new_tasks", NEW)
            deadline = time.monotonic() + 20
            while len(app.call(app.backend.workers())) < 2:
                assert time.monotonic() < deadline, "the new worker never registered"
                time.sleep(0.02)
            old.send_signal(signal.SIGTERM)
            assert old.wait(20) == 0
            done = wait_for(app, job.id, lambda j: j.state is State.COMPLETED)
            took = time.monotonic() - started
        finally:
            for worker in (old, new):
                if worker is not None and worker.poll() is None:
                    worker.send_signal(signal.SIGTERM)
                    assert worker.wait(20) == 0
    assert (done.result, done.attempts) == (42, 1)
    outcomes = [a.outcome for a in done.history]
    assert outcomes[-1] is Outcome.COMPLETED and set(outcomes[:-1]) == {Outcome.RELEASED}
    # Handed back with a growing wait (0.5 s, 1 s, 2 s...), not claimed again in a
    # loop; once more at most by a cycle already out when the first hand-back
    # began (sent without the task in skip_tasks: outcome.settle_unknown_task).
    assert released(done) <= 2 + took, story(done)


BUSY_OLD = (
    OLD
    + """
import time

@app.task
def nap() -> None:
    time.sleep(0.01)
"""
)
BUSY_NEW = BUSY_OLD + NEW.removeprefix(OLD)


def test_a_job_only_new_workers_know__runs_at_once_on_a_new_worker_beside_busy_old_ones(
    backend_url, tmp_path
):
    """Two old workers, busy with other jobs, have handed the job back four times
    between them (and would not look at it again for seconds); a new worker runs
    it as soon as it is up."""
    with App(backend_url) as app:
        job = app.enqueue("double", {"n": 21})
        # Behind it, whatever its place after a hand-back: the old workers are busy.
        app.enqueue_many("nap", [{} for _ in range(2000)], priority=-1)
        workers = [start_worker(tmp_path, backend_url, "old_tasks", BUSY_OLD) for _ in range(2)]
        try:
            wait_for(app, job.id, lambda j: released(j) >= 4)
            workers.append(start_worker(tmp_path, backend_url, "new_tasks", BUSY_NEW))
            deadline = time.monotonic() + 20
            while len(app.call(app.backend.workers())) < 3:
                assert time.monotonic() < deadline, "the new worker never registered"
                time.sleep(0.01)
            up = time.monotonic()
            done = wait_for(app, job.id, lambda j: j.state is State.COMPLETED)
            took = time.monotonic() - up
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.send_signal(signal.SIGTERM)
                    assert worker.wait(20) == 0
    assert done.result == 42
    assert took < 1.5, story(done)


def test_a_job_nobody_knows__is_dead_lettered_after_the_grace(backend_url):
    old, _ = versions(backend_url)
    old.queue().set_policy(unknown_task_grace=1.0)
    job = old.enqueue("double", {"n": 1})

    async def work() -> Job:
        worker = Supervisor(old, CONFIG)
        running = asyncio.create_task(worker.run())
        try:
            return await until(old, job.id, lambda j: j.state is State.DEAD)
        finally:
            worker.request_stop()
            await running
            await old.aclose()

    dead = asyncio.run(work())
    assert dead.dead_reason is DeadReason.UNKNOWN_TASK and "'double'" in dead.error
    outcomes = [a.outcome for a in dead.history]
    assert outcomes[-1] is Outcome.ERROR and set(outcomes[:-1]) == {Outcome.RELEASED}
    ended = [a for a in dead.history]
    assert ended[-1].started_at - ended[0].started_at >= 1.0
    assert dead.attempts == 1
    old.close()
