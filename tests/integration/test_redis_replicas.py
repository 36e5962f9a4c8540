"""``?wait_replicas=`` on the session's Redis, which has no replica: enqueues
and completions wait out ``wait_timeout`` for one (``WAIT``), claims do not,
the writes stand, and the backend says once that they went unreplicated.
With a real replica and a failover: ``tests/fault/test_redis_sentinel.py``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis as redis_sync

from tenure import State
from tenure.job import JobSpec
from tests.servers import RedisServer


def waits(url: str) -> int:
    with redis_sync.Redis.from_url(url) as r:
        return int(r.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_without_a_replica__writes_wait_out_the_timeout_stand_and_are_said_once(
    redis_server: RedisServer,
    open_backend: Callable[[str], Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    redis_server.flush()
    url = redis_server.url
    b = open_backend(f"{url}?wait_replicas=1&wait_timeout=0.2")
    before = waits(url)
    with caplog.at_level(logging.WARNING, logger="tenure.redis"):
        started = time.monotonic()
        [job] = b.enqueue([JobSpec.create("t", {})])
        enqueued_in = time.monotonic() - started
        [claimed] = b.claim("w", ["default"], 1)
        assert b.complete_many([(claimed.id, claimed.fence, b"1")]) == set()
    assert enqueued_in >= 0.2
    assert waits(url) - before == 2  # the enqueue and the completion; not the claim
    assert b.get(job.id).state is State.COMPLETED
    said = [r.getMessage() for r in caplog.records if "wait_replicas" in r.getMessage()]
    assert len(said) == 1 and "0 of the 1 replicas" in said[0], said
