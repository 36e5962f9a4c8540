"""Workflows run by real workers: steps see their upstream's results, spawn
work at run time, fail or may fail, are cancelled and resumed from the DLQ;
``app.result`` of the workflow waits for its last step."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure import App, JobCancelled, JobFailed, State, WorkerConfig, WorkflowState
from tenure.errors import JobNotFound
from tenure.worker import Supervisor
from tests.conftest import fresh_storage_url

MODULE = """
import os, time, tenure

app = tenure.App({url!r})

@app.task
def number(n: int) -> int:
    return n

@app.task
def times(k: int) -> int:
    [n] = tenure.current_job().upstream
    return n * k

@app.task
async def total() -> dict:
    job = tenure.current_job()
    return {{"sum": sum(job.upstream), "workflow": job.workflow}}

@app.task
def split(n: int) -> str:
    job = tenure.current_job()
    job.spawn(tenure.group(*(chunk.step(i) for i in range(n))))
    return "split"

@app.task
def chunk(i: int) -> int:
    return i * i

@app.task
def merge() -> list:
    return tenure.current_job().upstream

@app.task
def bad() -> None:
    raise tenure.Fail("bad on purpose")

@app.task
def once_bad(flag: str) -> str:
    if not os.path.exists(flag):
        raise tenure.Fail("not yet")
    return "fixed"

@app.task
def seen() -> list:
    return [[type(v).__name__, v.dead_reason if isinstance(v, tenure.Failed) else v]
            for v in tenure.current_job().upstream]

@app.task
def slow() -> None:
    while not tenure.current_job().cancelled:
        time.sleep(0.01)
"""


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def flows(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: Any) -> Iterator[Any]:
    """The tasks' module, its App on fresh storage of each backend."""
    url = fresh_storage_url(request.param, request, tmp_path)
    name = f"flows_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE.format(url=url)))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    yield module
    module.app.close()
    sys.modules.pop(name, None)


def work(app: App, pool: str = "process") -> None:
    """Run a worker until no job is left to claim (burst)."""
    config = WorkerConfig(burst=True, idle_poll_max=0.05, concurrency=2, pool=pool)
    worker = threading.Thread(target=asyncio.run, args=(Supervisor(app, config).run(),))
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the worker did not end"


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_a_chain_of_a_fan_out_and_a_fan_in__passes_each_step_its_upstreams_results(
    flows: Any, pool: str
) -> None:
    import tenure

    m = flows
    run = m.app.workflow(
        tenure.chain(
            m.number.step(2), tenure.group(m.times.step(3), m.times.step(5)), m.total.step()
        )
    )
    assert [j.task for j in run.jobs] == ["number", "times", "times", "total"]
    assert [j.state for j in run.jobs] == [State.QUEUED] + [State.WAITING] * 3
    work(m.app, pool)
    assert m.app.result(run.id, timeout=10) == {"sum": 16, "workflow": run.id}
    assert m.app.get_workflow(run.id).state is WorkflowState.COMPLETED


def test_a_flow_ending_with_a_group__has_its_results_in_order(flows: Any) -> None:
    import tenure

    m = flows
    run = m.app.workflow(
        tenure.chain(m.number.step(7), tenure.group(*(m.times.step(k) for k in (1, 2, 3))))
    )
    work(m.app)
    assert m.app.result(run.id, timeout=10) == [7, 14, 21]


def test_a_spawn__runs_and_what_waits_on_the_spawner_gets_its_results(flows: Any) -> None:
    import tenure

    m = flows
    run = m.app.workflow(tenure.chain(m.split.step(4), m.merge.step()))
    work(m.app)
    assert m.app.result(run.id, timeout=10) == ["split", 0, 1, 4, 9]
    assert len(m.app.get_workflow(run.id).jobs) == 6


def test_a_may_fail_step__hands_its_dependents_a_failed_value(flows: Any) -> None:
    import tenure

    m = flows
    flow = tenure.chain(
        tenure.group(m.bad.with_options(may_fail=True).step(), m.number.step(1)), m.seen.step()
    )
    run = m.app.workflow(flow)
    work(m.app)
    assert m.app.result(run.id, timeout=10) == [["Failed", "error"], ["int", 1]]


def test_a_dead_step__fails_the_workflow_naming_it_and_its_retry_resumes_it(
    flows: Any, tmp_path: Path
) -> None:
    import tenure

    m = flows
    flag = tmp_path / "fixed"
    run = m.app.workflow(tenure.chain(m.once_bad.step(str(flag)), m.number.step(9)))
    work(m.app)
    with pytest.raises(JobFailed) as failed:
        m.app.result(run.id, timeout=10)
    assert failed.value.job.task == "once_bad"
    after = m.app.get_job(run.jobs[1].id)
    assert (after.state, after.cancel_reason) == (State.CANCELLED, "upstream_failed")
    assert m.app.get_workflow(run.id).state is WorkflowState.FAILED
    flag.touch()
    assert m.app.queue().retry_dead([run.jobs[0].id]) == 1
    assert m.app.get_job(run.jobs[1].id).state is State.WAITING
    work(m.app)
    assert m.app.result(run.id, timeout=10) == 9


def test_cancelling_a_workflow__stops_its_running_step_and_cancels_the_rest(flows: Any) -> None:
    import tenure

    m = flows
    run = m.app.workflow(tenure.chain(m.slow.step(), m.number.step(1)))
    m.app.queue().set_policy(heartbeat_interval=0.1, lease_ttl=1.0, cancel_grace=1.0)
    worker = threading.Thread(target=work, args=(m.app,))
    worker.start()
    try:
        for _ in range(500):
            if m.app.get_job(run.jobs[0].id).state is State.ACTIVE:
                break
            threading.Event().wait(0.01)
        assert m.app.cancel(run.id).state is WorkflowState.CANCELLED
    finally:
        worker.join(60)
    with pytest.raises(JobCancelled):
        m.app.result(run.id, timeout=10)
    assert {j.state for j in m.app.get_workflow(run.id).jobs} == {State.CANCELLED}


def test_a_workflow_key__returns_the_running_one(flows: Any) -> None:
    import tenure

    m = flows
    first = m.app.workflow(tenure.chain(m.number.step(1), m.number.step(2)), key="nightly")
    again = m.app.workflow(tenure.chain(m.number.step(1), m.number.step(2)), key="nightly")
    assert again.id == first.id
    work(m.app)
    assert m.app.result(first.id, timeout=10) == 2


def test_a_workflow_in_a_rolled_back_transaction__never_existed(tmp_path: Path) -> None:
    import tenure

    url = f"sqlite:///{tmp_path / 'tx.db'}"
    with App(url) as app:

        @app.task
        def step(n: int) -> int:
            return n

        app.queues()  # creates the schema
        conn = sqlite3.connect(tmp_path / "tx.db")
        run = app.workflow(tenure.chain(step.step(1), step.step(2)), conn=conn)
        conn.rollback()
        with pytest.raises(JobNotFound):
            app.get_workflow(run.id)
        kept = app.workflow(tenure.chain(step.step(1), step.step(2)), conn=conn)
        conn.commit()
        assert [j.state for j in app.get_workflow(kept.id).jobs] == [State.QUEUED, State.WAITING]
        conn.close()
