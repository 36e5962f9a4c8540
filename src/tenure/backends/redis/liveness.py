"""Worker liveness on Redis: a named connection per registered worker.

A registered worker holds a dedicated connection named ``<prefix>:worker:<id>``
(``CLIENT SETNAME``) for as long as its backend stays open. When the process
dies, however it dies, the kernel closes the socket and the name leaves
``CLIENT LIST``: any sweeper then sees the worker gone and recovers its leases
(``crashed``), in under a second. ``close()`` without ``deregister_worker`` does
what a kill -9 does: it has Redis drop the connection (``CLIENT KILL ID``) so
that the very next ``CLIENT LIST`` no longer shows it.

Every heartbeat pings the connection (which also keeps an idle-client
``timeout`` of the server from closing it): a worker whose connection dropped (a
Redis restart, a cut) learns it at once, as ``LivenessLost``, and registers
again under a new identity, because to the fleet it died. A worker holding no
lease makes that round trip every IDLE_PROOF seconds only: in between, a
connection the server closed is seen from the socket alone.

Where ACLs forbid ``CLIENT``, there is no named connection: dead workers are
found by lease expiry alone, and a registry entry is buried once its worker
has not heartbeaten for :data:`STALE_AFTER` seconds. The backend says so once
in the log ``tenure.redis``.

:class:`Workers` holds the backend's verbs on top of this: registration, the
heartbeat (lease renewal and, at the same time, the worker-alive proof) and the
list of workers, judged alive or gone as the sweeper judges them (:func:`judge`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from redis import exceptions as redis_errors
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError

from tenure.backends.base import LeaseRef, Renewal, WorkerInfo
from tenure.backends.redis.index import Index
from tenure.backends.redis.keys import Keys
from tenure.backends.redis.scripts import Call, Runner
from tenure.errors import BackendUnavailable, LivenessLost

log = logging.getLogger("tenure.redis")

STALE_AFTER = 30.0  # a worker without a named connection is buried after this long unseen
# Seconds between the round trips of a worker that holds no lease: its named
# connection proves it alive meanwhile, and one closed by the server is seen
# without a round trip (seems_lost).
IDLE_PROOF = 10.0


class ClientForbidden(Exception):
    """The ACL does not allow CLIENT: liveness falls back to lease expiry."""


def forbidden(exc: BaseException) -> bool:
    return isinstance(exc, redis_errors.NoPermissionError) or "NOPERM" in str(exc)


@dataclass
class Held:
    """One worker registered by this backend, and its liveness connection (None
    where CLIENT is forbidden)."""

    worker_id: str
    conn: AbstractConnection | None
    client_id: int | None = None
    # A handler's heartbeat and the lease keeper's may check at once: one
    # command at a time on a connection.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    proven_at: float = -math.inf  # monotonic: the last heartbeat's round trip


class Liveness:
    """The named connections of this backend's registered workers."""

    def __init__(self, keys: Keys, runner: Runner) -> None:
        self.keys = keys
        self.runner = runner
        self.held: dict[str, Held] = {}
        self.retired: set[str] = set()  # ids this backend held and no longer does
        self.said_forbidden = False

    def fallback_notice(self, why: str) -> None:
        """Say once that this backend finds dead workers by lease expiry only."""
        if not self.said_forbidden:
            self.said_forbidden = True
            log.warning(
                "Redis refuses CLIENT commands (%s): a killed worker is recovered when its "
                "lease expires, not at once from CLIENT LIST",
                why,
            )

    async def hold(self, worker_id: str, entry: dict[str, Any]) -> None:
        """Name a connection for the worker, then register it (in this order, so
        that a sweeper that sees the registry entry also sees the connection).
        ``entry`` is what the registry shows of the worker."""
        old = self.held.pop(worker_id, None)
        if old is not None:
            await self.drop(old, kill=True)
        # On Cluster: the node of the fleet's keys, whose CLIENT LIST sweepers read
        # (they read every node's, so that a resharding does not make us look dead).
        name = self.keys.connection_name(worker_id)
        held = Held(worker_id, self.runner.topology.connection(self.keys.fleet, name))
        try:
            await self._open(held)
        except ClientForbidden as exc:
            self.fallback_notice(str(exc))
            held.conn = None
        liveness = "lease" if held.conn is None else "connection"
        info = orjson.dumps({**entry, "liveness": liveness}).decode()
        try:
            await self.runner.call("register", [self.keys.fleet], [worker_id, info])
        except BackendUnavailable:
            await self.drop(held, kill=True)
            raise
        self.held[worker_id] = held

    async def _open(self, held: Held) -> None:
        assert held.conn is not None
        try:
            await held.conn.connect()  # type: ignore[no-untyped-call]
            await held.conn.send_command("CLIENT", "ID")
            held.client_id = int(await held.conn.read_response())
        except (redis_errors.RedisError, OSError) as exc:
            await held.conn.disconnect()
            if forbidden(exc):
                raise ClientForbidden(str(exc)) from exc
            raise BackendUnavailable(f"Redis at {self.runner.url}: {exc}") from exc

    def seems_lost(self, worker_id: str) -> bool:
        """Without a round trip: whether the worker's named connection has been
        closed by the server (a restart, a cut), as its stream has seen. An id
        this backend held once and no longer holds is gone: a claim that took it
        before the worker registered again must not land under it."""
        if worker_id in self.retired:
            return True
        held = self.held.get(worker_id)
        if held is None or held.conn is None:
            return False
        reader = getattr(held.conn, "_reader", None)  # redis-py's StreamReader
        return reader is None or reader.at_eof()

    async def check(self, worker_id: str) -> None:
        """Raise LivenessLost unless the worker's named connection still answers.
        A worker not registered by this backend has nothing to prove here."""
        held = self.held.get(worker_id)
        if held is None or held.conn is None:
            return
        async with held.lock:
            failure: Exception | None = None
            if not held.conn.is_connected:
                # Dropped (by a check at the same time): a command would connect
                # it again, and its name would tell sweepers a dead worker lives.
                failure = redis_errors.ConnectionError("closed after it dropped")
            else:
                try:
                    await held.conn.send_command("PING")
                    await held.conn.read_response()
                except (redis_errors.RedisError, OSError) as exc:
                    failure = exc
        if failure is not None:
            await self.lost(worker_id, f"its liveness connection dropped ({failure})")

    def release(self, worker_id: str) -> Held | None:
        """Forget a worker that deregistered; its id is retired."""
        self.retired.add(worker_id)
        return self.held.pop(worker_id, None)

    async def lost(self, worker_id: str, why: str) -> None:
        """Forget a worker the fleet takes for dead, and say so (LivenessLost)."""
        held = self.release(worker_id)
        if held is not None:
            await self.drop(held, kill=True)
        raise LivenessLost(
            f"worker {worker_id} is gone to the fleet: {why}; its leases may be recovered "
            "by others at any moment"
        )

    async def drop(self, held: Held, *, kill: bool) -> None:
        """Close a worker's connection; ``kill`` first has Redis drop it at once, so
        that the next CLIENT LIST anywhere no longer shows it (as after a kill -9).

        The kill is sent on that connection itself: Redis numbers its clients
        afresh at each start, and by id from another connection it would kill
        whichever client a restarted server gave that number (another worker's
        liveness connection: its attempts recorded crashed). A connection already
        lost reaches no server, and is not connected again to be killed."""
        if held.conn is None:
            return
        async with held.lock:
            if kill and held.client_id is not None and held.conn.is_connected:
                # Redis gone or refusing: closing the socket says the same, a moment later
                with contextlib.suppress(RedisError, OSError):
                    await held.conn.send_command(
                        "CLIENT", "KILL", "ID", held.client_id, "SKIPME", "no"
                    )
                    await held.conn.read_response()
            await held.conn.disconnect()

    async def close(self) -> None:
        """Drop every worker's connection, as a kill -9 would (no deregistering)."""
        while self.held:
            worker_id, held = self.held.popitem()
            self.retired.add(worker_id)
            await self.drop(held, kill=True)

    async def everywhere(self) -> Any:
        """CLIENT LIST of every node (Cluster), or its error."""
        try:
            return await self.runner.topology.everywhere("CLIENT LIST", "TYPE", "normal")
        except (RedisError, OSError) as exc:
            return exc

    def names(self, reply: Any) -> set[str] | None:
        """The workers whose named connection CLIENT LIST replies (one, or one per
        node) show; None when the reply is an error because CLIENT is forbidden."""
        if isinstance(reply, Exception):
            if forbidden(reply):
                self.fallback_notice(str(reply))
                return None
            raise BackendUnavailable(f"Redis at {self.runner.url}: {reply}") from reply
        alive = set()
        for name in _client_names(reply):
            worker = self.keys.worker_of(name)
            if worker:
                alive.add(worker)
        return alive


def judge(registry: Sequence[Any], alive: set[str] | None) -> tuple[list[str], set[str]]:
    """Split the registered workers into gone and live. A worker with a named
    connection is gone when the connection is; one without (CLIENT forbidden) when
    it has not been seen for STALE_AFTER seconds."""
    now = float(registry[0])
    gone, live = [], set()
    for worker_id, info, _started, last_seen in registry[1:]:
        wid = worker_id.decode()
        named = orjson.loads(info).get("liveness") == "connection"
        if named and alive is not None:
            dead = wid not in alive
        else:
            dead = now - float(last_seen) > STALE_AFTER
        if dead:
            gone.append(wid)
        else:
            live.add(wid)
    return gone, live


class Workers:
    """Worker registration, the heartbeat and the list of workers."""

    def __init__(self, runner: Runner, keys: Keys, index: Index, liveness: Liveness) -> None:
        self.runner = runner
        self.keys = keys
        self.index = index
        self.liveness = liveness
        self._warned_durability = False

    async def register(self, info: WorkerInfo) -> None:
        await self._warn_if_volatile()
        entry = {"hostname": info.hostname, "pid": info.pid, "queues": list(info.queues)}
        await self.liveness.hold(info.id, entry)

    async def deregister(self, worker_id: str) -> None:
        held = self.liveness.release(worker_id)
        await self.runner.call("deregister", [self.keys.fleet], [worker_id])
        if held is not None:
            await self.liveness.drop(held, kill=False)

    async def workers(self) -> list[WorkerInfo]:
        registry = await self.runner.call("workers", [self.keys.fleet], repeatable=True)
        entries = registry[1:]
        ids = [worker_id.decode() for worker_id, *_ in entries]
        leases = await self._leases_held(ids)
        _, live = judge(registry, self.liveness.names(await self.liveness.everywhere()))
        found = []
        for worker_id, (_, info, started_at, last_seen) in zip(ids, entries, strict=True):
            data = orjson.loads(info)
            found.append(
                WorkerInfo(worker_id, data["hostname"], int(data["pid"]), tuple(data["queues"]),
                           float(started_at), float(last_seen), leases.get(worker_id, 0),
                           worker_id in live)
            )  # fmt: skip
        return sorted(found, key=lambda w: (w.started_at, w.id))

    async def _leases_held(self, worker_ids: list[str]) -> dict[str, int]:
        """Active jobs each worker holds: the sizes of its held sets, one per
        queue (each in its queue's hash slot), in one round trip."""
        queues = await self.index.queues()
        pairs = [(w, q) for w in worker_ids for q in queues]
        if not pairs:
            return {}
        calls = [Call.command("SCARD", self.keys.queue(q) + f"held:{w}") for w, q in pairs]
        sizes = await self.runner.pipeline(calls, repeatable=True)
        held: dict[str, int] = {}
        for (w, _), n in zip(pairs, sizes, strict=True):
            held[w] = held.get(w, 0) + int(n)
        return held

    async def heartbeat(self, worker_id: str, leases: Collection[LeaseRef]) -> Renewal:
        """Renew the presented leases the worker still holds, one script per queue,
        in one round trip. For a worker registered by this backend it also proves
        the worker alive: its named connection answers a PING (at the same time)
        and its registry entry is still there; LivenessLost otherwise."""
        presented = set(leases)
        mine = self.liveness.held.get(worker_id)
        here = mine is not None
        if not presented and (mine is None or time.monotonic() - mine.proven_at < IDLE_PROOF):
            if here and self.liveness.seems_lost(worker_id):
                await self.liveness.lost(worker_id, "its liveness connection was closed")
            return Renewal()
        queue_of = await self.index.queues_of({job_id for job_id, _ in presented})
        by_queue: dict[str, list[str | int]] = {}
        for job_id, fence in presented:
            if job_id in queue_of:
                by_queue.setdefault(queue_of[job_id], [worker_id]).extend((job_id, fence))
        calls = [Call.script("heartbeat", [self.keys.queue(q)], a) for q, a in by_queue.items()]
        if here:
            calls.append(Call.script("touch", [self.keys.fleet], [worker_id]))
        replies = await self._with_liveness(worker_id, self.runner.pipeline(calls))
        if here and not int(replies.pop()):
            await self.liveness.lost(worker_id, "a sweeper found it gone and buried it")
        if mine is not None:
            mine.proven_at = time.monotonic()
        held, cancel_requested = set(), set()
        for reply in replies:
            for i in range(0, len(reply), 3):
                lease = (reply[i].decode(), int(reply[i + 1]))
                held.add(lease)
                if int(reply[i + 2]):
                    cancel_requested.add(lease)
        return Renewal(frozenset(presented - held), frozenset(cancel_requested))

    async def _with_liveness(self, worker_id: str, work: Awaitable[list[Any]]) -> list[Any]:
        """Await ``work`` and, at the same time, the check of the worker's connection;
        a lost liveness wins over any other error."""
        checked, done = await asyncio.gather(
            self.liveness.check(worker_id), work, return_exceptions=True
        )
        for outcome in (checked, done):
            if isinstance(outcome, BaseException):
                raise outcome
        assert isinstance(done, list)
        return done

    async def _warn_if_volatile(self) -> None:
        """Once per backend opened: a server without AOF loses jobs when it restarts."""
        if self._warned_durability:
            return
        self._warned_durability = True
        try:
            info = await self.runner.command("INFO", "persistence")
        except BackendUnavailable:
            return  # INFO may be forbidden: say nothing rather than guess
        nodes = info.values() if isinstance(info, dict) and "aof_enabled" not in info else [info]
        if any(isinstance(n, dict) and not int(n.get("aof_enabled", 1)) for n in nodes):
            log.warning(
                "Redis at %s runs with appendonly no: a Redis restart loses jobs "
                "(see docs/redis.md: appendonly yes, appendfsync everysec)",
                self.runner.url,
            )


def _client_names(reply: Any) -> Iterator[str]:
    """The connection names in CLIENT LIST replies: raw text, or as redis-py
    parses them (one dict per connection), or a list of those (one per node)."""
    if isinstance(reply, bytes | str):
        text = reply.decode() if isinstance(reply, bytes) else reply
        for line in text.splitlines():
            for item in line.split(" "):
                if item.startswith("name="):
                    yield item[5:]
    elif isinstance(reply, dict):
        yield str(reply.get("name") or "")
    elif isinstance(reply, list):
        for item in reply:
            yield from _client_names(item)
