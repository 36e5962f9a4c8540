"""Exactly-once effects: a handler's writes and its job's completion commit
together in one transaction, fence-checked, or not at all."""

import asyncio
import textwrap
import time

import pytest

from tenure import App, LeaseLost, State, TenureError, WorkerConfig
from tenure.backends import from_url
from tenure.backends.base import WorkerInfo
from tenure.context import JobContext, running
from tenure.core.states import Outcome
from tenure.job import JobSpec
from tenure.worker import Supervisor
from tests.conftest import BACKENDS, fresh_storage_url

SQL_BACKENDS = [kind for kind in BACKENDS if kind in ("sqlite", "postgres")]


@pytest.fixture(params=SQL_BACKENDS)
def sql_url(request, tmp_path):
    """Storage of a SQL backend: job.transaction() is theirs (Redis has no such thing).
    The handlers' tables come first, as in an application's own database."""
    url = fresh_storage_url(request.param, request, tmp_path)
    return f"{url}?adopt=1" if request.param == "sqlite" else url


@pytest.fixture
def backend(sql_url, open_backend):
    return open_backend(sql_url)


@pytest.fixture
def effects(sql_url, portal):
    """The backend as a handler's process holds it, for its own transactions."""
    backend = from_url(sql_url)
    with _raw(backend) as conn:
        ddl(conn, ACCOUNTS)
    yield backend
    portal.run(backend.close())


def ddl(conn, statements):
    for statement in statements:
        conn.execute(statement)


ACCOUNTS = [
    "CREATE TABLE IF NOT EXISTS accounts (name text PRIMARY KEY, balance integer NOT NULL)",
    "INSERT INTO accounts VALUES ('alice', 100)",
]


def balance(effects):
    with _raw(effects) as conn:
        return conn.execute("SELECT balance FROM accounts WHERE name = 'alice'").fetchone()[0]


class _raw:
    """A plain connection of the backend's kind (for setting up and reading)."""

    def __init__(self, backend):
        self.backend = backend

    def __enter__(self):
        if hasattr(self.backend, "conninfo"):
            import psycopg

            self.conn = psycopg.connect(self.backend.conninfo, autocommit=True)
        else:
            import sqlite3

            self.conn = sqlite3.connect(self.backend.path, isolation_level=None)
        return self.conn

    def __exit__(self, *exc):
        self.conn.close()


def claimed(backend, worker="w1"):
    backend.register_worker(WorkerInfo(worker, "host", 1, ("default",)))
    backend.enqueue([JobSpec.create("pay", {"amount": 10})])
    [job] = backend.claim(worker, ["default"], 1)
    return job


def test_the_effect_and_the_completion_commit_together(effects, backend):
    job = claimed(backend)
    with effects.transaction(job.id, job.fence, {"paid": 10}) as conn:
        conn.execute("UPDATE accounts SET balance = balance - 10 WHERE name = 'alice'")
    got = backend.get(job.id)
    assert got.state is State.COMPLETED and got.result == {"paid": 10}
    assert got.history[0].outcome is Outcome.COMPLETED
    assert balance(effects) == 90


def test_a_stale_fence_rolls_the_effect_back(sql_url, effects, backend, open_backend):
    holder = open_backend(sql_url)
    job = claimed(holder, "doomed")
    holder.close()  # the worker "dies": its job is recovered and claimed again
    deadline = time.monotonic() + 10  # the server notices a closed session a moment later
    while backend.get(job.id).state is State.ACTIVE and time.monotonic() < deadline:
        backend.rescue()
    backend.register_worker(WorkerInfo("w2", "host", 2, ("default",)))
    [again] = backend.claim("w2", ["default"], 1)
    assert again.fence == job.fence + 1
    with (
        pytest.raises(LeaseLost),
        effects.transaction(job.id, job.fence) as conn,  # the old attempt, late
    ):
        conn.execute("UPDATE accounts SET balance = balance - 10 WHERE name = 'alice'")
    assert balance(effects) == 100  # never applied by the stale attempt
    with effects.transaction(again.id, again.fence) as conn:
        conn.execute("UPDATE accounts SET balance = balance - 10 WHERE name = 'alice'")
    assert balance(effects) == 90  # applied exactly once
    assert backend.get(job.id).state is State.COMPLETED


def test_an_exception_in_the_block_rolls_everything_back(effects, backend):
    job = claimed(backend)
    with pytest.raises(ZeroDivisionError), effects.transaction(job.id, job.fence) as conn:
        conn.execute("UPDATE accounts SET balance = balance - 10 WHERE name = 'alice'")
        1 / 0  # noqa: B018
    assert balance(effects) == 100
    assert backend.get(job.id).state is State.ACTIVE


def test_a_job_context_settles_once(effects, backend):
    job = claimed(backend)
    ctx = JobContext(job.id, job.task, job.queue, 1, job.fence, job.args, print, print,
                     effects.transaction)  # fmt: skip
    with running(ctx), ctx.transaction() as conn:
        conn.execute("UPDATE accounts SET balance = balance - 10 WHERE name = 'alice'")
    assert ctx.settled
    with pytest.raises(TenureError, match="already completed"), ctx.transaction():
        pass


PAYMENTS = """
import tenure

app = tenure.App({url!r})

@app.task
def pay(name: str, amount: int) -> None:
    with tenure.current_job().transaction(result={{"paid": amount}}) as conn:
        conn.execute("UPDATE accounts SET balance = balance - %s WHERE name = '%s'"
                     % (int(amount), name.replace("'", "")))
"""


def test_a_worker_runs_a_payment_exactly_once(sql_url, effects, tmp_path, monkeypatch):
    name = f"payments_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(PAYMENTS.format(url=sql_url)))
    monkeypatch.syspath_prepend(str(tmp_path))
    app: App = __import__(name).app
    jobs = app.enqueue_many("pay", [{"name": "alice", "amount": 10}] * 3)
    config = WorkerConfig(burst=True, idle_poll_max=0.05, concurrency=2)
    asyncio.run(Supervisor(app, config).run())
    assert [app.get_job(j.id).result for j in jobs] == [{"paid": 10}] * 3
    assert all(app.get_job(j.id).state is State.COMPLETED for j in jobs)
    assert balance(effects) == 70
    app.close()
