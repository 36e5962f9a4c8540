"""tenure's Lua scripts: loaded once, called by SHA, reloaded after ``NOSCRIPT``.

Each transition is one script in ``scripts/<name>.lua`` whose header names its
KEYS, ARGV and return values; ``scripts/_lib.lua`` (shared helpers),
``scripts/_keys.lua`` (concurrency keys) and ``scripts/_flow.lua`` (workflows'
edges and their messages) are put in front of each. Scripts are loaded when
the backend opens and called with ``EVALSHA``; a Redis restart or ``SCRIPT
FLUSH`` forgets them, and the first call that meets ``NOSCRIPT`` loads them all
again and runs once more (a command that got ``NOSCRIPT`` did not run, so
running it again is safe).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis import exceptions as redis_errors

from tenure.backends.redis.topology import Topology
from tenure.errors import BackendUnavailable, InvalidTransition, JobNotFound, LeaseLost

log = logging.getLogger("tenure.redis")

Arg = str | bytes | int | float

# Waits before running a repeatable call again after Redis dropped the connection
# or was loading (a restart): about 1.5 s in all, then the error stands.
RETRY_BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8)
TRANSIENT = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)

LOAD_AT_ONCE = 8  # scripts loaded at once on Cluster (each holds a connection per node)

# The status codes scripts return (see the top of _lib.lua).
OK, NOT_FOUND, LEASE_LOST, INVALID_TRANSITION = 0, 1, 2, 3

NAMES = (
    "enqueue", "enqueue_tick", "claim", "cycle", "heartbeat", "progress", "complete", "fail",
    "release",
    "sweep", "orphans", "recover", "prune",
    "peek", "cancel", "retry_dead", "purge_dead", "delete_queue", "get", "list", "counts",
    "dead_counts",
    "lag",
    "flow_enqueue", "flow_commit", "apply", "outbox_drop", "flow_get", "flow_cancel", "spawn",
    "flow_drop",
    "register", "deregister", "touch", "workers", "change_policy", "key_counts",
)  # fmt: skip


# What ?wait_replicas= makes wait for replicas (a lost claim or heartbeat is
# made good by at-least-once): enqueues, which fail unless the replicas have
# them (an acknowledged job is never lost); settles, a cycle's when it
# completes jobs, which are said unreplicated (lost, the job runs again).
ENQUEUES = frozenset({"enqueue", "enqueue_tick", "flow_enqueue", "flow_commit", "spawn"})
SETTLES = frozenset({"cycle", "complete", "fail"})

# Scripts made of several files, in order: a guard in front of a transition.
PARTS = {"enqueue_tick": ("enqueue_tick", "enqueue")}


@dataclass(frozen=True, slots=True)
class Script:
    """One Lua script of ``scripts/``, with the SHA1 that EVALSHA names it by."""

    name: str
    source: bytes
    sha: str


def _load_sources() -> dict[str, Script]:
    folder = resources.files("tenure.backends.redis") / "scripts"
    lib = b"\n".join((folder / f"_{part}.lua").read_bytes() for part in ("lib", "keys", "flow"))
    scripts = {}
    for name in NAMES:
        parts = [(folder / f"{part}.lua").read_bytes() for part in PARTS.get(name, (name,))]
        source = lib + b"\n" + b"\n".join(parts)
        scripts[name] = Script(name, source, hashlib.sha1(source).hexdigest())
    return scripts


SCRIPTS = _load_sources()


@dataclass(frozen=True, slots=True)
class Call:
    """One command for :meth:`Runner.pipeline`: a script or a plain command."""

    args: tuple[Arg, ...]
    waits: str = ""  # for replicas, with ?wait_replicas=: "enqueue", "settle" or not

    @classmethod
    def script(cls, name: str, keys: Sequence[str], args: Sequence[Arg] = ()) -> Call:
        # a cycle's KEYS: the queues it claims from (ARGV[7] of them), then
        # those it completes in
        settles = name in SETTLES and (name != "cycle" or len(keys) > int(args[6]))
        waits = "enqueue" if name in ENQUEUES else "settle" if settles else ""
        return cls(("EVALSHA", SCRIPTS[name].sha, len(keys), *keys, *args), waits)

    @classmethod
    def command(cls, *args: Arg) -> Call:
        return cls(args)


def unavailable(exc: Exception, url: str) -> BackendUnavailable:
    """The error to raise for a failure of Redis (unreachable, loading, refused)."""
    return BackendUnavailable(f"Redis at {url}: {exc}")


class Runner:
    """Runs scripts and commands on a client, one round trip per call or pipeline."""

    def __init__(self, topology: Topology, url: str) -> None:
        self.topology = topology
        self.client = topology.client
        self.url = url
        self.reloads = 0  # how many times NOSCRIPT made us load the scripts again
        self._short = False  # writes go unreplicated (WAIT fell short), said once

    async def load(self) -> None:
        """Load every script (SCRIPT LOAD) on every primary, in one round trip."""
        try:
            if self.topology.cluster:  # a few at a time: each takes a connection per node
                shas = []
                scripts = list(SCRIPTS.values())
                for i in range(0, len(scripts), LOAD_AT_ONCE):
                    shas += await asyncio.gather(*(
                        self.topology.everywhere("SCRIPT LOAD", s.source)
                        for s in scripts[i : i + LOAD_AT_ONCE]
                    ))  # fmt: skip
                shas = [reply[0] for reply in shas]
            else:
                loads = [("SCRIPT", "LOAD", s.source) for s in SCRIPTS.values()]
                shas = await self.topology.transport.pipeline(loads)
                for sha in shas:
                    if isinstance(sha, Exception):
                        raise sha
        except (redis_errors.RedisError, OSError) as exc:
            raise unavailable(exc, self.url) from exc
        for script, sha in zip(SCRIPTS.values(), shas, strict=True):
            got = sha.decode() if isinstance(sha, bytes) else str(sha)
            if got != script.sha:  # pragma: no cover - Redis hashes what we hash
                raise BackendUnavailable(f"Redis hashed script {script.name} as {got}")

    async def call(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[Arg] = (),
        *,
        repeatable: bool = False,
    ) -> Any:
        """Run one script; one round trip (two more after a NOSCRIPT)."""
        call = Call.script(name, keys, args)
        return (await self.pipeline([call], repeatable=repeatable))[0]

    async def command(self, *args: Arg, repeatable: bool = False) -> Any:
        """Run one plain command."""
        return (await self.pipeline([Call.command(*args)], repeatable=repeatable))[0]

    async def pipeline(
        self,
        calls: Sequence[Call],
        *,
        repeatable: bool = False,
    ) -> list[Any]:
        """Run commands in order in one round trip; return their replies.

        Not a transaction: each script is atomic on its own. Commands that met
        NOSCRIPT are run again, in order, once the scripts are loaded again:
        after those that did not, so a read that must follow a script is sent
        in a round trip of its own.
        Raises BackendUnavailable for the first command that failed otherwise.
        ``repeatable`` calls (whose second run changes nothing the first did not:
        reads, progress, enqueue by job id) ride out a restart of Redis: they are
        run again for a moment when the connection drops.
        Calls go through the topology's transport: the lane where there is one
        (a standalone Redis, not over TLS), else redis-py's client.
        """
        for delay in (*RETRY_BACKOFF, None) if repeatable else (None,):
            try:
                return await self._pipeline(calls)
            except BackendUnavailable as exc:
                if delay is None or not isinstance(exc.__cause__, TRANSIENT):
                    raise
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _pipeline(self, calls: Sequence[Call]) -> list[Any]:
        if not calls:
            return []
        replies = await self._send(calls)
        missing = [i for i, r in enumerate(replies) if isinstance(r, redis_errors.NoScriptError)]
        if missing:
            self.reloads += 1
            await self.load()
            again = await self._send([calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        for reply in replies:
            if isinstance(reply, Exception):
                raise unavailable(reply, self.url) from reply
        return replies

    async def _send(self, calls: Sequence[Call]) -> list[Any]:
        """The replies of the calls, error replies as values (ResponseError).
        With ``?wait_replicas=``, a pipeline that enqueues or completes ends with
        ``WAIT``: its reply comes once replicas have it, or after the timeout;
        BackendUnavailable then for an enqueue."""
        commands = [c.args for c in calls]
        wait = self.topology.wait
        waits = {c.waits for c in calls} - {""} if wait is not None else set()
        if waits:
            commands.append(("WAIT", *wait))  # type: ignore[misc]
        try:
            replies = await self.topology.transport.pipeline(commands)
        except (redis_errors.RedisError, redis_errors.RedisClusterException, OSError) as exc:
            raise unavailable(exc, self.url) from exc
        if waits:
            self._replicated(replies.pop(), enqueues="enqueue" in waits)
        return replies

    def _replicated(self, reply: Any, *, enqueues: bool) -> None:
        """Fail an enqueue the replicas did not have within the timeout (it is
        stored on the primary, which a failover may lose); say once, until
        replicas keep up again, that completions were acknowledged without
        them: a failover now may lose them, and their jobs run again."""
        assert self.topology.wait is not None
        wanted, ms = self.topology.wait
        got = -1 if isinstance(reply, Exception) else int(reply)
        if got < wanted and enqueues:
            raise BackendUnavailable(
                f"Redis at {self.url}: {max(got, 0)} of the {wanted} replicas wait_replicas "
                f"asks for had this enqueue within {ms / 1000:g} s: it is stored on the "
                "primary only, where a failover may lose it; enqueued again, it may be "
                "stored twice (give it a key= to make that harmless)"
            )
        if got >= wanted:
            self._short = False
        elif not self._short:
            self._short = True
            log.warning(
                "Redis at %s: completions acknowledged by %s of the %d replicas "
                "wait_replicas asks for: a failover now may lose them (their jobs run again)",
                self.url, reply if got < 0 else got, wanted,
            )  # fmt: skip


def check(code: Any, job_id: str, fence: int | None = None) -> None:
    """Raise the typed error a script's status code stands for."""
    code = int(code)
    if code == OK:
        return
    if code == NOT_FOUND:
        raise JobNotFound(f"no job with id {job_id!r}")
    if code == LEASE_LOST:
        raise LeaseLost(
            f"job {job_id} is no longer held with fence {fence}: "
            "it was recovered or settled by someone else"
        )
    if code == INVALID_TRANSITION:
        raise InvalidTransition(f"job {job_id} cannot make this transition")
    raise BackendUnavailable(f"unknown status {code!r} from a tenure script")  # pragma: no cover
