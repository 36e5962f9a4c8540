"""Waiting for a result: ``App.result`` and ``App.aresult`` return a job's
result once it completes, or raise its stored error, woken by the queue's
lifecycle events (or, with events off, by a bounded backoff of reads)."""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tenure import App, DeadReason, InvalidInput, JobCancelled, JobFailed, JobNotFound
from tenure.core.ids import new_job_id
from tenure.core.retry import Decision
from tenure.core.states import Outcome, State
from tenure.results import _WATCHES, Watch
from tests.conformance.helpers import claim_one, enqueue_one, spec

LEAD = 0.05  # seconds the waiter gets to begin waiting before the job ends


@pytest.fixture
def app(backend_url: str) -> Iterator[App]:
    with App(backend_url) as a:
        yield a


class Waiter:
    """``app.result(job_id)`` in a thread: what it returned or raised, and when."""

    def __init__(self, app: App, job_id: str, timeout: float | None = 10.0) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.returned_at = 0.0
        self._thread = threading.Thread(target=self._run, args=(app, job_id, timeout))
        self._thread.start()

    def _run(self, app: App, job_id: str, timeout: float | None) -> None:
        try:
            self.value = app.result(job_id, timeout)
        except BaseException as exc:  # reported to the test
            self.error = exc
        self.returned_at = time.monotonic()

    def join(self) -> Any:
        self._thread.join(30)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.value


def after_lead(action: Callable[[], None], lead: float = LEAD) -> float:
    """Run ``action`` once a waiter started just before has had ``lead`` seconds
    to begin waiting; when it began (time.monotonic())."""
    time.sleep(lead)
    began = time.monotonic()
    action()
    return began


def complete(
    backend: Any, worker: str, result: bytes, queue: str = "default"
) -> Callable[[], None]:
    claimed = claim_one(backend, worker, (queue,))
    return lambda: backend.complete_many([(claimed.id, claimed.fence, result)])


def test_result__waits_for_the_job_to_complete_and_returns_its_result(
    app: App, backend: Any, worker: str
) -> None:
    job = enqueue_one(backend)
    done = complete(backend, worker, b'{"sent": ["a@x"], "n": 2}')
    waiter = Waiter(app, job.id)
    after_lead(done)
    assert waiter.join() == {"sent": ["a@x"], "n": 2}


def test_result_of_a_job_that_dies__raises_job_failed_with_its_reason_and_error(
    app: App, backend: Any, worker: str
) -> None:
    job = enqueue_one(backend, task="send")
    claimed = claim_one(backend, worker)
    traceback = 'Traceback (most recent call last):\n  ...\nValueError: no such mailbox "a@x"\n'
    waiter = Waiter(app, job.id)
    dead = Decision(State.DEAD, dead_reason=DeadReason.ERROR)
    after_lead(lambda: backend.fail(job.id, claimed.fence, Outcome.ERROR, traceback, dead))
    with pytest.raises(JobFailed, match=r"\(send\) is dead \(error\): ValueError: no such") as e:
        waiter.join()
    assert e.value.dead_reason is DeadReason.ERROR
    assert e.value.error == traceback
    assert (e.value.job.id, e.value.job.state) == (job.id, State.DEAD)


def test_result_of_a_job_cancelled_while_waited_for__raises_job_cancelled(
    app: App, backend: Any
) -> None:
    job = enqueue_one(backend, delay=60)
    waiter = Waiter(app, job.id)
    after_lead(lambda: backend.cancel(job.id))
    with pytest.raises(JobCancelled, match=f"job {job.id} .* was cancelled") as e:
        waiter.join()
    assert e.value.job.state is State.CANCELLED


def test_result_of_an_unfinished_job__raises_timeout_error_when_the_time_runs_out(
    app: App, backend: Any
) -> None:
    job = enqueue_one(backend)
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"still queued after 0\.2 s"):
        app.result(job.id, timeout=0.2)
    assert 0.2 <= time.monotonic() - began < 2.0
    with pytest.raises(TimeoutError):
        app.result(job.id, timeout=0)
    assert backend.get(job.id).state is State.QUEUED


def test_result_of_a_finished_job__returns_or_raises_at_once(
    app: App, backend: Any, worker: str
) -> None:
    job = enqueue_one(backend)
    complete(backend, worker, b"[1, 2]")()
    assert app.result(job.id, timeout=0) == [1, 2]
    assert app.result(job.id) == [1, 2]
    dead = enqueue_one(backend)
    claimed = claim_one(backend, worker)
    backend.fail(dead.id, claimed.fence, Outcome.ERROR, "boom",
                 Decision(State.DEAD, dead_reason=DeadReason.ERROR))  # fmt: skip
    with pytest.raises(JobFailed, match="boom"):
        app.result(dead.id, timeout=0)
    cancelled = enqueue_one(backend)
    backend.cancel(cancelled.id)
    with pytest.raises(JobCancelled):
        app.result(cancelled.id)


def test_result_of_an_unknown_job__raises_job_not_found(app: App) -> None:
    with pytest.raises(JobNotFound):
        app.result(new_job_id(), timeout=1)


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), "1", True])
def test_result_with_a_bad_timeout__is_invalid_input(app: App, timeout: Any) -> None:
    with pytest.raises(InvalidInput, match="timeout must be a number of seconds"):
        app.result(new_job_id(), timeout=timeout)


def test_aresult__waits_on_the_callers_event_loop(app: App, backend: Any, worker: str) -> None:
    job = enqueue_one(backend)
    done = complete(backend, worker, b'"ok"')

    async def main() -> Any:
        async with app:
            waiting = asyncio.ensure_future(app.aresult(job.id, timeout=10))
            await asyncio.to_thread(after_lead, done)
            result = await waiting
            with pytest.raises(TimeoutError):
                await app.aresult(enqueue_one(backend).id, timeout=0.05)
            return result

    assert asyncio.run(main()) == "ok"


def test_result_on_a_queue_with_events_off__still_wakes_by_reading_again(
    app: App, backend: Any, worker: str
) -> None:
    backend.change_policy("default", {"events": False})
    job = enqueue_one(backend)
    done = complete(backend, worker, b"7")
    waiter = Waiter(app, job.id)
    began = after_lead(done)
    assert waiter.join() == 7
    assert waiter.returned_at - began < 2.0  # the backoff's longest pause is 1 s


def test_result__wakes_within_a_second_of_completion(
    app: App, backend: Any, worker: str, backend_url: str
) -> None:
    """Wake-up latency, from the completion's write to the waiter's return,
    while a waiter of another queue reads its events beside."""
    other = enqueue_one(backend, queue="other")
    beside = Waiter(app, other.id, timeout=30)
    latencies = []
    for i in range(8):
        job = enqueue_one(backend, args={"i": i})
        done = complete(backend, worker, str(i).encode())
        waiter = Waiter(app, job.id)
        # At a random phase of the waiter's own pace (SQLite's 50 ms watch, say)
        began = after_lead(done, LEAD + random.random() * 0.05)
        assert waiter.join() == i
        latencies.append(waiter.returned_at - began)
    complete(backend, worker, b"null", "other")()
    assert beside.join() is None
    p50, worst = statistics.median(latencies) * 1000, max(latencies) * 1000
    kind = backend_url.split(":", 1)[0]
    print(f"\nresult wake-up on {kind}: p50 {p50:.1f} ms, max {worst:.1f} ms")
    assert max(latencies) < 1.0


def test_events_now__reads_after_it_every_event_recorded_later_and_none_before(
    backend: Any, worker: str
) -> None:
    empty = backend.events_now("default")
    first = enqueue_one(backend)
    now = backend.events_now("default")
    assert [e.job_id for e in backend.read_events("default", empty, 100)] == [first.id]
    assert backend.read_events("default", now, 100) == []
    second = enqueue_one(backend)
    claim_one(backend, worker)
    enqueue_one(backend, queue="other")
    later = backend.read_events("default", now, 100)
    assert [(e.kind, e.job_id) for e in later] == [("enqueued", second.id), ("started", first.id)]
    assert backend.read_events("default", backend.events_now("default"), 100, 0.05) == []


def test_events_now_of_every_queue__reads_after_it_what_any_queue_records_later(
    backend: Any, worker: str
) -> None:
    before = {enqueue_one(backend, queue=q).id for q in ("a", "z")}
    now = backend.events_now(None)
    later = [enqueue_one(backend, queue=q).id for q in ("z", "a", "m")]
    got = [e.job_id for e in backend.read_events(None, now, 100)]
    fresh = [i for i in got if i not in before]
    if str(backend.url).startswith("redis"):
        # Its cursor is the clock's millisecond: events of it, just before, may come
        # too; and events of several queues in one millisecond come in queue order.
        assert sorted(fresh) == sorted(later)
    else:
        assert fresh == later
        assert not set(got) & before
    assert [e.job_id for e in backend.read_events("a", now, 100)][-1] == later[1]


def test_events_now__of_a_bad_queue_name__is_invalid_input(backend: Any) -> None:
    with pytest.raises(InvalidInput):
        backend.events_now("no spaces allowed")
    for ago in (-1.0, float("nan"), True, "60"):
        with pytest.raises(InvalidInput, match="ago"):
            backend.events_now("default", ago)


def test_events_now_ago__reads_after_it_the_events_of_that_recent_past(backend: Any) -> None:
    assert backend.read_events(None, backend.events_now(None, 60.0), 100) == []  # none yet
    old = enqueue_one(backend, queue="a")
    (recorded,) = backend.read_events("a", None, 100)
    while time.time() < recorded.at + 0.4:  # storage's clock is this host's
        time.sleep(0.01)
    new = [enqueue_one(backend, queue=q).id for q in ("z", "a")]
    for queue, since in ((None, set(new)), ("a", {new[1]})):
        hour = backend.read_events(queue, backend.events_now(queue, 3600.0), 100)
        assert {e.job_id for e in hour} == since | {old.id}
        recent = backend.read_events(queue, backend.events_now(queue, 0.2), 100)
        assert {e.job_id for e in recent} == since and len(recent) == len(since)


def test_many_waiters_of_one_queue__share_one_reader_of_its_events(
    app: App, backend: Any, worker: str
) -> None:
    jobs = backend.enqueue([spec(args={"i": i}) for i in range(30)])
    claimed = backend.claim(worker, ["default"], 30)

    async def main() -> list[Any]:
        async with app:
            mine = await app.abackend()
            waiting = [asyncio.ensure_future(app.aresult(j.id, timeout=10)) for j in jobs]
            # All wait (none finds its job finished at once), unless one fails.
            while len(waiters(mine)) < 30 and not any(w.done() for w in waiting):
                await asyncio.sleep(0.01)
            assert list(watches(mine)) == ["default"]
            items = [(j.id, j.fence, str(j.args["i"]).encode()) for j in claimed]
            await asyncio.to_thread(backend.complete_many, items)
            results = await asyncio.gather(*waiting)
            assert watches(mine) == {}  # the last waiter out stopped the reader
            return results

    assert asyncio.run(main()) == list(range(30))


def watches(backend: Any) -> dict[str, Watch]:
    return _WATCHES.get(backend, {})


def waiters(backend: Any) -> dict[str, Any]:
    watch = watches(backend).get("default")
    return {} if watch is None else watch.waiters
