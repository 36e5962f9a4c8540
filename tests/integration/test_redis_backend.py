"""The Redis backend beyond the conformance suite: URLs and credentials, script
loading and NOSCRIPT, the key layout, bulk enqueue, wake-ups, liveness and its
fallback where ACLs forbid CLIENT, and the durability warning.

Real redis-server processes only: the session's server, or one of this module's
own where a test needs a unix socket, TLS or a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as redis_sync
from redis.crc import key_slot

from tenure.backends.base import Renewal, WorkerInfo
from tenure.backends.redis import RedisBackend, rescue
from tenure.backends.redis.enqueue import ENQUEUE_CHUNK, ENQUEUE_WINDOW
from tenure.backends.redis.scripts import NAMES, SCRIPTS, Runner
from tenure.backends.redis.transport import RedisPyTransport
from tenure.config import QueuePolicy
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.errors import BackendUnavailable, InvalidInput, LivenessLost
from tenure.job import JobSpec
from tenure.portal import Portal
from tests.conformance.helpers import wait_for
from tests.conftest import SyncBackend, server_or_skip
from tests.servers import RedisServer, wait_port

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:redis")


class OwnRedis(RedisServer):
    """A redis-server of this module's, with extra arguments (unix socket, TLS)."""

    def __init__(self, *extra: str, appendonly: bool = False) -> None:
        self.extra = list(extra)
        super().__init__(appendonly=appendonly)

    def start(self) -> None:
        assert self.binary
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                   "--dir", str(self.root), "--save", "", "--appendonly",
                   "yes" if self.appendonly else "no", "--daemonize", "no",
                   "--logfile", str(self.root / "server.log"), *self.extra]  # fmt: skip
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)


@pytest.fixture(scope="module")
def own_redis() -> Iterator[OwnRedis]:
    sock = Path(f"/tmp/tenure-test-{uuid.uuid4().hex[:8]}.sock")
    server = server_or_skip(
        "redis", lambda: OwnRedis("--unixsocket", str(sock), "--unixsocketperm", "700")
    )
    server.socket = sock  # type: ignore[attr-defined]
    yield server
    server.close()
    sock.unlink(missing_ok=True)


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.flush()
    return redis_server.url


def admin(url: str, *command: Any) -> Any:
    """Run one command on a short-lived plain client."""
    with redis_sync.Redis.from_url(url) as client:
        return client.execute_command(*command)


def clients(url: str) -> list[dict[str, Any]]:
    with redis_sync.Redis.from_url(url, decode_responses=True) as client:
        return list(client.client_list())


def acl_user(url: str, *rules: str) -> str:
    user = f"u{uuid.uuid4().hex[:8]}"
    admin(url, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", *rules)
    return user


def spec(queue: str = "default", **kw: Any) -> JobSpec:
    return JobSpec.create("t", {"n": 1}, queue=queue, **kw)


def register(b: SyncBackend, worker: str, queues: tuple[str, ...] = ("default",)) -> str:
    b.register_worker(WorkerInfo(worker, "host", 1, queues))
    return worker


def one_lifecycle(b: SyncBackend) -> None:
    """Every verb once, so that every kind of key exists."""
    b.set_policy("default", QueuePolicy(max_attempts=5))
    w = register(b, "w1", ("default", "other"))
    b.enqueue([spec(key="k"), spec(delay=60), spec("other"), spec(), spec()])
    a, c, d = b.claim(w, ["default"], 3)
    b.heartbeat(w, {(a.id, a.fence)})
    b.progress(a.id, a.fence, {"pct": 5})
    b.complete(a.id, a.fence, "ok")
    b.fail(c.id, c.fence, Outcome.ERROR, "boom", Decision(State.SCHEDULED, delay=60))
    b.release(d.id, d.fence)
    b.claim(w, ["other"], 1)
    b.rescue()
    b.list()
    b.counts("default")


# -- URLs and credentials ------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0?nonsense=1",
        "redis://127.0.0.1:1/0?max_payload=many",
        "redis://127.0.0.1:1/0?prefix=bad{prefix}",
        "redis://127.0.0.1:1/0?pool_size=1",
        "memcached://127.0.0.1/0",
    ],
)
def test_a_bad_url__is_refused_as_invalid_input(url: str) -> None:
    with pytest.raises(InvalidInput):
        RedisBackend.from_url(url)


def test_a_url_with_a_password__never_shows_it_in_errors(portal: Portal) -> None:
    backend = RedisBackend.from_url("redis://user:s3cret@127.0.0.1:1/0?socket_connect_timeout=1")
    with pytest.raises(BackendUnavailable) as caught:
        portal.run(backend.open())
    assert "s3cret" not in str(caught.value)
    assert "***" in str(caught.value)


def test_unix_socket_url__works(own_redis: OwnRedis, open_backend: Callable[[str], Any]) -> None:
    b = open_backend(f"unix://{own_redis.socket}?db=2")  # type: ignore[attr-defined]
    [job] = b.enqueue([spec()])
    assert b.get(job.id).state == State.QUEUED
    assert admin(own_redis.url.replace("/0", "/2"), "DBSIZE") > 0


def test_acl_user_and_password__work_and_another_prefix_is_another_namespace(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    user = acl_user(redis_url)
    try:
        host = redis_url.removeprefix("redis://")
        mine = open_backend(f"redis://{user}:pw@{host}?prefix=other")
        theirs = open_backend(redis_url)
        [job] = mine.enqueue([spec()])
        assert mine.get(job.id).id == job.id
        assert theirs.queues() == []  # prefix=other keeps its keys apart
        assert all(k.startswith(b"other:") for k in admin(redis_url, "KEYS", "*"))
    finally:
        admin(redis_url, "ACL", "DELUSER", user)


def test_a_wrong_password__is_backend_unavailable(redis_url: str, portal: Portal) -> None:
    host = redis_url.removeprefix("redis://")
    backend = RedisBackend.from_url(f"redis://nobody:wrong@{host}")
    with pytest.raises(BackendUnavailable):
        portal.run(backend.open())


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OwnRedis, Path]]:
    if not shutil.which("openssl"):
        pytest.skip("openssl not found")
    d = tmp_path_factory.mktemp("tls")
    run = lambda *a: subprocess.run(a, cwd=d, check=True, capture_output=True)  # noqa: E731
    run(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=tenure test CA",
    )
    run(
        "openssl",
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "san.ext")  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        tls_port = s.getsockname()[1]
    server = OwnRedis("--tls-port", str(tls_port), "--tls-cert-file", str(d / "server.crt"),
                      "--tls-key-file", str(d / "server.key"), "--tls-ca-cert-file",
                      str(d / "ca.crt"), "--tls-auth-clients", "no")  # fmt: skip
    server.tls_port = tls_port  # type: ignore[attr-defined]
    wait_port(tls_port)
    yield server, d / "ca.crt"
    server.close()


def test_rediss_url__speaks_tls(
    tls_redis: tuple[OwnRedis, Path], open_backend: Callable[[str], Any]
) -> None:
    server, ca = tls_redis
    url = f"rediss://127.0.0.1:{server.tls_port}/0?ssl_ca_certs={ca}"  # type: ignore[attr-defined]
    b = open_backend(url)
    assert isinstance(b.inner.runner.topology.transport, RedisPyTransport)  # no lane over TLS
    w = register(b, "tls-worker")
    [job] = b.enqueue([spec()])
    [claimed] = b.claim(w, ["default"], 1)
    b.complete(claimed.id, claimed.fence, {"over": "tls"})
    assert b.get(job.id).result == {"over": "tls"}
    assert "tenure:worker:tls-worker" in names(server.url)


# -- scripts: loaded once, called by SHA, reloaded after NOSCRIPT ----------------


def test_every_script__has_a_header_naming_keys_argv_and_returns() -> None:
    folder = Path(__file__).parents[2] / "src/tenure/backends/redis/scripts"
    for name in NAMES:
        head = (folder / f"{name}.lua").read_text().split("\n\n")[0]
        assert head.startswith(f"-- {name}:"), name
        text = (folder / f"{name}.lua").read_text()
        assert "KEYS" in text.split("\n\n", 2)[1] and "Returns" in text, name
    libs = ["_lib", "_keys", "_flow"]
    assert sorted(p.stem for p in folder.glob("*.lua")) == sorted([*NAMES, *libs])


def test_scripts_are_called_by_sha__and_reloaded_after_script_flush(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b = open_backend(redis_url)
    w = register(b, "w")
    b.enqueue([spec(), spec()])
    runner: Runner = b.inner.runner
    assert runner.reloads == 0
    admin(redis_url, "SCRIPT", "FLUSH")
    [job] = b.claim(w, ["default"], 1)  # NOSCRIPT: load them all, run again
    assert runner.reloads == 1
    admin(redis_url, "SCRIPT", "FLUSH")
    b.complete(job.id, job.fence, "done")
    admin(redis_url, "SCRIPT", "FLUSH")
    assert b.heartbeat(w, {(job.id, job.fence)}).lost == {(job.id, job.fence)}
    assert runner.reloads == 3
    assert b.get(job.id).state == State.COMPLETED
    assert all(admin(redis_url, "SCRIPT", "EXISTS", *[s.sha for s in SCRIPTS.values()]))


def test_a_redis_restart__forgets_scripts_and_the_backend_carries_on(
    open_backend: Callable[[str], Any],
) -> None:
    server = OwnRedis(appendonly=True)
    try:
        b = open_backend(server.url)
        w = register(b, "w")
        [job] = b.enqueue([spec()])
        server.restart()
        wait_for(lambda: _answers(b))  # the pool reconnects; NOSCRIPT reloads
        assert b.claim(w, ["default"], 1) == []  # its liveness connection is gone
        w = register(b, "w-again")  # as its next heartbeat makes the worker do
        [claimed] = b.claim(w, ["default"], 1)
        assert claimed.id == job.id
        assert b.inner.runner.reloads >= 1
    finally:
        server.close()


def _answers(b: SyncBackend) -> bool:
    try:
        b.counts("default")
    except BackendUnavailable:
        return False
    return True


# -- the key layout ------------------------------------------------------------

QUEUE_KEY = re.compile(
    r"tenure:\{(?P<q>[^}]+)\}:(job:.+|history:.+|ready|scheduled|leases|state:[a-z]+|all|"
    r"retained:(completed|dead|backfill)|seq|"
    r"keys|held:.+|holders|signal|policy|events)"
)
FLEET_KEY = re.compile(r"tenure:\{@\}:(queues|jobs|workers|worker:.+|sweep-guard)")


def test_every_key__is_one_keys_py_documents_and_a_queue_lives_in_one_slot(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    one_lifecycle(open_backend(redis_url))
    keys = [k.decode() for k in admin(redis_url, "KEYS", "*")]
    slots: dict[str, set[int]] = {}
    for key in keys:
        if FLEET_KEY.fullmatch(key):
            slots.setdefault("@", set()).add(key_slot(key.encode()))
            continue
        match = QUEUE_KEY.fullmatch(key)
        assert match, f"undocumented key {key}"
        slots.setdefault(match["q"], set()).add(key_slot(key.encode()))
    assert set(slots) == {"@", "default", "other"}
    assert all(len(s) == 1 for s in slots.values()), slots


def test_every_script_call__names_keys_of_one_slot_only(
    redis_url: str, open_backend: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Redis Cluster requires (a claim over several queues names several; on
    Cluster it is split per queue)."""
    seen: list[tuple[str, list[str]]] = []
    send = Runner._send

    async def spy(self: Runner, calls: Any) -> Any:
        for c in calls:
            if c.args[0] == "EVALSHA":
                sha, n = c.args[1], int(c.args[2])
                name = next(s.name for s in SCRIPTS.values() if s.sha == sha)
                seen.append((name, [str(k) for k in c.args[3 : 3 + n]]))
        return await send(self, calls)

    monkeypatch.setattr(Runner, "_send", spy)
    one_lifecycle(open_backend(redis_url))
    assert {name for name, _ in seen} >= {"enqueue", "cycle", "heartbeat", "complete", "sweep"}
    for name, keys in seen:
        assert len({key_slot(k.encode()) for k in keys}) == 1, (name, keys)


def mentions(url: str, needles: set[str]) -> dict[str, set[str]]:
    """Each key whose name or content (every member, field and value; not the
    events stream, which has its own retention) mentions one of ``needles``."""
    found: dict[str, set[str]] = {}
    with redis_sync.Redis.from_url(url, decode_responses=True) as r:
        for key in r.keys("*"):
            kind = r.type(key)
            if kind == "zset":
                text = r.zrange(key, 0, -1)
            elif kind == "hash":
                text = [x for pair in r.hgetall(key).items() for x in pair]
            elif kind == "set":
                text = list(r.smembers(key))
            elif kind == "list":
                text = r.lrange(key, 0, -1)
            elif kind == "string":
                text = [r.get(key) or ""]
            else:
                continue
            hits = {n for n in needles if n in key or any(n in t for t in text)}
            if hits:
                found[key] = hits
    return found


def test_a_pruned_job__leaves_no_key_and_no_index_entry(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b = open_backend(redis_url)
    b.change_policy("default", {"keep_completed": 0, "keep_dead": 0})
    w = register(b, "w1")
    done, dead, cancelled = b.enqueue([spec(key="a"), spec(key="b"), spec(key="c", delay=60)])
    for job in b.claim(w, ["default"], 2):
        if job.id == done.id:
            b.complete(job.id, job.fence, {"big": "x" * 1000})
        else:
            fatal = Decision(State.DEAD, dead_reason=DeadReason.ERROR)
            b.fail(job.id, job.fence, Outcome.ERROR, "boom", fatal)
    b.cancel(cancelled.id)
    ids = {done.id, dead.id, cancelled.id}
    assert set(mentions(redis_url, ids)) >= {f"tenure:{{default}}:job:{i}" for i in ids}
    assert b.prune(1000) == 3
    assert mentions(redis_url, ids) == {}
    assert b.counts("default") == dict.fromkeys(State, 0)


def test_jobs_finished_before_retention_existed__are_indexed_by_prunes_and_pruned(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    """Such jobs have no entry in retained:*; prune.lua finds them, 250 a call."""
    b = open_backend(redis_url)
    w = register(b, "w1")
    b.enqueue([spec() for _ in range(260)] + [spec(delay=60)])
    claimed = b.claim(w, ["default"], 260)
    assert b.complete_many([(j.id, j.fence, b"1") for j in claimed[:259]]) == set()
    last = claimed[259]
    b.fail(
        last.id, last.fence, Outcome.ERROR, "x", Decision(State.DEAD, dead_reason=DeadReason.ERROR)
    )
    [scheduled] = [j for j in b.list(state=State.SCHEDULED).jobs]
    b.cancel(scheduled.id)
    p = "tenure:{default}:"
    for kept in ("retained:completed", "retained:dead"):
        admin(redis_url, "DEL", p + kept)  # as an older tenure left them
    b.change_policy("default", {"keep_completed": 0, "keep_dead": 0})
    assert b.prune(1000) == 261  # two script calls, each indexing up to 250 first
    assert b.prune(1000) == 0
    assert b.counts("default") == dict.fromkeys(State, 0)
    assert admin(redis_url, "HGET", p + "retained:backfill", "done") == b"1"


def test_a_deleted_queue__leaves_none_of_its_keys_retention_s_included(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b = open_backend(redis_url)
    w = register(b, "w1")
    b.enqueue([spec(), spec()])
    assert b.complete_many([(j.id, j.fence, b"1") for j in b.claim(w, ["default"], 1)]) == set()
    b.prune(1000)  # the backfill walk leaves its mark
    assert b.delete_queue("default") == 2
    assert admin(redis_url, "KEYS", "tenure:{default}:*") == []


def test_a_prune__goes_in_script_calls_of_at_most_script_max_jobs(
    redis_url: str, open_backend: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rescue, "SCRIPT_MAX", 4)
    b = open_backend(redis_url)
    b.change_policy("default", {"keep_completed": 0})
    w = register(b, "w1")
    b.enqueue([spec() for _ in range(10)])
    assert b.complete_many([(j.id, j.fence, b"1") for j in b.claim(w, ["default"], 10)]) == set()
    calls: list[int] = []
    call = Runner.call

    async def spy(self: Runner, name: str, keys: Any, args: Any = (), **kw: Any) -> Any:
        if name == "prune":
            calls.append(int(args[0]))
        return await call(self, name, keys, args, **kw)

    monkeypatch.setattr(Runner, "call", spy)
    assert (b.prune(7), b.prune(7)) == (7, 3)
    assert calls == [4, 3, 4]  # the second prune finds 3 of 4 in its first call: done
    assert b.counts("default")[State.COMPLETED] == 0


def test_a_claim_passing_over_tasks__looks_past_at_most_skip_scan_max_jobs(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    """A script blocks Redis: however many jobs of unknown tasks wait at the head
    of a queue, a claim passing them over reads a bounded part of it."""
    found = re.search(rb"local SKIP_SCAN_MAX = (\d+)", SCRIPTS["claim"].source)
    assert found is not None
    bound = int(found.group(1))
    b = open_backend(redis_url)
    w = register(b, "w1")
    b.enqueue([JobSpec.create("new", {}) for _ in range(bound - 1)])
    within, past = b.enqueue([JobSpec.create("old", {}) for _ in range(2)])
    assert [j.id for j in b.claim(w, ["default"], 2, skip_tasks=["new"])] == [within.id]
    rest = b.claim(w, ["default"], 2 * bound)  # all there, for a worker that knows them
    assert (len(rest), rest[-1].id) == (bound, past.id)


# -- bulk enqueue ----------------------------------------------------------------


def test_bulk_enqueue_of_10000_jobs__goes_in_overlapping_runs_and_honours_keys(
    redis_url: str, open_backend: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    b = open_backend(redis_url)
    [held] = b.enqueue([spec(key="k-7")])
    trips, in_flight = [], [0, 0]  # now, most
    send = Runner._send

    async def count(self: Runner, calls: Any) -> Any:
        trips.append(len(calls))
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        try:
            return await send(self, calls)
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(Runner, "_send", count)
    specs = [spec(key=f"k-{i % 5000}") for i in range(10_000)]
    jobs = b.enqueue(specs)
    # a pipeline per run of ENQUEUE_CHUNK (index, script; the first adds the
    # queue), then the index clean-up of key hits; runs overlap on the lane
    runs = 10_000 // ENQUEUE_CHUNK
    assert trips == [3] + [2] * (runs - 1) + [1], trips
    assert in_flight[1] == (ENQUEUE_WINDOW if b.inner.runner.topology.transport.ordered else 1)
    assert len(jobs) == 10_000
    assert jobs[7].id == held.id  # the key of an unfinished job: that job
    assert [j.id for j in jobs[5000:]] == [j.id for j in jobs[:5000]]  # within the batch
    assert b.counts("default")[State.QUEUED] == 5000
    index = admin(redis_url, "HLEN", "tenure:{@}:jobs")
    assert index == 5000  # no entries left for the specs that made no job


# -- wake-ups --------------------------------------------------------------------


def test_an_idle_waiter__wakes_when_a_job_is_enqueued(
    redis_url: str, open_backend: Callable[[str], Any], portal: Portal
) -> None:
    producer, worker = open_backend(redis_url), open_backend(redis_url)
    start = time.monotonic()
    waiting = asyncio.run_coroutine_threadsafe(
        worker.inner.wait_for_jobs(["default", "other"], 10.0), portal.loop
    )
    wait_for(lambda: _blocked(redis_url))
    producer.enqueue([spec("other")])
    waiting.result(timeout=5)
    assert time.monotonic() - start < 5.0  # woken, not timed out at 10 s


def _blocked(url: str) -> bool:
    return any(c["cmd"] == "blpop" for c in clients(url))


def test_a_wait_on_an_unreachable_redis__just_waits_out_its_timeout(
    open_backend: Callable[[str], Any],
) -> None:
    server = OwnRedis()
    b = open_backend(server.url)
    server.kill()
    start = time.monotonic()
    b.wait_for_jobs(["default"], 0.3)
    assert time.monotonic() - start >= 0.25
    server.close()


# -- liveness ------------------------------------------------------------------


def names(url: str) -> set[str]:
    return {c["name"] for c in clients(url) if c["name"]}


def test_a_registered_worker__names_its_connection_until_close(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b = open_backend(redis_url)
    register(b, "alive-1")
    assert "tenure:worker:alive-1" in names(redis_url)
    b.close()  # no deregister: to the fleet, a kill -9, seen at once
    assert "tenure:worker:alive-1" not in names(redis_url)


def test_a_dropped_liveness_connection__makes_the_heartbeat_raise_liveness_lost(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b = open_backend(redis_url)
    register(b, "w-dropped")
    assert b.heartbeat("w-dropped", set()).lost == set()
    [victim] = [c for c in clients(redis_url) if c["name"].endswith("w-dropped")]
    admin(redis_url, "CLIENT", "KILL", "ID", victim["id"])  # a cut, or a Redis restart
    with pytest.raises(LivenessLost):
        b.heartbeat("w-dropped", set())


def test_a_worker_whose_liveness_connection_dropped__never_claims_under_that_identity_again(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    """Between a Redis restart and the worker's next heartbeat, a claim would be
    made under an identity sweepers already see dead, and the job recovered
    from under the worker: a claim checks the connection first, locally."""
    b = open_backend(redis_url)
    register(b, "w-cut")
    b.enqueue([spec(), spec()])
    [victim] = [c for c in clients(redis_url) if c["name"].endswith("w-cut")]
    admin(redis_url, "CLIENT", "KILL", "ID", victim["id"])
    deadline = time.monotonic() + 5
    while not b.inner.liveness.seems_lost("w-cut"):  # once the loop has read the EOF
        assert time.monotonic() < deadline, "the closed connection was never noticed"
        b.counts("default")  # a round trip lets the loop run
    assert b.claim("w-cut", ["default"], 2) == []
    assert b.counts("default")[State.QUEUED] == 2
    with pytest.raises(LivenessLost):
        b.heartbeat("w-cut", set())
    register(b, "w-back")  # what the worker does when its heartbeat raises
    # A cycle that took the old identity before that must still claim nothing
    # under it: the next sweep would record that healthy attempt crashed.
    assert b.claim("w-cut", ["default"], 2) == []
    assert len(b.claim("w-back", ["default"], 2)) == 2


def test_concurrent_checks_of_a_dropped_liveness_connection__never_connect_it_again(
    redis_url: str, open_backend: Callable[[str], Any], portal: Portal
) -> None:
    """Two checks of one worker's connection (the lease keeper's and a handler's
    heartbeat) meet it dropped: the second must not connect it again (redis-py
    connects a closed connection on its next command). Connected again, it was
    then killed by its old id, which a restarted server had given another
    client: another worker's liveness connection, its healthy attempts recorded
    crashed."""
    b = open_backend(redis_url)
    register(b, "w-twice")
    [victim] = [c for c in clients(redis_url) if c["name"].endswith("w-twice")]
    admin(redis_url, "CLIENT", "KILL", "ID", victim["id"])

    async def both() -> list[Any]:
        checks = [b.inner.liveness.check("w-twice") for _ in range(2)]
        return await asyncio.gather(*checks, return_exceptions=True)

    outcomes = asyncio.run_coroutine_threadsafe(both(), portal.loop).result(30)
    assert [type(o) for o in outcomes] == [LivenessLost, LivenessLost]
    assert not [c for c in clients(redis_url) if c["name"].endswith("w-twice")]
    held = b.inner.liveness.held.get("w-twice")
    assert held is None


def test_a_buried_worker__learns_it_from_its_heartbeat(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b = open_backend(redis_url)
    register(b, "w-buried")
    admin(redis_url, "SREM", "tenure:{@}:workers", "w-buried")  # as a sweeper would
    with pytest.raises(LivenessLost):
        b.heartbeat("w-buried", set())


@pytest.fixture
def no_client_user(redis_url: str) -> Iterator[str]:
    user = acl_user(redis_url, "-client")
    yield redis_url.replace("redis://", f"redis://{user}:pw@")
    admin(redis_url, "ACL", "DELUSER", user)


def test_where_acl_forbids_client__liveness_falls_back_to_lease_expiry_and_says_so_once(
    no_client_user: str, open_backend: Callable[[str], Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tenure.redis")
    sweeper = open_backend(no_client_user)
    sweeper.set_policy("default", QueuePolicy(lease_ttl=0.3, heartbeat_interval=0.1))
    doomed = open_backend(no_client_user)
    register(doomed, "w-a")
    register(doomed, "w-b")
    [job] = sweeper.enqueue([spec()])
    [claimed] = doomed.claim("w-a", ["default"], 1)
    doomed.close()  # a kill -9: without CLIENT nobody can tell, until the lease expires
    assert sweeper.rescue().rescued == ()
    rescued = wait_for(lambda: sweeper.rescue().rescued, timeout=3)
    assert [(r.job_id, r.outcome) for r in rescued] == [(job.id, Outcome.STALLED)]
    notices = [r for r in caplog.records if "refuses CLIENT" in r.getMessage()]
    assert len(notices) == 2  # once per backend: the worker's, the sweeper's
    assert {w.id for w in sweeper.workers()} == {"w-a", "w-b"}
    assert claimed.id == job.id


def test_register_on_a_server_without_aof__warns_that_a_restart_loses_jobs(
    redis_url: str, open_backend: Callable[[str], Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tenure.redis")
    b = open_backend(redis_url)
    register(b, "w1")
    register(b, "w2")
    warnings = [r for r in caplog.records if "appendonly no" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].name == "tenure.redis"


MINIMAL_ACL = (  # as docs/redis.md gives it
    "~tenure:*", "&*", "+@read", "+@write", "+@scripting", "+time", "+ping", "+info", "+select",
    "+client|setname", "+client|id", "+client|list", "+client|kill",
)  # fmt: skip


def test_the_minimal_acl_of_the_docs__is_enough_for_everything(
    redis_url: str, open_backend: Callable[[str], Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tenure.redis")
    user = f"u{uuid.uuid4().hex[:8]}"
    admin(redis_url, "ACL", "SETUSER", user, "on", ">pw", *MINIMAL_ACL)
    try:
        url = redis_url.replace("redis://", f"redis://{user}:pw@").replace("/0", "/3")
        b = open_backend(url)
        one_lifecycle(b)
        b.wait_for_jobs(["default"], 0.05)
        doomed = open_backend(url)
        register(doomed, "doomed")
        b.enqueue([spec()])
        [job] = doomed.claim("doomed", ["default"], 1)
        doomed.close()
        rescued = b.rescue().rescued
        assert [(r.job_id, r.outcome) for r in rescued] == [(job.id, Outcome.CRASHED)]
        assert not [r for r in caplog.records if "refuses CLIENT" in r.getMessage()]
    finally:
        admin(redis_url, "ACL", "DELUSER", user)
        admin(redis_url, "FLUSHALL")


def test_complete_many__completes_the_held_and_reports_the_rest_lost(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b = open_backend(redis_url)
    w = register(b, "w", ("a", "b"))
    b.enqueue([spec("a"), spec("b"), spec("a")])
    x, y, z = b.claim(w, ["a", "b"], 3)
    b.complete(z.id, z.fence, "early")
    ghost = (str(uuid.uuid4()), 1)
    lost = b.complete_many(
        [(x.id, x.fence, b'"x"'), (y.id, y.fence, b'"y"'), (z.id, z.fence, b'"z"'),
         (ghost[0], 1, b"null"), (y.id, y.fence + 1, b'"stale"')]
    )  # fmt: skip
    assert lost == {(z.id, z.fence), ghost, (y.id, y.fence + 1)}
    assert [b.get(j.id).result for j in (x, y, z)] == ["x", "y", "early"]
    assert b.get(y.id).history[-1].outcome == Outcome.COMPLETED


def test_an_attempt_begun_by_the_previous_version__is_closed_once_when_it_ends(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    """Before attempts were written when they end, a claim pushed an open history
    entry (no started_at on the job) and the end rewrote it; a job claimed so and
    ended now gets that entry closed, not a second one. A running attempt of
    either kind shows once in get's history."""
    b = open_backend(redis_url)
    w = register(b, "w")
    b.enqueue([spec(), spec()])
    old, new = b.claim(w, ["default"], 2)
    jk, hk = f"tenure:{{default}}:job:{old.id}", f"tenure:{{default}}:history:{old.id}"
    started = admin(redis_url, "HGET", jk, "started_at").decode()
    admin(redis_url, "HDEL", jk, "started_at")  # as the previous version left it
    entry = {"attempt": 1, "fence": old.fence, "worker": w, "started_at": started}
    admin(redis_url, "RPUSH", hk, orjson.dumps(entry))
    for job in (old, new):
        [running] = b.get(job.id).history
        assert (running.attempt, running.fence, running.worker, running.outcome) == (
            1, job.fence, w, None)  # fmt: skip
        assert running.started_at == pytest.approx(time.time(), abs=60)
    assert b.complete_many([(old.id, old.fence, b"1"), (new.id, new.fence, b"2")]) == set()
    for job in (old, new):
        [ended] = b.get(job.id).history
        assert (ended.attempt, ended.fence, ended.worker, ended.outcome) == (
            1, job.fence, w, Outcome.COMPLETED)  # fmt: skip
        assert ended.ended_at is not None and ended.ended_at >= ended.started_at
    assert admin(redis_url, "HEXISTS", jk, "started_at") == 0


def test_concurrent_heartbeats_of_one_worker__share_its_liveness_connection_safely(
    redis_url: str, open_backend: Callable[[str], Any], portal: Portal
) -> None:
    """The lease keeper and a handler's job.heartbeat() may run at once."""
    b = open_backend(redis_url)
    w = register(b, "w-busy")
    b.enqueue([spec() for _ in range(4)])
    leases = {(j.id, j.fence) for j in b.claim(w, ["default"], 4)}

    async def many() -> list[Any]:
        beats = [b.inner.heartbeat(w, leases) for _ in range(50)]
        return await asyncio.gather(*beats, return_exceptions=True)

    assert asyncio.run_coroutine_threadsafe(many(), portal.loop).result(30) == [Renewal()] * 50
    assert b.heartbeat(w, leases).lost == set()


def test_a_claims_reply__lists_the_job_fields_in_the_order_python_reads_them() -> None:
    """_lib.lua's JOB_FIELDS and codec.job_of_values read one order: JOB_COLUMNS,
    then a workflow's step's fields and the concurrency key."""
    from importlib import resources

    from tenure.backends.rows import JOB_COLUMNS

    lib = (resources.files("tenure.backends.redis") / "scripts" / "_lib.lua").read_text()
    block = lib[lib.index("local JOB_FIELDS = {") :]
    fields = re.findall(r"'([a-z_]+)'", block[: block.index("}")])
    assert tuple(fields) == (*JOB_COLUMNS, "wf", "ck")


def test_a_plain_jobs_hash__stays_a_listpack_queued_active_and_queued_again(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    """Every value of a small job's hash fits hash-max-listpack-value (64 bytes),
    so Redis keeps it compact: the ready set's member (68 bytes with a UUID id)
    is made from run_at, seq and the id, not stored. Its place in line holds."""
    b = open_backend(redis_url)
    limit = admin(redis_url, "CONFIG", "GET", "hash-max-listpack-value")
    assert limit == {b"hash-max-listpack-value": b"64"}
    first, second = b.enqueue([spec(key="k", concurrency_key="c"), spec()])

    def encoding(job_id: str) -> bytes:
        return bytes(admin(redis_url, "OBJECT", "ENCODING", f"tenure:{{default}}:job:{job_id}"))

    assert encoding(first.id) == encoding(second.id) == b"listpack"
    [held] = b.claim("w", ["default"], 1)
    assert held.id == first.id and encoding(first.id) == b"listpack"
    b.fail(held.id, held.fence, Outcome.ERROR, "boom", Decision(State.QUEUED))
    assert encoding(first.id) == b"listpack"
    assert [j.id for j in b.claim("w", ["default"], 2)] == [first.id, second.id]


def test_a_claimed_job__reads_back_as_get_returns_it(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b = open_backend(redis_url)
    [job] = b.enqueue([spec(key="k", max_attempts=5, timeout=2.5)])
    [held] = b.claim("w", ["default"], 1)
    b.fail(held.id, held.fence, Outcome.ERROR, "boom", Decision(State.QUEUED))
    [again] = b.claim("w", ["default"], 1)  # error, key, timeout, max_attempts all set
    assert dataclasses.replace(b.get(job.id), history=()) == again
    assert again.error == "boom" and again.key == "k" and again.attempts == 2


def test_a_steps_arguments_and_options__read_back_exactly_through_the_scripts_json(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    """A step travels inside a JSON document to flow_enqueue.lua: its args
    (JSON text in a JSON string) and options come out as a job's would."""
    from tenure.core.workflows import Step, chain, compile_flow

    b = open_backend(redis_url)
    args = {"s": 'quote " back \\ nl \n nul-free é 😀 \u2028', "n": 12345678901234567890}
    first = JobSpec.create("a", args, priority=-3, max_attempts=7, timeout=2.5, run_at=1.5)
    then = JobSpec.create("b", {"x": 0.1}, queue="other", delay=30.25)
    wf = b.enqueue_workflow(compile_flow(chain(Step(first), Step(then, may_fail=True))))
    a, later = wf.jobs
    assert (a.args, a.priority, a.max_attempts, a.timeout) == (args, -3, 7, 2.5)
    assert a.state == State.QUEUED and (a.workflow, a.upstream, a.may_fail) == (wf.id, (), False)
    assert (later.args, later.state, later.upstream, later.may_fail) == (
        {"x": 0.1}, State.WAITING, (a.id,), True,
    )  # fmt: skip
    w = register(b, "w", ("default", "other"))
    [claimed] = b.claim(w, ["default"], 1)
    assert (claimed.args, claimed.workflow, claimed.upstream) == (args, wf.id, ())
    b.complete(claimed.id, claimed.fence, None)
    released = b.get(later.id)
    assert released.state == State.SCHEDULED
    assert released.run_at - time.time() > 25


def test_a_workflow_whose_key_a_pending_one_holds__gets_that_one_once_it_is_stored(
    redis_url: str, open_backend: Callable[[str], Any], portal: Portal
) -> None:
    import threading

    from tenure.backends.redis.flows import Staged
    from tenure.core.workflows import Step, chain, compile_flow

    b = open_backend(redis_url)
    b.delete_queue("default")
    first = compile_flow(
        chain(Step(JobSpec.create("a")), Step(JobSpec.create("b", queue="other"))), key="held"
    )
    staged = Staged.of(first, b.inner.keys)
    holder, _ = portal.run(b.inner.parts.flows.write(staged))
    assert holder is None  # stored, not committed yet
    got = []
    again = compile_flow(chain(Step(JobSpec.create("a"))), key="held")
    second = threading.Thread(target=lambda: got.append(b.enqueue_workflow(again)))
    second.start()
    portal.run(b.inner.parts.flows.commit(staged))
    second.join(10)
    assert [w.id for w in got] == [first.id]
    assert {s: n for s, n in b.counts("default").items() if n} == {State.QUEUED: 1}


def test_a_steps_events__carry_its_workflow(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    from tenure.core.workflows import Step, chain, compile_flow, group

    b = open_backend(redis_url)
    b.delete_queue("default")
    after = b.events_now(None)
    flow = chain(group(Step(JobSpec.create("a")), Step(JobSpec.create("d"))), Step(spec()))
    wf = b.enqueue_workflow(compile_flow(flow))
    w = register(b, "w")
    a, d = b.claim(w, ["default"], 2)
    b.enqueue([spec()])  # a plain job completed with them: its event has no workflow
    [plain] = b.claim(w, ["default"], 1)
    assert b.complete_many([(a.id, a.fence, b"1"), (plain.id, plain.fence, b"2")]) == set()
    dead = Decision(State.DEAD, dead_reason=DeadReason.ERROR)
    b.fail(d.id, d.fence, Outcome.ERROR, "no", dead)
    events = [e for e in b.read_events(None, after, 100) if e.kind != "started"]
    seen = {(e.kind, e.job_id): e.data for e in events}
    last = wf.jobs[2].id
    assert seen["completed", a.id] == {"workflow": wf.id}
    assert seen["completed", plain.id] == {}
    assert seen["dead", d.id]["workflow"] == wf.id
    assert seen["cancelled", last] == {"workflow": wf.id, "reason": "upstream_failed"}
    assert seen["workflow_ended", last] == {"workflow": wf.id, "outcome": "failed"}
