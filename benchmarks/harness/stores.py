"""The servers of one benchmark run, and a clean store for each measurement.

Redis and PostgreSQL are throwaway servers started from the machine's binaries
(``tests/servers.py``: random port, temporary directory; PostgreSQL with
``fsync=off``, as for every library alike). SQLite files live under
``benchmarks/.work/``, on the same file system as the ceiling measurement.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.servers import PostgresServer, RedisServer, postgres_bin  # noqa: E402


@contextlib.contextmanager
def throwaway_url(kind: str, name: str) -> Iterator[str]:
    """The URL of fresh storage of ``kind`` (a server of its own, or a SQLite
    file ``name``.db in a temporary directory), gone when the block ends."""
    server: PostgresServer | RedisServer | None = None
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "sqlite":
            url = f"sqlite:///{tmp}/{name}.db"
        elif kind == "postgres":
            server = PostgresServer()
            url = server.new_database()
        else:
            server = RedisServer()
            url = server.url
        try:
            yield url
        finally:
            if server is not None:
                server.close()


@dataclass(frozen=True)
class Store:
    backend: str
    url: str
    server_pids: tuple[int, ...]  # whose CPU counts as the server's


class Servers:
    """Started on first use, closed at the end of the run."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._redis: RedisServer | None = None
        self._postgres: PostgresServer | None = None

    @property
    def redis(self) -> RedisServer:
        if self._redis is None:
            self._redis = RedisServer()
        return self._redis

    @property
    def postgres(self) -> PostgresServer:
        if self._postgres is None:
            self._postgres = PostgresServer()
        return self._postgres

    def fresh(self, backend: str, slot: int = 0) -> Store:
        """An empty store: a flushed Redis database ``slot``, a new PostgreSQL
        database, or a new SQLite file."""
        if backend == "redis":
            import redis

            url = f"redis://127.0.0.1:{self.redis.port}/{slot}"
            with redis.Redis.from_url(url) as client:
                client.flushdb()
            assert self.redis.proc is not None
            return Store(backend, url, (self.redis.proc.pid,))
        if backend == "postgres":
            return Store(backend, self.postgres.new_database(), (self.postgres.pid,))
        if backend == "sqlite":
            directory = self.work / f"sqlite-{uuid.uuid4().hex[:8]}"
            directory.mkdir(parents=True)
            return Store(backend, f"sqlite:///{directory / 'bench.db'}", ())
        raise ValueError(f"unknown backend {backend}")

    def release(self, store: Store) -> None:
        """A PostgreSQL database is dropped once its measurement is over: left
        behind, its dead rows would be vacuumed while the next library runs."""
        if store.backend == "postgres":
            name = store.url.rsplit("/", 1)[1]
            self.postgres.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def calls(self, store: Store) -> int | None:
        """Calls the store's server has served so far: transactions committed
        in its database (PostgreSQL), commands processed (Redis, those run by
        scripts included, for every library alike); None for SQLite."""
        if store.backend == "postgres":
            name = store.url.rsplit("/", 1)[1]
            query = f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{name}'"
            return int(self.postgres.psql(query))
        if store.backend == "redis":
            import redis

            with redis.Redis.from_url(store.url) as client:
                return int(client.info("stats")["total_commands_processed"])
        return None

    def versions(self) -> dict[str, str]:
        out: dict[str, str] = {"sqlite": _sqlite_version()}
        if shutil.which("redis-server"):
            done = subprocess.run(
                ["redis-server", "--version"], capture_output=True, text=True, check=False
            )
            m = re.search(r"v=(\S+)", done.stdout)
            out["redis"] = m.group(1) if m else done.stdout.strip()
        postgres = postgres_bin("postgres")
        if postgres:
            done = subprocess.run(
                [postgres, "--version"], capture_output=True, text=True, check=False
            )
            out["postgres"] = done.stdout.strip().rsplit(" ", 1)[-1]
        return out

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
        if self._postgres is not None:
            self._postgres.close()


def _sqlite_version() -> str:
    import sqlite3

    return sqlite3.sqlite_version
