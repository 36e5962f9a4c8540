"""Make finished jobs older than they are, through each storage's own commands.

Retention is judged by storage's clock, and a test cannot wait a day: this
moves a finished job's ``finished_at`` (and, on Redis, its entry in the index
the prune reads) back by some seconds, as a real SQL ``UPDATE`` or real Redis
commands would if the job had finished then. Nothing is mocked; the backend
under test reads what storage holds.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql

from tenure.backends.postgres import PostgresBackend
from tenure.backends.redis import RedisBackend
from tenure.backends.sqlite import SQLiteBackend
from tenure.job import Job


def age(backend: Any, job_ids: Iterable[str], seconds: float) -> None:
    """Make each finished job of ``job_ids`` look as if it finished ``seconds`` earlier."""
    ids = list(job_ids)
    inner = backend.inner
    if isinstance(inner, SQLiteBackend):
        with sqlite3.connect(inner.path) as db:
            db.executemany(
                "UPDATE jobs SET finished_at = finished_at - ? WHERE id = ?",
                [(seconds, i) for i in ids],
            )
    elif isinstance(inner, PostgresBackend):
        query = sql.SQL(
            "UPDATE {}.jobs SET finished_at = finished_at - %s WHERE id = ANY(%s)"
        ).format(sql.Identifier(inner.schema))
        with psycopg.connect(inner.conninfo, autocommit=True) as db:
            db.execute(query, (seconds, ids))
    elif isinstance(inner, RedisBackend):
        for job in (backend.get(i) for i in ids):
            p = inner.keys.queue(job.queue)
            then = repr(job.finished_at - seconds)
            redis(backend, "HSET", f"{p}job:{job.id}", "finished_at", then)
            for kept in ("retained:completed", "retained:dead"):
                redis(backend, "ZADD", p + kept, "XX", then, job.id)
    else:
        raise AssertionError(f"no way to age jobs on {inner!r}")


def history_rows(backend: Any, job: Job) -> int:
    """How many history rows (entries) storage holds for ``job``, stored or not."""
    inner = backend.inner
    if isinstance(inner, SQLiteBackend):
        with sqlite3.connect(inner.path) as db:
            query = "SELECT count(*) FROM attempts WHERE job_id = ?"
            return int(db.execute(query, (job.id,)).fetchone()[0])
    if isinstance(inner, PostgresBackend):
        query = sql.SQL("SELECT count(*) FROM {}.attempts WHERE job_id = %s").format(
            sql.Identifier(inner.schema)
        )
        with psycopg.connect(inner.conninfo, autocommit=True) as db:
            row = db.execute(query, (job.id,)).fetchone()
            assert row is not None
            return int(row[0])
    if isinstance(inner, RedisBackend):
        return int(redis(backend, "LLEN", f"{inner.keys.queue(job.queue)}history:{job.id}"))
    raise AssertionError(f"no way to read history on {inner!r}")


def redis(backend: Any, *command: Any) -> Any:
    """One command through the backend's own client (routed by slot on Cluster)."""
    return backend._portal.run(backend.inner.runner.command(*command))
