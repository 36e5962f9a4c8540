"""Fixtures shared by every test: real backends, each test on clean storage.

``backend_url`` names fresh, empty storage for one test, for every backend
this tenure has: a new SQLite file, a new PostgreSQL database, a flushed Redis.
The servers are real, started once per session on random ports
(``tests/servers.py``). ``backend`` is an opened backend on that storage,
driven synchronously through a portal; ``open_backend(url)`` opens more (each
one is what a separate worker process would hold).

A backend named in ``$TENURE_REQUIRE_BACKENDS`` whose server cannot start fails
its tests instead of skipping them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure.backends import Backend, from_url
from tenure.backends.factory import available_kinds
from tenure.portal import Portal
from tests.servers import PgBouncer, PostgresServer, RedisServer, ServerUnavailable

with contextlib.suppress(ImportError):  # PostgreSQL's driver is an extra
    import tenure.backends.postgres.events as pg_events

    # The suite's tests share one PostgreSQL server, and some hold a transaction
    # open for seconds: that holds back every database's new events (the server's
    # xmin). A test reads what it just recorded: it waits for them longer than an
    # application's read at timeout 0 does (1 s), as long as they are held back.
    pg_events.HELD_BACK_WAIT = 15.0

TESTS = Path(__file__).parent
# Tests whose figures are timings under faults (recoveries, drains, a soak, a
# browser's waits): make test runs them alone, after the rest ran two at a time.
SERIAL = (TESTS / "fault", TESTS / "web" / "test_browser.py",
          TESTS / "integration" / "test_redis_cluster.py")  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.path == p or p in item.path.parents for p in SERIAL):
            item.add_marker(pytest.mark.serial)


BACKENDS = available_kinds()
# A backend's variant: its server reached another way (PostgreSQL through
# PgBouncer in transaction mode), for the conformance suite.
VARIANTS = {"postgres-pgbouncer": "postgres"}


def required_backends() -> set[str]:
    return {b for b in os.environ.get("TENURE_REQUIRE_BACKENDS", "").split(",") if b}


class SyncBackend:
    """A backend's async verbs, called synchronously (tests only)."""

    def __init__(self, backend: Backend, portal: Portal) -> None:
        self.inner = backend
        self._portal = portal

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._portal.run(attr(*args, **kwargs))

        return call


@pytest.fixture(scope="session")
def portal() -> Iterator[Portal]:
    p = Portal("tenure-test-portal")
    yield p
    p.close()


def server_or_skip(kind: str, start: Callable[[], Any]) -> Any:
    """Start a server; without its binaries, skip, or fail when the backend is required."""
    try:
        return start()
    except ServerUnavailable as exc:
        if kind in required_backends():
            pytest.fail(f"{kind} is required (TENURE_REQUIRE_BACKENDS) but: {exc}")
        pytest.skip(f"no {kind} server: {exc}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = server_or_skip("postgres", PostgresServer)
    yield server
    server.close()


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: PostgresServer) -> Iterator[PgBouncer]:
    bouncer = server_or_skip("postgres-pgbouncer", lambda: PgBouncer(postgres_server))
    yield bouncer
    bouncer.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = server_or_skip("redis", RedisServer)
    yield server
    server.close()


def fresh_storage_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of fresh, empty storage of backend ``kind`` for one test."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'tenure.db'}"
    if kind == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        return server.new_database()
    if kind == "postgres-pgbouncer":
        bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
        return bouncer.url(bouncer.server.new_database())
    if kind == "redis":
        redis: RedisServer = request.getfixturevalue("redis_server")
        redis.flush()
        return redis.url
    raise AssertionError(kind)


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return fresh_storage_url(request.param, request, tmp_path)


@pytest.fixture
def open_backend(portal: Portal) -> Iterator[Callable[[str], SyncBackend]]:
    opened: list[SyncBackend] = []

    def open_(url: str) -> SyncBackend:
        b = SyncBackend(from_url(url), portal)
        b.open()
        opened.append(b)
        return b

    yield open_
    for b in reversed(opened):
        b.close()


@pytest.fixture
def backend(backend_url: str, open_backend: Callable[[str], SyncBackend]) -> SyncBackend:
    return open_backend(backend_url)
