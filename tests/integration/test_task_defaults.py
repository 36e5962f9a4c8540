"""A worker applies its registered task's defaults to every job of the task."""

import asyncio
import time

import pytest

from tenure import App, DeadReason, Outcome, State, WorkerConfig
from tenure.core.states import TERMINAL
from tenure.worker import Supervisor

FAST = WorkerConfig(burst=True, idle_poll_min=0.005, idle_poll_max=0.05, pool="thread")


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'd.db'}"


@pytest.fixture
def producer(url):
    """An App that does not know the task: it enqueues by name, as the CLI does."""
    with App(url) as a:
        a.queue().set_policy(backoff_base=0.01, backoff_jitter=0)
        yield a


@pytest.fixture
def worker_app(url):
    with App(url) as a:
        yield a


def work_until(app, job_id, done, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not done(app.get_job(job_id)):
        assert time.monotonic() < deadline, app.get_job(job_id)
        asyncio.run(Supervisor(app, FAST).run())
    return app.get_job(job_id)


def test_a_job_enqueued_by_name__gets_its_tasks_timeout_and_max_attempts(producer, worker_app):
    @worker_app.task(timeout=0.2, max_attempts=2)
    def wedged() -> None:
        time.sleep(1.5)

    job = producer.enqueue("wedged")
    assert (job.timeout, job.max_attempts) == (None, None)  # the producer knew nothing
    dead = work_until(worker_app, job.id, lambda j: j.state in TERMINAL)
    assert dead.dead_reason is DeadReason.TIMEOUT
    assert [a.outcome for a in dead.history] == [Outcome.TIMEOUT] * 2  # not the queue's 3
    assert "deadline of 0.2 s" in dead.error


def test_a_jobs_own_options__override_its_tasks_defaults(producer, worker_app):
    @worker_app.task(timeout=0.1, max_attempts=5)
    def slow() -> str:
        time.sleep(0.3)
        return "done"

    job = producer.enqueue("slow", timeout=5, max_attempts=1)
    got = work_until(worker_app, job.id, lambda j: j.state in TERMINAL)
    assert (got.state, got.result, got.attempts) == (State.COMPLETED, "done", 1)
