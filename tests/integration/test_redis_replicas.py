"""``?wait_replicas=`` on the session's Redis, which has no replica: an
enqueue waits out ``wait_timeout`` for one (``WAIT``) and then fails, saying
that it is stored on the primary only; a completion waits it out and stands,
said once; a claim does not wait. With a real replica and a failover:
``tests/fault/test_redis_sentinel.py``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis as redis_sync

from tenure import State
from tenure.errors import BackendUnavailable
from tenure.job import JobSpec
from tests.servers import RedisServer


def waits(url: str) -> int:
    with redis_sync.Redis.from_url(url) as r:
        return int(r.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_without_a_replica__an_enqueue_waits_the_timeout_then_fails_saying_why(
    redis_server: RedisServer, open_backend: Callable[[str], Any]
) -> None:
    redis_server.flush()
    b = open_backend(f"{redis_server.url}?wait_replicas=1&wait_timeout=0.2")
    spec = JobSpec.create("t", {})
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as caught:
        b.enqueue([spec])
    assert time.monotonic() - started >= 0.2
    assert "0 of the 1 replicas" in str(caught.value)
    assert "stored on the primary only" in str(caught.value)
    assert b.get(spec.id).state is State.QUEUED  # stored all the same: never lost


def test_without_a_replica__a_completion_waits_the_timeout_stands_and_is_said_once(
    redis_server: RedisServer,
    open_backend: Callable[[str], Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    redis_server.flush()
    url = redis_server.url
    [job] = open_backend(url).enqueue([JobSpec.create("t", {}), JobSpec.create("t", {})])[:1]
    b = open_backend(f"{url}?wait_replicas=1&wait_timeout=0.2")
    before = waits(url)
    with caplog.at_level(logging.WARNING, logger="tenure.redis"):
        claimed = b.claim("w", ["default"], 2)
        assert waits(url) == before  # a claim does not wait
        started = time.monotonic()
        for c in claimed:
            assert b.complete_many([(c.id, c.fence, b"1")]) == set()
        assert time.monotonic() - started >= 0.4
    assert waits(url) - before == 2
    assert b.get(job.id).state is State.COMPLETED
    said = [r.getMessage() for r in caplog.records if "wait_replicas" in r.getMessage()]
    assert len(said) == 1 and "0 of the 1 replicas" in said[0], said
