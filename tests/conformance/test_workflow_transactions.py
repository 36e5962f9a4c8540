"""Workflows and transactions that are not tenure's own, on PostgreSQL and
SQLite: a workflow enqueued in the caller's transaction exists if and only if
the caller commits, and a step completed in its handler's own transaction
releases what waits on it as it commits."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure.backends import from_url
from tenure.core.states import State
from tenure.core.workflows import Step, WorkflowState, chain, compile_flow
from tenure.errors import JobNotFound, LeaseLost
from tenure.portal import Portal
from tests.conformance.helpers import register, spec
from tests.conftest import BACKENDS, SyncBackend, fresh_storage_url

Connect = Callable[[], Any]


@pytest.fixture(params=[b for b in BACKENDS if b in ("sqlite", "postgres")])
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return fresh_storage_url(request.param, request, tmp_path)


@pytest.fixture
def backend(sql_url: str, open_backend: Callable[[str], SyncBackend]) -> SyncBackend:
    return open_backend(sql_url)  # opened: the schema is migrated


@pytest.fixture
def connect(sql_url: str, backend: SyncBackend) -> Iterator[Connect]:
    """A connection of the caller's own to the backend's database; closed at teardown."""
    made: list[Any] = []

    def connect_() -> Any:
        if sql_url.startswith("sqlite"):
            conn: Any = sqlite3.connect(sql_url.removeprefix("sqlite:///"))
        else:
            conn = psycopg.connect(backend.inner.conninfo)
        made.append(conn)
        return conn

    yield connect_
    for conn in made:
        conn.close()


@pytest.fixture
def effects(sql_url: str, portal: Portal) -> Iterator[Any]:
    """The backend as a handler's process holds it, for its own transactions."""
    held = from_url(sql_url)
    yield held
    portal.run(held.close())


def step(name: str) -> Step:
    return Step(spec(name, {"name": name}))


def test_a_workflow_enqueued_in_a_transaction__exists_once_the_caller_commits(
    backend: SyncBackend, connect: Connect
) -> None:
    wf = compile_flow(chain(step("a"), step("b")))
    conn = connect()
    stored = backend.inner.callers.enqueue_workflow(conn, wf)
    assert stored.id == wf.id and [j.state for j in stored.jobs] == [State.QUEUED, State.WAITING]
    with pytest.raises(JobNotFound):  # others do not see it before the commit
        backend.get_workflow(wf.id)
    conn.commit()
    assert backend.get_workflow(wf.id).state == WorkflowState.RUNNING
    assert [j.state for j in backend.get_workflow(wf.id).jobs] == [State.QUEUED, State.WAITING]


def test_a_workflow_enqueued_in_a_transaction_rolled_back__never_existed(
    backend: SyncBackend, connect: Connect
) -> None:
    wf = compile_flow(chain(step("a"), step("b")))
    conn = connect()
    backend.inner.callers.enqueue_workflow(conn, wf)
    conn.rollback()
    with pytest.raises(JobNotFound):
        backend.get_workflow(wf.id)
    assert backend.get_many([s.spec.id for s in wf.steps]) == []


def test_a_step_completed_in_its_handlers_transaction__releases_what_waits_on_it(
    backend: SyncBackend, effects: Any
) -> None:
    worker = register(backend, "worker-1")
    wf = compile_flow(chain(step("a"), step("b")))
    a_id, b_id = (s.spec.id for s in wf.steps)
    backend.enqueue_workflow(wf)
    [a] = backend.claim(worker, ["default"], 10)
    with pytest.raises(ZeroDivisionError), effects.transaction(a.id, a.fence, "a"):
        1 / 0  # noqa: B018 -- the handler fails: nothing commits, nothing is released
    assert backend.get(b_id).state == State.WAITING
    with effects.transaction(a.id, a.fence, "a"):
        pass
    assert backend.get(a_id).state == State.COMPLETED
    [b] = backend.claim(worker, ["default"], 10)
    assert (b.id, b.upstream) == (b_id, (a_id,))
    with pytest.raises(LeaseLost), effects.transaction(a.id, a.fence, "again"):
        pass
    assert backend.get_workflow(wf.id).state == WorkflowState.RUNNING
