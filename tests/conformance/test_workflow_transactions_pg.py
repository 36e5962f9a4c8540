"""Workflows in transactions of the user's code, on PostgreSQL: one enqueued
in a caller's transaction exists, every step of it, if and only if the caller
commits; a step completed in its handler's own transaction releases what
waits for it at that commit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure.core.states import State
from tenure.core.workflows import WorkflowState, chain, compile_flow, group
from tenure.errors import JobNotFound
from tests.conformance.helpers import nonzero_counts, register
from tests.conformance.test_workflows import step
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
