"""Concurrency keys on SQLite beyond the conformance suite: the caller's
transaction, a queue that becomes keyed, and what the claim keeps per key."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from tenure import App, State
from tenure.backends.base import WorkerInfo
from tenure.config import QueuePolicy
from tenure.core.limits import KeyCount
from tenure.job import JobSpec
from tests.conformance.helpers import wait_for


def keyed(key: str | None, n: int) -> list[JobSpec]:
    return [JobSpec.create("t", {"i": i}, queue="q", concurrency_key=key) for i in range(n)]


def test_debounce_and_unique_for__in_the_callers_transaction(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with App(f"sqlite:///{path}") as app:

        @app.task
        def reindex(n: int) -> None: ...

        app.queues()  # the schema, migrated
        conn = sqlite3.connect(path)
        debounced = reindex.with_options(conn=conn, key="tenant-7", debounce=30.0)
        first = debounced.enqueue(1)
        again = debounced.enqueue(2)
        unique = reindex.with_options(conn=conn, key="nightly", unique_for=3600.0)
        once, twice = unique.enqueue(1), unique.enqueue(2)
        conn.commit()
        conn.close()
        assert again.id == first.id and twice.id == once.id
        stored = app.get_job(first.id)
        assert stored.args == {"n": 2} and stored.state is State.SCHEDULED
        assert app.get_job(once.id).args == {"n": 1}


def test_a_queue_that_becomes_keyed__gives_its_jobs_without_a_key_their_turn(
    tmp_path: Path, open_backend: Any
) -> None:
    """Jobs enqueued without a key before the queue had per-key fields take
    their turns as one key, as those enqueued after."""
    backend = open_backend(f"sqlite:///{tmp_path / 't.db'}")
    backend.enqueue(keyed(None, 3))
    backend.set_policy("q", QueuePolicy(fair=True))
    backend.enqueue(keyed("a", 3) + keyed(None, 1))
    backend.register_worker(WorkerInfo("w", "host", 1, ("q",)))
    served = [backend.claim("w", ["q"], 1)[0].concurrency_key for _ in range(6)]
    assert served == [None, "a", None, "a", None, "a"]
    assert backend.key_counts("q") == [KeyCount(None, 1, 3), KeyCount("a", 0, 3)]
    assert Counter(j.concurrency_key for j in backend.list(queue="q").jobs) == Counter(
        {None: 4, "a": 3}
    )


def test_rate_buckets__are_forgotten_once_full_again(tmp_path: Path, open_backend: Any) -> None:
    path = tmp_path / "t.db"
    backend = open_backend(f"sqlite:///{path}")
    backend.set_policy("q", QueuePolicy(rate_limit_per_key=1, rate_interval_per_key=0.05))
    backend.enqueue(keyed("a", 1) + keyed("b", 1))
    backend.register_worker(WorkerInfo("w", "host", 1, ("q",)))
    assert len(backend.claim("w", ["q"], 5)) == 2
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM key_buckets").fetchone() == (2,)

    def forgotten() -> bool:  # full 0.05 s later: gone at the next sweep
        backend.rescue()
        return db.execute("SELECT count(*) FROM key_buckets").fetchone() == (0,)

    wait_for(forgotten, timeout=5.0)


def test_a_held_key_that_fills_the_claims_window__holds_back_no_other_key(
    tmp_path: Path, open_backend: Any
) -> None:
    """A key's jobs ahead of all others, beyond the window a claim reads in
    order: the keys behind them take turns past it (a walk of the keys)."""
    backend = open_backend(f"sqlite:///{tmp_path / 't.db'}")
    backend.set_policy("q", QueuePolicy(max_active_per_key=1))
    ahead = [JobSpec.create("t", {"i": i}, queue="q", concurrency_key="a", priority=9)
             for i in range(300)]  # fmt: skip
    backend.enqueue(ahead + keyed("b", 2) + keyed("c", 1))
    backend.register_worker(WorkerInfo("w", "host", 1, ("q",)))
    first = backend.claim("w", ["q"], 3)
    assert Counter(j.concurrency_key for j in first) == Counter({"a": 1, "b": 1, "c": 1})
    assert backend.claim("w", ["q"], 3) == []
    for job in first:
        backend.complete(job.id, job.fence)
    assert Counter(j.concurrency_key for j in backend.claim("w", ["q"], 3)) == Counter(
        {"a": 1, "b": 1}
    )
