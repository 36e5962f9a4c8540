"""The first worker: claims, runs, settles, retries, dead-letters, drains."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import tenure
from tenure import App, DeadReason, Outcome, State, WorkerConfig
from tenure.worker import Supervisor

FAST = WorkerConfig(
    burst=True, idle_poll_min=0.005, idle_poll_max=0.05, concurrency=4, pool="thread"
)


@pytest.fixture
def app(tmp_path):
    with App(f"sqlite:///{tmp_path / 'w.db'}") as a:
        a.queue().set_policy(backoff_base=0.01, backoff_jitter=0)
        yield a


def work(app, config=FAST):
    asyncio.run(Supervisor(app, config).run())


def test_a_returned_value__completes_the_job_with_its_result(app):
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    job = add.enqueue(a=2, b=3)
    work(app)
    done = app.get_job(job.id)
    assert (done.state, done.result, done.attempts) == (State.COMPLETED, 5, 1)
    assert [a.outcome for a in done.history] == [Outcome.COMPLETED]


def test_async_handlers_run_too(app):
    @app.task
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    job = double.enqueue(x=21)
    work(app)
    assert app.get_job(job.id).result == 42


def test_an_exception__retries_with_backoff_until_max_attempts(app):
    calls = []

    @app.task(max_attempts=3)
    def flaky() -> None:
        calls.append(1)
        raise ValueError("nope")

    job = flaky.enqueue()
    deadline = time.monotonic() + 10
    while app.get_job(job.id).state is not State.DEAD and time.monotonic() < deadline:
        work(app)
    dead = app.get_job(job.id)
    assert dead.dead_reason is DeadReason.MAX_ATTEMPTS and len(calls) == 3
    assert [a.outcome for a in dead.history] == [Outcome.ERROR] * 3
    assert "ValueError: nope" in dead.error


def test_fail__dead_letters_at_once_with_the_traceback(app):
    @app.task
    def bad() -> None:
        raise tenure.Fail("card declined")

    job = bad.enqueue()
    work(app)
    dead = app.get_job(job.id)
    assert dead.state is State.DEAD and dead.dead_reason is DeadReason.ERROR
    assert "card declined" in dead.error and "Traceback" in dead.error


def test_retry__reschedules_explicitly(app):
    @app.task
    def later() -> None:
        if tenure.current_job().attempt == 1:
            raise tenure.Retry(in_=30)

    job = later.enqueue()
    work(app)
    got = app.get_job(job.id)
    assert got.state is State.SCHEDULED and got.run_at > time.time() + 20


def test_an_unknown_task_without_grace__is_dead_lettered_at_once_naming_it(app):
    app.queue().set_policy(unknown_task_grace=0)
    job = app.enqueue("nobody.handles.this", {})
    work(app)
    dead = app.get_job(job.id)
    assert dead.dead_reason is DeadReason.UNKNOWN_TASK and "nobody.handles.this" in dead.error
    assert dead.attempts == 1


def test_a_deadline__times_the_attempt_out(app):
    @app.task(timeout=0.1, max_attempts=1)
    def wedged() -> None:
        time.sleep(2)

    job = wedged.enqueue()
    work(app)
    dead = app.get_job(job.id)
    assert dead.dead_reason is DeadReason.TIMEOUT
    assert dead.history[0].outcome is Outcome.TIMEOUT


def test_current_job__reports_progress_fenced(app):
    seen = {}

    @app.task
    def step() -> str:
        job = tenure.current_job()
        seen.update(id=job.id, fence=job.fence, attempt=job.attempt)
        job.progress({"done": 50})
        job.heartbeat()
        return "ok"

    job = step.enqueue()
    work(app)
    got = app.get_job(job.id)
    assert seen == {"id": job.id, "fence": 1, "attempt": 1}
    assert got.progress == {"done": 50} and got.result == "ok"


def test_a_result_that_is_not_json__fails_the_attempt(app):
    @app.task(max_attempts=1)
    def weird() -> object:
        return object()

    job = weird.enqueue()
    work(app)
    assert "bad result" in app.get_job(job.id).error


def test_only_the_listed_queues_are_worked(app):
    @app.task(queue="a")
    def noop() -> None: ...

    noop.enqueue()
    other = app.enqueue("noop", {}, queue="b")
    work(app, WorkerConfig(queues=("a",), burst=True, idle_poll_max=0.05, pool="thread"))
    assert app.queue("a").counts()[State.COMPLETED] == 1
    assert app.get_job(other.id).state is State.QUEUED


WORKER_APP = """
import os, time, tenure
app = tenure.App(os.environ["TENURE_URL"])

@app.task
def nap(seconds: float) -> str:
    tenure.current_job().progress("started")
    time.sleep(seconds)
    return "rested"
"""


def start_worker(tmp_path, app, *args):
    (tmp_path / "napapp.py").write_text(textwrap.dedent(WORKER_APP))
    env = {**os.environ, "TENURE_URL": app.url, "PYTHONPATH": str(tmp_path)}
    code = (
        "import sys; from tenure.worker import run_worker; from tenure import WorkerConfig;"
        "from napapp import app;"
        f"run_worker(app, WorkerConfig(idle_poll_max=0.05, {', '.join(args)}))"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env)


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached in time")


def test_sigterm__lets_a_running_attempt_finish_within_the_drain_budget(tmp_path, app):
    job = app.enqueue("nap", {"seconds": 0.5})
    worker = start_worker(tmp_path, app, "drain_timeout=10")
    wait_for(lambda: app.get_job(job.id).progress == "started")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    done = app.get_job(job.id)
    assert done.state is State.COMPLETED and len(done.history) == 1


def test_sigterm_with_a_short_budget__hands_the_job_back_once_without_penalty(tmp_path, app):
    job = app.enqueue("nap", {"seconds": 30})
    worker = start_worker(tmp_path, app, "drain_timeout=0.2")
    wait_for(lambda: app.get_job(job.id).progress == "started")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    back = app.get_job(job.id)
    assert back.state is State.QUEUED and back.attempts == 0
    assert [a.outcome for a in back.history] == [Outcome.RELEASED]
    assert app.queue().counts()[State.QUEUED] == 1  # one copy, not two


def test_a_killed_worker__its_jobs_are_recovered_by_another(tmp_path, app):
    job = app.enqueue("nap", {"seconds": 30})
    victim = start_worker(tmp_path, app)
    wait_for(lambda: app.get_job(job.id).progress == "started")
    victim.kill()
    victim.wait()
    app.enqueue("nap", {"seconds": 0})  # something for the rescuer to do besides
    rescued_at = time.monotonic()
    app.queue().set_policy(lease_ttl=60, heartbeat_interval=1)  # lease expiry cannot be it
    rescuer = start_worker(tmp_path, app)
    try:
        wait_for(lambda: app.get_job(job.id).fence == 2)
        assert time.monotonic() - rescued_at < 10
        got = app.get_job(job.id)
        assert got.history[0].outcome is Outcome.CRASHED and got.stalls == 1
    finally:
        rescuer.kill()
        rescuer.wait()
