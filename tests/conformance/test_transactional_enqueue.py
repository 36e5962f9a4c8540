"""Enqueue in the caller's transaction (``conn=``), on PostgreSQL and SQLite:
the job and its ``enqueued`` event exist if and only if the caller commits,
tenure never ends the caller's transaction, and an idle worker is woken at
commit. Redis has no transaction to share, and says so."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure import App, InvalidInput, JobNotFound, State, WorkerConfig
from tenure.backends import from_url
from tenure.worker import Supervisor
from tests.conformance.helpers import wait_for
from tests.conftest import BACKENDS, fresh_storage_url

Connect = Callable[[], Any]


@pytest.fixture(params=[b for b in BACKENDS if b in ("sqlite", "postgres")])
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Fresh storage of a backend with transactions to share."""
    return fresh_storage_url(request.param, request, tmp_path)


@pytest.fixture
def app(sql_url: str) -> Iterator[App]:
    with App(sql_url) as a:
        a.queues()  # opened once: the schema is migrated, as by a worker's start
        yield a


@pytest.fixture
def connect(sql_url: str) -> Iterator[Connect]:
    """A connection of the caller's own to the App's database, with a table of
    theirs; closed at teardown."""
    made: list[Any] = []

    def connect_() -> Any:
        if sql_url.startswith("sqlite"):
            conn: Any = sqlite3.connect(sql_url.removeprefix("sqlite:///"))
        else:
            conn = psycopg.connect(from_url(sql_url).conninfo)  # type: ignore[attr-defined]
        made.append(conn)
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total INT)")
        conn.commit()
        return conn

    yield connect_
    for conn in made:
        conn.close()


def kinds_of(app: App, job_id: str) -> list[str]:
    """The kinds of the job's events that readers can see now (on PostgreSQL,
    a transaction still running anywhere on the server, another test's, holds
    back newer events for a moment)."""
    return [e.kind for e in app.events(timeout=0.0) if e.job_id == job_id]


def test_a_job_enqueued_in_a_transaction__exists_once_the_caller_commits(
    app: App, connect: Connect
) -> None:
    @app.task
    def ship(order: str) -> None: ...

    conn = connect()
    conn.execute("INSERT INTO orders VALUES ('o1', 30)")
    job = ship.with_options(conn=conn).enqueue("o1")
    assert job.state is State.QUEUED and job.args == {"order": "o1"}
    with pytest.raises(JobNotFound):  # others do not see it before the commit
        app.get_job(job.id)
    conn.commit()
    assert app.get_job(job.id).state is State.QUEUED
    wait_for(lambda: kinds_of(app, job.id) == ["enqueued"], timeout=10.0)


def test_a_job_enqueued_in_a_transaction_rolled_back__never_existed(
    app: App, connect: Connect
) -> None:
    conn = connect()
    conn.execute("INSERT INTO orders VALUES ('o1', 30)")
    job = app.enqueue("ship", {"order": "o1"}, conn=conn)
    conn.rollback()
    with pytest.raises(JobNotFound):
        app.get_job(job.id)
    assert kinds_of(app, job.id) == []
    assert app.queue().counts()[State.QUEUED] == 0
    # the connection goes on as the caller's, with nothing of tenure's left in it
    conn.execute("INSERT INTO orders VALUES ('o2', 10)")
    conn.commit()
    assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 1


def test_a_key_within_a_transaction__returns_the_job_that_holds_it(
    app: App, connect: Connect
) -> None:
    conn = connect()
    first = app.enqueue("ship", {"n": 1}, key="order-o1", conn=conn)
    again = app.enqueue("ship", {"n": 2}, key="order-o1", conn=conn)
    many = app.enqueue_many("ship", [{"n": 3}, {"n": 4}], key="order-o1", conn=conn)
    assert again.id == first.id and [j.id for j in many] == [first.id] * 2
    conn.commit()
    assert app.enqueue("ship", {"n": 5}, key="order-o1").id == first.id
    assert app.get_job(first.id).args == {"n": 1}
    assert app.queue().counts()[State.QUEUED] == 1


def test_an_idle_worker__runs_a_job_enqueued_in_a_transaction_once_it_commits(
    app: App, connect: Connect
) -> None:
    ran: list[str] = []

    @app.task
    def ship(order: str) -> None:
        ran.append(order)

    # Polls once a minute: only a wake-up at commit gets the job run within the test.
    config = WorkerConfig(pool="thread", concurrency=1, idle_poll_min=60, idle_poll_max=60)
    supervisor = Supervisor(app, config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(supervisor.run(),))
    thread.start()
    try:
        ship.enqueue("o0")  # run once: the worker listens, then idles
        wait_for(lambda: ran == ["o0"], timeout=10)
        conn = connect()
        job = ship.with_options(conn=conn).enqueue("o1")
        conn.commit()
        wait_for(lambda: app.get_job(job.id).state is State.COMPLETED, timeout=10)
        assert ran == ["o0", "o1"]
    finally:
        loop.call_soon_threadsafe(supervisor.request_stop)
        thread.join(30)
        loop.close()


@pytest.mark.parametrize("sql_url", ["postgres"], indirect=True)
def test_a_postgres_async_connection__enqueues_in_its_transaction(app: App, sql_url: str) -> None:

    @app.task
    def ship(order: str) -> None: ...

    async def enqueue(commit: bool) -> str:
        conninfo = from_url(sql_url).conninfo  # type: ignore[attr-defined]
        async with await psycopg.AsyncConnection.connect(conninfo) as aconn:
            job = await ship.with_options(conn=aconn).aenqueue("o1")
            keyed = await app.aenqueue("ship", {"order": "o1"}, key="k", conn=aconn)
            assert (await app.aenqueue("ship", {"order": "o2"}, key="k", conn=aconn)).id == keyed.id
            await (aconn.commit() if commit else aconn.rollback())
            return job.id

    committed = asyncio.run(enqueue(commit=True))
    rolled_back = asyncio.run(enqueue(commit=False))
    assert app.get_job(committed).state is State.QUEUED
    with pytest.raises(JobNotFound):
        app.get_job(rolled_back)
    assert app.queue().counts()[State.QUEUED] == 2


# -- bad input: refused with a clear error, and the caller's transaction intact --


def test_conn_of_the_wrong_kind__is_refused(
    backend_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Redis's App too: it has no transaction to share."""
    app = App(backend_url)
    other: Any = sqlite3.connect(tmp_path / "other.db")
    if backend_url.startswith("sqlite"):  # a PostgreSQL connection instead
        other.close()
        other = psycopg.connect(request.getfixturevalue("postgres_server").url())
    try:
        with pytest.raises(InvalidInput, match=r"conn= .*(takes|has none to share)"):
            app.task(lambda: None, name="t").with_options(conn=other)
        with pytest.raises(InvalidInput, match=r"conn= .*(takes|has none to share)"):
            app.enqueue("t", conn="postgresql://not-a-connection")
    finally:
        other.close()
        app.close()


def test_a_closed_connection__is_refused(app: App, connect: Connect) -> None:
    conn = connect()
    conn.close()
    with pytest.raises(InvalidInput, match="closed"):
        app.enqueue("t", conn=conn)


def test_a_connection_in_autocommit_outside_a_transaction__is_refused(
    app: App, connect: Connect
) -> None:
    conn = connect()
    if isinstance(conn, sqlite3.Connection):
        conn.isolation_level = None
    else:
        conn.autocommit = True
    with pytest.raises(InvalidInput, match="autocommit"):
        app.enqueue("t", conn=conn)
    assert app.queue().counts()[State.QUEUED] == 0


@pytest.mark.parametrize("sql_url", ["sqlite"], indirect=True)
def test_a_sqlite_connection_to_another_file__is_refused(
    app: App, sql_url: str, tmp_path: Path
) -> None:
    other = sqlite3.connect(tmp_path / "other.db")
    try:
        with pytest.raises(InvalidInput, match="not to this App's SQLite database"):
            app.enqueue("t", conn=other)
        assert not other.in_transaction
    finally:
        other.close()


def test_a_database_not_migrated_yet__is_refused_and_the_transaction_goes_on(
    sql_url: str, connect: Connect
) -> None:
    conn = connect()  # on storage that no App opened yet
    conn.execute("INSERT INTO orders VALUES ('o1', 30)")
    with App(sql_url) as fresh, pytest.raises(InvalidInput, match="not migrated yet"):
        fresh.enqueue("t", conn=conn)
    conn.commit()  # the caller's transaction was not aborted
    assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 1


@pytest.mark.parametrize("sql_url", ["postgres"], indirect=True)
def test_postgres_refuses_a_failed_transaction_and_the_wrong_twin(
    app: App, sql_url: str, connect: Connect
) -> None:
    conn = connect()
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT * FROM no_such_table")
    with pytest.raises(InvalidInput, match="transaction has failed"):
        app.enqueue("t", conn=conn)
    conn.rollback()
    with pytest.raises(InvalidInput, match="call enqueue"):
        asyncio.run(app.aenqueue("t", conn=conn))


def test_debounce_and_unique_for__hold_in_the_callers_transaction(
    app: App, connect: Connect
) -> None:
    @app.task
    def reindex(n: int) -> None: ...

    conn = connect()
    debounced = reindex.with_options(conn=conn, key="tenant-7", debounce=30.0)
    first = debounced.enqueue(1)
    again = debounced.enqueue(2)
    unique = reindex.with_options(conn=conn, key="nightly", unique_for=3600.0)
    assert unique.enqueue(3).id == unique.enqueue(4).id
    conn.commit()
    assert again.id == first.id
    assert app.get_job(first.id).args == {"n": 2}
    assert app.get_job(first.id).state is State.SCHEDULED
