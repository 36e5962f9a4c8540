"""tenure through PgBouncer in transaction mode: the pool through the pooler,
each worker's liveness session and LISTEN to PostgreSQL itself
(``liveness_url``). The conformance suite runs through it too
(``postgres-pgbouncer``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from tenure import App
from tenure.backends.base import WorkerInfo
from tenure.errors import BackendUnavailable
from tests.conformance.helpers import wait_for
from tests.conftest import SyncBackend
from tests.servers import PgBouncer

REPO = Path(__file__).resolve().parents[2]
WORKERS, PROCESSES = 60, 3
JOBS = 3000
SERVER_POOL = 20  # PgBouncer's default_pool_size (tests/servers.py)
SESSIONS = ("tenure-liveness", "tenure-listen")
TEST = "test"  # the application_name of the test's own direct connections


def test_60_workers_through_20_server_connections__drain_a_queue_losing_nothing(
    pgbouncer: PgBouncer,
) -> None:
    direct = pgbouncer.server.new_database()
    url = pgbouncer.url(direct)
    env = {**os.environ, "TENURE_URL": url, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "tests.integration.many_workers", str(WORKERS // PROCESSES)]
    with App(url) as app:  # migrated, through the pooler
        app.queues()
    procs = [subprocess.Popen(command, env=env, cwd=REPO, stdin=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(PROCESSES)]  # fmt: skip
    peak = Peak(direct)
    try:
        with psycopg.connect(direct, autocommit=True, application_name=TEST) as conn:
            registered = "SELECT count(*) FROM tenure.workers"
            wait_for(lambda: conn.execute(registered).fetchone() == (WORKERS,), timeout=180)
            with App(url) as app:
                for start in range(0, JOBS, 500):
                    app.enqueue_many("noop", [{} for _ in range(start, min(start + 500, JOBS))])
                done = "SELECT count(*) FROM tenure.jobs WHERE state = 'completed'"
                wait_for(lambda: conn.execute(done).fetchone() == (JOBS,), timeout=180)
                states = conn.execute(
                    "SELECT state, attempts, count(*), count(DISTINCT worker) FROM tenure.jobs "
                    "GROUP BY 1, 2"
                ).fetchall()
    finally:
        peak.stop()
        errors = [proc.communicate(b"", timeout=120)[1].decode() for proc in procs]
    assert [p.returncode for p in procs] == [0] * PROCESSES, errors
    [(state, attempts, count, workers)] = states
    assert (state, attempts, count) == ("completed", 1, JOBS)
    assert workers > 1
    assert WORKERS <= peak.sessions <= 2 * WORKERS  # liveness, LISTEN: one each at most
    assert 0 < peak.pooled <= SERVER_POOL


class Peak:
    """The most server sessions of the database seen at once, sampled until
    ``stop``: the workers' own (``SESSIONS``), and the pooler's."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sessions = self.pooled = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        with psycopg.connect(self.url, autocommit=True, application_name=TEST) as conn:
            while not self._stop.wait(0.02):
                [(sessions, pooled)] = conn.execute(
                    "SELECT count(*) FILTER (WHERE application_name = ANY(%s)),"
                    "       count(*) FILTER (WHERE NOT application_name = ANY(%s))"
                    " FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend'"  # not autovacuum's on the jobs
                    " AND application_name <> %s", (list(SESSIONS), list(SESSIONS), TEST)
                ).fetchall()  # fmt: skip
                self.sessions = max(self.sessions, sessions)
                self.pooled = max(self.pooled, pooled)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_a_liveness_url_to_another_database__is_refused_at_registration(
    pgbouncer: PgBouncer, open_backend: Callable[[str], SyncBackend]
) -> None:
    pooled = pgbouncer.url(pgbouncer.server.new_database()).split("?")[0]
    elsewhere = quote(pgbouncer.server.new_database(), safe="")
    backend = open_backend(f"{pooled}?liveness_url={elsewhere}")
    with pytest.raises(BackendUnavailable, match="liveness_url must reach the PostgreSQL database"):
        backend.register_worker(WorkerInfo("w1", "h", 1, ("default",)))
