"""Aborting a running job with a real worker: the cancel reaches the handler
through storage and the heartbeat, the handler sees it (``cancelled``, or
CancelledError), and one that does not stop is killed after ``cancel_grace``."""

import asyncio
import sys
import textwrap
import threading
import time

import pytest

from tenure import App, Outcome, State, WorkerConfig
from tenure.worker import Supervisor

HEARTBEAT = 0.1
GRACE = 0.5
# Generous: a busy machine delays a heartbeat, a kill and the settle.
SLACK = 5.0

MODULE = """
import asyncio, time, tenure

app = tenure.App({url!r})

@app.task
def polite() -> str:
    job = tenure.current_job()
    job.progress("started")
    while not job.cancelled:
        time.sleep(0.01)
    return "stopped when told"

@app.task
async def apolite() -> str:
    tenure.current_job().progress("started")
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        tenure.current_job().progress("cleaned up")
        raise
    return "slept"

@app.task
def beating() -> str:
    job = tenure.current_job()
    job.progress("started")
    while not job.cancelled:
        job.heartbeat()  # its own renewal: the worker's own is far off
        time.sleep(0.01)
    return "stopped when its heartbeat told it"

@app.task
def stubborn(seconds: float) -> str:
    tenure.current_job().progress("started")
    time.sleep(seconds)  # never looks
    return "done late"
"""


@pytest.fixture
def abort_app(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'abort.db'}"
    name = f"abort_app_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE.format(url=url)))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    module.app.queue().set_policy(
        heartbeat_interval=HEARTBEAT, lease_ttl=10 * HEARTBEAT, cancel_grace=GRACE
    )
    yield module.app
    module.app.close()
    sys.modules.pop(name, None)


def cancel_while_running(app: App, task: str, args: dict, pool: str) -> tuple[float, object]:
    """Run ``task`` on a worker, cancel it once its handler has started, and
    return how long the worker took from the cancel to the job's end, and the job."""
    job = app.enqueue(task, args)
    config = WorkerConfig(burst=True, idle_poll_max=0.05, concurrency=1, pool=pool)
    worker = threading.Thread(target=asyncio.run, args=(Supervisor(app, config).run(),))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while app.get_job(job.id).progress != "started":
            assert time.monotonic() < deadline, "the handler never started"
            time.sleep(0.01)
        asked = time.monotonic()
        assert app.cancel(job.id).state is State.ACTIVE  # a request: it runs on meanwhile
        while app.get_job(job.id).state is State.ACTIVE:
            assert time.monotonic() < asked + GRACE + SLACK, "the cancel never took effect"
            time.sleep(0.01)
        took = time.monotonic() - asked
    finally:
        worker.join(30)
    assert not worker.is_alive()
    return took, app.get_job(job.id)


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_a_cooperative_handler__stops_when_told_and_the_job_ends_cancelled(abort_app, pool):
    took, job = cancel_while_running(abort_app, "polite", {}, pool)
    assert (job.state, job.result, job.attempts) == (State.CANCELLED, None, 1)
    assert [a.outcome for a in job.history] == [Outcome.CANCELLED]
    assert "returned" in job.error
    assert took < GRACE  # it stopped by itself, within about a heartbeat: no kill


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_an_async_handler__gets_cancelled_error_and_the_job_ends_cancelled(abort_app, pool):
    took, job = cancel_while_running(abort_app, "apolite", {}, pool)
    assert job.state is State.CANCELLED and job.progress == "cleaned up"
    assert [a.outcome for a in job.history] == [Outcome.CANCELLED]
    assert took < GRACE


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_a_handler_that_heartbeats_itself__is_told_of_the_cancel_by_its_heartbeat(abort_app, pool):
    """A handler's own heartbeat renews its lease as the worker's does, and
    learns of a cancel the same way: its handler is asked to stop, without
    waiting for the worker's next heartbeat (here long after the test ends)."""
    abort_app.queue().set_policy(heartbeat_interval=60.0, lease_ttl=120.0)
    took, job = cancel_while_running(abort_app, "beating", {}, pool)
    assert (job.state, job.result, job.attempts) == (State.CANCELLED, None, 1)
    assert [a.outcome for a in job.history] == [Outcome.CANCELLED]
    assert "returned" in job.error
    assert took < GRACE  # it stopped by itself, told by its own heartbeat: no kill


def test_a_handler_that_ignores_the_cancel__is_killed_after_the_grace(abort_app):
    took, job = cancel_while_running(abort_app, "stubborn", {"seconds": 60}, "process")
    assert job.state is State.CANCELLED and job.result is None
    assert [a.outcome for a in job.history] == [Outcome.CANCELLED]
    assert "cancel_grace" in job.error
    assert GRACE <= took < HEARTBEAT + GRACE + SLACK


def test_on_threads_a_handler_that_ignores_the_cancel__is_abandoned_and_its_result_dropped(
    abort_app,
):
    """A thread cannot be killed: the attempt ends cancelled after the grace, and
    what the handler returns later is thrown away by its fence."""
    took, job = cancel_while_running(abort_app, "stubborn", {"seconds": 1.5}, "thread")
    assert GRACE <= took < 1.5
    assert job.state is State.CANCELLED and job.result is None
    assert [a.outcome for a in job.history] == [Outcome.CANCELLED]
