"""Workflows and transactions, on PostgreSQL: one enqueued in a caller's
transaction exists, every step of it, if and only if the caller commits; a
step completed in its handler's own transaction releases what waits for it at
that commit; two transactions completing upstreams of one fan-in each count
once. (And one rule every backend may share: a DLQ retry in a workflow
cancelled by hand makes nothing wait again.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure.core.states import Outcome, State
from tenure.core.workflows import WorkflowState, chain, compile_flow, group
from tenure.errors import JobNotFound
from tests.conformance.helpers import decision_for, nonzero_counts, register, wait_for
from tests.conformance.test_workflows import kinds, step
from tests.conftest import SyncBackend, fresh_storage_url


@pytest.fixture
def pg(
    request: pytest.FixtureRequest, tmp_path: Path, open_backend: Callable[[str], SyncBackend]
) -> SyncBackend:
    return open_backend(fresh_storage_url("postgres", request, tmp_path))


@pytest.fixture
def conn(pg: SyncBackend) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg.inner.conninfo) as c:
        yield c


def test_a_workflow_enqueued_in_a_transaction__exists_once_the_caller_commits(
    pg: SyncBackend, conn: psycopg.Connection[Any]
) -> None:
    spec = compile_flow(chain(group(step("a"), step("b")), step("c")))
    stored = pg.inner.callers.enqueue_workflow(conn, spec)
    assert [j.state for j in stored.jobs] == [State.QUEUED, State.QUEUED, State.WAITING]
    with pytest.raises(JobNotFound):  # others do not see it before the commit
        pg.get_workflow(spec.id)
    conn.commit()
    found = pg.get_workflow(spec.id)
    assert found.state == WorkflowState.RUNNING
    assert [j.id for j in found.jobs] == [s.spec.id for s in spec.steps]
    assert found.jobs[2].upstream == (spec.steps[0].spec.id, spec.steps[1].spec.id)


def test_a_workflow_enqueued_in_a_transaction_rolled_back__leaves_nothing(
    pg: SyncBackend, conn: psycopg.Connection[Any]
) -> None:
    spec = compile_flow(chain(step("a"), step("b")), key="nightly")
    pg.inner.callers.enqueue_workflow(conn, spec)
    conn.rollback()
    with pytest.raises(JobNotFound):
        pg.get_workflow(spec.id)
    assert nonzero_counts(pg) == {}
    again = pg.enqueue_workflow(compile_flow(chain(step("a")), key="nightly"))
    assert again.id != spec.id  # the key was never held


def test_a_workflow_enqueued_on_an_async_connection__commits_with_it(pg: SyncBackend) -> None:
    spec = compile_flow(chain(step("a"), step("b")))

    async def enqueue() -> None:
        async with await psycopg.AsyncConnection.connect(pg.inner.conninfo) as aconn:
            await pg.inner.callers.aenqueue_workflow(aconn, spec)
            await aconn.commit()

    asyncio.run(enqueue())
    assert pg.get_workflow(spec.id).state == WorkflowState.RUNNING


def test_a_step_completed_in_its_handlers_transaction__releases_at_commit(
    pg: SyncBackend,
) -> None:
    worker = register(pg, "worker-1")
    stored = pg.enqueue_workflow(compile_flow(chain(step("a"), step("b"))))
    a, b = stored.jobs
    [claimed] = pg.claim(worker, ["default"], 10)
    with pytest.raises(RuntimeError), pg.inner.transaction(claimed.id, claimed.fence, 1):
        raise RuntimeError("the handler's effect failed")  # rolled back: nothing moves
    assert pg.get(b.id).state == State.WAITING
    with pg.inner.transaction(claimed.id, claimed.fence, 1) as own:
        own.execute("SELECT 1")
    assert pg.get(a.id).state == State.COMPLETED
    assert pg.get(b.id).state == State.QUEUED


def test_concurrent_completions_of_a_fan_in__each_count_once(pg: SyncBackend) -> None:
    """The second completion waits for the first's lock on the dependent, then
    counts on what the first committed: the dependent is released once."""
    worker = register(pg, "worker-1")
    stored = pg.enqueue_workflow(compile_flow(chain(group(step("a"), step("b")), step("c"))))
    c = stored.jobs[2]
    claimed = {j.task: j for j in pg.claim(worker, ["default"], 10)}
    a, b = claimed["a"], claimed["b"]
    params = {"id": a.id, "fence": a.fence, "result": "1", "channel": pg.inner.db.channel}
    url = pg.inner.conninfo
    with psycopg.connect(url) as first, psycopg.connect(url, autocommit=True) as look:
        first.execute(pg.inner.q["complete"], params)  # c locked, not committed
        second = threading.Thread(target=pg.complete, args=(b.id, b.fence, 2))
        second.start()
        wait_for(lambda: look.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        ).fetchone()[0])  # fmt: skip
        first.commit()
        second.join(timeout=10)
    assert not second.is_alive()
    assert pg.get(c.id).state == State.QUEUED
    assert kinds(pg, c).count("ready") == 1


def test_a_dead_step_retried_in_a_cancelled_workflow__wakes_nothing_that_waited(
    pg: SyncBackend,
) -> None:
    worker = register(pg, "worker-1")
    stored = pg.enqueue_workflow(compile_flow(chain(step("a"), step("b"))))
    a, b = stored.jobs
    [claimed] = pg.claim(worker, ["default"], 10)
    fatal = decision_for(pg, claimed, Outcome.ERROR, fatal=True)
    pg.fail(claimed.id, claimed.fence, Outcome.ERROR, "Fail", fatal)
    assert pg.cancel_workflow(stored.id).state == WorkflowState.CANCELLED
    assert pg.retry_dead("default", [a.id]) == 1
    assert pg.get(b.id).state == State.CANCELLED
    assert pg.get_workflow(stored.id).state == WorkflowState.CANCELLED
