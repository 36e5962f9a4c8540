"""Test mode: ``tenure.testing.run`` calls a handler here with a real
``current_job()`` and stores nothing; ``tenure.testing.drain`` runs a real
worker in this process until the App's queues hold no due job."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
import tenure.testing
from tenure import App, DeadReason, Fail, InvalidInput, JobFailed, Retry, State, TenureError
from tenure.testing import Drained


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    with App(f"sqlite:///{tmp_path / 'never.db'}") as a:
        yield a
    assert not (tmp_path / "never.db").exists()  # run() stores nothing


def test_run__calls_a_sync_handler_with_a_real_current_job_and_stores_nothing(app: App) -> None:
    @app.task(queue="mail")
    def send(to: str, subject: str = "Hi") -> dict[str, Any]:
        job = tenure.current_job()
        job.progress({"step": 1})
        job.heartbeat()
        return {"id": job.id, "attempt": job.attempt, "fence": job.fence, "queue": job.queue,
                "args": job.args, "to": to, "subject": subject}  # fmt: skip

    ran = tenure.testing.attempt(send, "a@x", subject="Yo")
    assert ran.result == {"id": ran.context.id if ran.context else None, "attempt": 1,
                          "fence": 1, "queue": "mail", "args": {"to": "a@x", "subject": "Yo"},
                          "to": "a@x", "subject": "Yo"}  # fmt: skip
    assert ran.progress == [{"step": 1}]
    assert tenure.testing.run(send, to="b@x")["to"] == "b@x"
    with pytest.raises(TenureError, match="only available inside a running handler"):
        tenure.current_job()


def test_run__of_an_async_handler__awaits_it_and_arun_runs_it_on_the_callers_loop(
    app: App,
) -> None:
    @app.task
    async def fetch(url: str) -> list[Any]:
        await asyncio.sleep(0)
        tenure.current_job().progress(url)
        return [url, tenure.current_job().attempt]

    @app.task
    def double(n: int) -> int:
        return 2 * n + tenure.current_job().attempt - 1

    assert tenure.testing.run(fetch, "https://x") == ["https://x", 1]

    async def main() -> tuple[list[Any], int]:
        with pytest.raises(TenureError, match=r"use await tenure\.testing\.arun"):
            tenure.testing.run(fetch, "https://y")
        return await tenure.testing.arun(fetch, "https://z"), await tenure.testing.arun(double, 4)

    assert asyncio.run(main()) == (["https://z", 1], 8)


def test_run__goes_through_json_and_raises_what_the_handler_raises(app: App) -> None:
    @app.task
    def shape(items: list[Any]) -> Any:
        if not items:
            raise Fail("nothing to do")
        return set(items) if items == ["a set"] else items[0]

    assert tenure.testing.run(shape, [(1, 2)]) == [1, 2]  # a tuple comes back a list
    with pytest.raises(InvalidInput, match="job arguments"):
        tenure.testing.run(shape, [{1, 2}])
    with pytest.raises(InvalidInput, match="job result"):
        tenure.testing.run(shape, ["a set"])
    with pytest.raises(InvalidInput, match="arguments do not fit task 'shape'"):
        tenure.testing.run(shape, [], extra=1)  # type: ignore[call-arg]
    with pytest.raises(Fail, match="nothing to do"):
        tenure.testing.run(shape, [])


def test_run__applies_the_apps_around_attempt_hooks_and_refuses_a_transaction(
    app: App,
) -> None:
    seen = []

    @app.hooks.around_attempt
    @contextlib.contextmanager
    def watch(job: tenure.JobContext) -> Iterator[None]:
        seen.append(("before", job.task))
        try:
            yield
        except TenureError as exc:
            seen.append(("raised", type(exc).__name__))
            raise

    @app.task
    def pay() -> None:
        with tenure.current_job().transaction():
            pass

    with pytest.raises(TenureError, match=r"test such a handler with tenure\.testing\.drain"):
        tenure.testing.run(pay)
    assert seen == [("before", "pay"), ("raised", "TenureError")]


def test_an_app_on_sqlite_in_memory__is_refused_with_a_clear_error() -> None:
    with pytest.raises(InvalidInput, match=r"a worker .* would never see"):
        App("sqlite:///:memory:")


def test_drain__runs_every_due_job_and_those_handlers_enqueue_then_returns(
    backend_url: str,
) -> None:
    with App(backend_url) as app:

        @app.task
        def step(n: int) -> int:
            if n == 0:
                raise Fail("zero")
            if n == 3:
                follow_up.enqueue(n)
            return n * 10

        @app.task(queue="later")
        def follow_up(n: int) -> str:
            return f"after {n}"

        @app.task
        def flaky(until: int) -> int:
            attempt = tenure.current_job().attempt
            if attempt < until:
                raise Retry(in_=0)
            if until == 0:
                raise Retry(in_=60)  # not due before the drain ends: it stays
            return attempt

        jobs = [step.enqueue(n) for n in (0, 1, 3)] + [flaky.enqueue(2), flaky.enqueue(0)]
        drained = tenure.testing.drain(app)
        assert drained == Drained(attempts=7, completed=4, dead=1, scheduled=1)
        assert [app.result(j.id, timeout=0) for j in jobs[1:4]] == [10, 30, 2]
        with pytest.raises(JobFailed) as e:
            app.result(jobs[0].id, timeout=0)
        assert e.value.dead_reason is DeadReason.ERROR
        assert app.get_job(jobs[4].id).state is State.SCHEDULED
        [later] = app.queue("later").jobs(State.COMPLETED).jobs
        assert later.result == "after 3"
        assert tenure.testing.drain(app) == Drained(0, 0, 0, 1)
