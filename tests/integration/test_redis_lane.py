"""The lane (``backends/redis/lane.py``): the connection of a backend's calls.

On its own: pipelined calls, error replies as redis-py's exception classes, a
cancelled call. Under the backend: the cycle and one-by-one enqueues go through
it, NOSCRIPT reloads, a restart, a frozen server, a password and a database.
Without it: a redis-py whose private parser moved is detected, the backend falls
back to redis-py's client and says so once (or refuses, if the URL demands the
lane), and a worker drains a queue alike on either transport.
Real redis-server processes only: the session's, or a test's own where it
restarts, freezes or protects the server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis as redis_sync
from redis import exceptions as redis_errors

from tenure import App, State, WorkerConfig
from tenure.backends import from_url
from tenure.backends.redis import lane as lane_module
from tenure.backends.redis import topology
from tenure.backends.redis.lane import Command, Lane, LaneUnavailable, parse_error_of
from tenure.backends.redis.scripts import SCRIPTS
from tenure.backends.redis.topology import TIMEOUTS
from tenure.backends.redis.transport import Parsed, RedisPyTransport
from tenure.backends.redis.url import TRANSPORT_ENV, Transports
from tenure.errors import BackendUnavailable, InvalidInput
from tenure.job import JobSpec
from tenure.portal import Portal
from tenure.worker import Supervisor
from tests.conformance.helpers import wait_for
from tests.conftest import SyncBackend, server_or_skip
from tests.servers import RedisServer

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:redis")

SCRIPT_OF_SHA = {s.sha: s.name for s in SCRIPTS.values()}


@pytest.fixture(autouse=True)
def transport_by_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests choose the transport: a run forcing one for all does not apply."""
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.flush()
    return redis_server.url


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of the test's own, to restart, freeze or protect with a password.
    Every write is in its append-only file before its reply (appendfsync always):
    with everysec, Redis may reply before it writes the file while an fsync is
    slow (a loaded machine), and a write acknowledged just before a kill is lost."""
    server = server_or_skip("redis", lambda: RedisServer(appendonly=True, appendfsync="always"))
    yield server
    server.close()


@pytest.fixture
def lane(redis_url: str, portal: Portal) -> Iterator[Lane]:
    lane = Lane(redis_url, **TIMEOUTS)
    yield lane
    portal.run(lane.close())


@pytest.fixture
def on_lane(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What goes through any lane: a script's name, or a command's (script
    loads aside: at open, and after NOSCRIPT, all of them go)."""
    seen: list[str] = []
    pipeline = Lane.pipeline

    async def spy(self: Lane, commands: list[Command]) -> list[Any]:
        for c in commands:
            if c[0] != "SCRIPT":
                seen.append(SCRIPT_OF_SHA[str(c[1])] if c[0] == "EVALSHA" else str(c[0]))
        return await pipeline(self, commands)

    monkeypatch.setattr(Lane, "pipeline", spy)
    return seen


def admin(url: str, *command: Any) -> Any:
    with redis_sync.Redis.from_url(url) as client:
        return client.execute_command(*command)


def spec() -> JobSpec:
    return JobSpec.create("t", {"n": 1})


def lane_of(b: SyncBackend) -> Lane:
    parsed = b.inner.runner.topology.transport
    assert isinstance(parsed, Parsed) and isinstance(parsed.lane, Lane)
    return parsed.lane


# -- the lane on its own ---------------------------------------------------------


def test_calls_in_flight_at_once_on_one_lane__each_get_their_own_reply(
    lane: Lane, portal: Portal
) -> None:
    async def scenario() -> tuple[int, list[Any], list[Any]]:
        await lane.call("PING")  # connected
        echoes = [asyncio.ensure_future(lane.call("ECHO", f"m{i}")) for i in range(100)]
        await asyncio.sleep(0)  # every call written, none answered yet
        in_flight = lane.in_flight
        batch = await lane.pipeline([("SET", "k", "v"), ("GET",), ("GET", "k")])
        return in_flight, await asyncio.gather(*echoes), batch

    in_flight, echoes, batch = portal.run(scenario())
    assert in_flight == 100
    assert echoes == [f"m{i}".encode() for i in range(100)]
    ok, error, value = batch
    assert (ok, value) == (b"OK", b"v")
    assert type(error) is redis_errors.ResponseError  # a pipeline's error reply is its reply


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (("EVALSHA", "0" * 40, 0), redis_errors.NoScriptError),
        (("EVAL", "return redis.error_reply('LOADING pretend')", 0), redis_errors.BusyLoadingError),
        (("GET",), redis_errors.ResponseError),
        (("EVAL", "return redis.error_reply('NOPE no prefix')", 0), redis_errors.ResponseError),
    ],
)  # fmt: skip
def test_an_error_reply__raises_the_exception_redis_py_raises(
    lane: Lane, portal: Portal, redis_url: str, command: Command, expected: type[Exception]
) -> None:
    with pytest.raises(redis_errors.RedisError) as by_redis_py:
        admin(redis_url, *command)
    with pytest.raises(redis_errors.RedisError) as by_lane:
        portal.run(lane.call(*command))
    assert type(by_lane.value) is type(by_redis_py.value) is expected
    assert str(by_lane.value) == str(by_redis_py.value)


def test_a_cancelled_call__leaves_the_next_call_its_own_reply(lane: Lane, portal: Portal) -> None:
    async def scenario() -> Any:
        await lane.call("PING")
        slow = asyncio.ensure_future(lane.call("BLPOP", "nothing", "0.2"))
        await asyncio.sleep(0)  # written
        slow.cancel()
        return await lane.call("ECHO", "mine")  # answered after BLPOP's nil

    assert portal.run(scenario()) == b"mine"


def test_a_lane__reaches_tcp_and_unix_sockets_but_not_tls_or_a_cluster() -> None:
    def reachable(url: str) -> bool:
        return bool(from_url(url).options.lane_reachable)  # type: ignore[attr-defined]

    assert reachable("redis://127.0.0.1:6379/0")
    assert reachable("unix:///run/redis.sock?db=1")
    assert not reachable("rediss://127.0.0.1:6380/0")
    assert not reachable("redis://127.0.0.1:6379/0?cluster=yes")


# -- under the backend -----------------------------------------------------------


def test_the_cycle_and_enqueues__go_through_the_lane_and_reload_after_script_flush(
    redis_url: str, open_backend: Callable[[str], SyncBackend], on_lane: list[str]
) -> None:
    b = open_backend(redis_url)
    b.enqueue([spec(), spec()])
    [job] = b.enqueue([spec()])
    assert on_lane == ["SADD", "HSET", "enqueue"] * 2
    admin(redis_url, "SCRIPT", "FLUSH")
    claimed = b.claim("w", ["default"], 3)
    assert job.id in {c.id for c in claimed}
    assert on_lane[6:] == ["cycle", "cycle"]  # NOSCRIPT, then again once loaded
    assert b.inner.runner.reloads == 1
    lost = b.complete_many([(c.id, c.fence, b'"done"') for c in claimed])
    assert lost == set()
    assert on_lane[8:] == ["cycle"]


def test_a_restart__fails_the_call_in_flight_and_calls_while_down__then_calls_work(
    own_server: RedisServer, open_backend: Callable[[str], SyncBackend], portal: Portal
) -> None:
    b = open_backend(own_server.url)
    b.enqueue([spec(), spec()])
    [first] = b.claim("w", ["default"], 1)
    assert own_server.proc is not None
    os.kill(own_server.proc.pid, signal.SIGSTOP)  # so that the next claim stays in flight
    claim = asyncio.run_coroutine_threadsafe(b.inner.claim("w", ["default"], 1), portal.loop)
    wait_for(lambda: lane_of(b).in_flight == 1)
    own_server.kill()
    with pytest.raises(BackendUnavailable) as caught:
        claim.result(timeout=5)
    assert isinstance(caught.value.__cause__, redis_errors.ConnectionError)
    with pytest.raises(BackendUnavailable):
        b.claim("w", ["default"], 1)  # nothing listens
    own_server.start()
    # The pool's connection is stale too, and redis-py finds it out only by using
    # it: a repeatable read rides that out, so that the reload below may use the pool.
    assert b.queues() == ["default"]
    [second] = b.claim("w", ["default"], 1)  # connects again, reloads the scripts
    assert second.id != first.id
    assert second.attempts == 1  # the claim in flight was not sent again
    assert b.inner.runner.reloads == 1


def test_a_frozen_redis__fails_a_hot_call_after_socket_timeout_not_later(
    own_server: RedisServer, open_backend: Callable[[str], SyncBackend], portal: Portal
) -> None:
    b = open_backend(f"{own_server.url}?socket_timeout=0.5")
    assert b.claim("w", ["default"], 1) == []  # the lane connected
    assert own_server.proc is not None
    os.kill(own_server.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        claim = asyncio.run_coroutine_threadsafe(b.inner.claim("w", ["default"], 1), portal.loop)
        wait_for(lambda: lane_of(b).in_flight == 1)
        with pytest.raises(BackendUnavailable) as caught:
            claim.result(timeout=5)
        waited = time.monotonic() - start
    finally:
        os.kill(own_server.proc.pid, signal.SIGCONT)
    assert isinstance(caught.value.__cause__, redis_errors.TimeoutError)
    assert 0.45 <= waited < 1.5
    assert b.claim("w", ["default"], 1) == []  # connects again


def test_a_url_with_a_password_and_a_db__works_through_the_lane(
    own_server: RedisServer,
    open_backend: Callable[[str], SyncBackend],
    portal: Portal,
    on_lane: list[str],
) -> None:
    admin(own_server.url, "CONFIG", "SET", "requirepass", "s3cr%t")
    url = f"redis://:s3cr%25t@127.0.0.1:{own_server.port}/5"  # percent-encoded
    b = open_backend(url)
    [job] = b.enqueue([spec()])
    [claimed] = b.claim("w", ["default"], 1)
    assert claimed.id == job.id
    assert on_lane == ["SADD", "HSET", "enqueue", "cycle"]
    assert admin(url, "DBSIZE") > 0
    assert admin(url.replace("/5", "/0"), "DBSIZE") == 0
    wrong = Lane(url.replace("s3cr%25t", "wrong"), **TIMEOUTS)
    with pytest.raises(redis_errors.AuthenticationError):
        portal.run(wrong.call("PING"))
    portal.run(wrong.close())


# -- without a lane --------------------------------------------------------------


def test_the_redis_py_installed__runs_the_lane() -> None:
    """Fails after an upgrade of redis-py that moved or changed its private
    parser: pin what was tested (pyproject.toml) or adapt lane.py."""
    assert lane_module.UNAVAILABLE is None
    assert lane_module.PARSE_ERROR is not None


def test_a_redis_py_without_its_private_parser__is_detected_naming_the_version() -> None:
    moved = types.ModuleType("redis._parsers")  # as after an upgrade that moved it
    expected = f"redis-py {redis_sync.__version__} has no redis._parsers.BaseParser.parse_error"
    with pytest.raises(LaneUnavailable, match=re.escape(expected)):
        parse_error_of(moved)


def test_a_private_parser_that_maps_a_reply_otherwise__is_detected_naming_it() -> None:
    class BaseParser:
        @classmethod
        def parse_error(cls, response: str) -> redis_errors.RedisError:
            return redis_errors.ResponseError(response)  # NOSCRIPT would no longer reload

    changed = types.ModuleType("redis._parsers")
    changed.BaseParser = BaseParser  # type: ignore[attr-defined]
    with pytest.raises(LaneUnavailable, match="maps NOSCRIPT to ResponseError, not NoScriptError"):
        parse_error_of(changed)


@pytest.fixture
def no_lane(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This process as if its redis-py had moved the private parser."""
    reason = "redis-py 99.0 has no redis._parsers.BaseParser.parse_error"
    monkeypatch.setattr(lane_module, "UNAVAILABLE", reason)
    topology._fall_back.cache_clear()
    yield reason
    topology._fall_back.cache_clear()


def test_without_a_lane__the_backend_falls_back_to_redis_py_and_says_so_once(
    redis_url: str,
    open_backend: Callable[[str], SyncBackend],
    no_lane: str,
    on_lane: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="tenure.redis"):
        producer, worker = open_backend(redis_url), open_backend(redis_url)
    said = [r.getMessage() for r in caplog.records if "lane is off" in r.getMessage()]
    assert len(said) == 1 and no_lane in said[0] and "slower" in said[0]
    assert isinstance(worker.inner.runner.topology.transport, RedisPyTransport)
    [job] = producer.enqueue([spec()])
    [claimed] = worker.claim("w", ["default"], 1)
    assert claimed.id == job.id
    assert worker.complete_many([(claimed.id, claimed.fence, b"1")]) == set()
    assert on_lane == []


def test_a_url_that_demands_the_lane_without_one__fails_at_open_saying_why(
    redis_url: str, open_backend: Callable[[str], SyncBackend], no_lane: str
) -> None:
    with pytest.raises(BackendUnavailable) as caught:
        open_backend(f"{redis_url}?transport=lane")
    assert "transport=lane" in str(caught.value) and no_lane in str(caught.value)


def test_the_transport__comes_from_the_url_else_the_environment_else_auto(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def transport(url: str) -> Transports:
        return from_url(url).options.transport  # type: ignore[attr-defined, no-any-return]

    assert transport("redis://h/0") is Transports.AUTO
    monkeypatch.setenv(TRANSPORT_ENV, "redis-py")
    assert transport("redis://h/0") is Transports.REDIS_PY
    assert transport("redis://h/0?transport=lane") is Transports.LANE
    monkeypatch.setenv(TRANSPORT_ENV, "fast")
    with pytest.raises(InvalidInput, match=r"bad \$TENURE_REDIS_TRANSPORT: must be one of"):
        transport("redis://h/0")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h/0?transport=hiredis", "transport: must be one of auto/lane/redis-py"),
        ("rediss://h/0?transport=lane", "the lane reaches one Redis without TLS"),
        ("redis://h/0?cluster=yes&transport=lane", "the lane reaches one Redis without TLS"),
    ],
)
def test_a_transport_the_url_cannot_have__is_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        from_url(url)


@pytest.mark.parametrize("transport", [Transports.LANE, Transports.REDIS_PY], ids=lambda t: t.value)
def test_a_worker__drains_a_queue_alike_on_either_transport(
    redis_url: str, transport: Transports, on_lane: list[str]
) -> None:
    config = WorkerConfig(burst=True, concurrency=4, pool="thread", idle_poll_max=0.05)
    with App(f"{redis_url}?transport={transport.value}") as app:

        @app.task
        def noop(n: int) -> int:
            return n

        noop.enqueue_many([{"n": i} for i in range(300)])
        asyncio.run(Supervisor(app, config).run())
        assert app.queue().counts()[State.COMPLETED] == 300
    # the hot calls went through the transport asked for, and only through it
    assert ("cycle" in on_lane) is (transport is Transports.LANE)
