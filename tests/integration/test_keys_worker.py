"""Concurrency keys through a real worker, on every backend (issue 39): a
debounced key's job runs once, with the last arguments, after the enqueues
stop; a per-key limit holds while the worker runs many keys at once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

import tenure
import tenure.testing
from tenure import App
from tests.conformance.helpers import wait_for


@pytest.fixture
def app(backend_url: str) -> Iterator[App]:
    app = App(backend_url)
    yield app
    app.close()


def test_100_debounced_enqueues_over_2_s__run_one_job_once_with_the_last_arguments(
    app: App,
) -> None:
    ran: list[int] = []

    @app.task
    def reindex(i: int) -> None:
        ran.append(i)

    debounced = reindex.with_options(key="tenant-7", debounce=1.0)
    began, ids = time.monotonic(), set()
    for i in range(100):  # the workload: an enqueue every 20 ms
        time.sleep(max(0.0, began + i * 0.02 - time.monotonic()))
        ids.add(debounced.enqueue(i).id)
    last = time.time()
    [job_id] = ids
    assert app.get_job(job_id).state is tenure.State.SCHEDULED
    # Due a second after the last enqueue: a worker's sweep makes it queued.
    wait_for(lambda: time.time() >= app.get_job(job_id).run_at, timeout=5)
    tenure.testing.drain(app, ["default"])
    job = app.get_job(job_id)
    assert ran == [99]
    assert (job.state, job.args, job.attempts) == (tenure.State.COMPLETED, {"i": 99}, 1)
    assert job.history[0].started_at >= last + 1.0 - 0.05  # storage's clock and ours


def test_a_workers_eight_threads__run_at_most_two_jobs_of_a_key_at_once(app: App) -> None:
    lock = threading.Lock()
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()

    @app.task(queue="reports")
    def report(customer: str) -> None:
        with lock:
            running[customer] += 1
            most[customer] = max(most[customer], running[customer])
        time.sleep(0.02)
        with lock:
            running[customer] -= 1

    app.queue("reports").set_policy(max_active_per_key=2)
    for customer in ("a", "b", "c"):
        report.with_options(concurrency_key=customer).enqueue_many([{"customer": customer}] * 12)
    drained = tenure.testing.drain(app, ["reports"], concurrency=8)
    assert drained.completed == 36
    assert set(most) == {"a", "b", "c"}
    assert max(most.values()) <= 2, most


def test_one_burst_worker__drains_a_keyed_queue_without_stopping_early(app: App) -> None:
    """A claim that comes back short in the cycle whose completions freed the
    keys is no sign of empty queues (a burst worker stopped with jobs queued)."""
    from tenure.config import WorkerConfig
    from tenure.testing import _burst

    @app.task(queue="keyed")
    def noop(i: int) -> None: ...

    app.queue("keyed").set_policy(max_active_per_key=1)
    for key in "abcd":
        noop.with_options(concurrency_key=key).enqueue_many([{"i": i} for i in range(50)])
    _burst(app, WorkerConfig(queues=("keyed",), concurrency=4, pool="thread", burst=True))
    assert app.queue("keyed").counts()[tenure.State.COMPLETED] == 200
