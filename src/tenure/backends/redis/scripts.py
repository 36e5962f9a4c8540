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
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis import exceptions as redis_errors

from tenure.backends.redis.topology import Topology
from tenure.errors import BackendUnavailable, InvalidTransition, JobNotFound, LeaseLost

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
    "sweep_guard", "sweep", "orphans", "recover", "prune",
    "peek", "cancel", "retry_dead", "purge_dead", "delete_queue", "get", "list", "counts",
    "dead_counts",
    "lag",
    "flow_enqueue", "flow_commit", "apply", "outbox_drop", "flow_get", "flow_cancel", "spawn",
    "flow_drop",
    "register", "deregister", "touch", "workers", "change_policy", "key_counts",
)  # fmt: skip


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

    @classmethod
    def script(cls, name: str, keys: Sequence[str], args: Sequence[Arg] = ()) -> Call:
        return cls(("EVALSHA", SCRIPTS[name].sha, len(keys), *keys, *args))

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
                async with self.client.pipeline(transaction=False) as pipe:
                    for script in SCRIPTS.values():
                        pipe.execute_command("SCRIPT", "LOAD", script.source)
                    shas = await pipe.execute()
        except redis_errors.RedisError as exc:
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
        hot: bool = False,
    ) -> Any:
        """Run one script; one round trip (two more after a NOSCRIPT)."""
        call = Call.script(name, keys, args)
        return (await self.pipeline([call], repeatable=repeatable, hot=hot))[0]

    async def command(self, *args: Arg, repeatable: bool = False) -> Any:
        """Run one plain command."""
        return (await self.pipeline([Call.command(*args)], repeatable=repeatable))[0]

    async def pipeline(
        self,
        calls: Sequence[Call],
        tolerate: Collection[int] = (),
        *,
        repeatable: bool = False,
        hot: bool = False,
    ) -> list[Any]:
        """Run commands in order in one round trip; return their replies.

        Not a transaction: each script is atomic on its own. Commands that met
        NOSCRIPT are run again, in order, once the scripts are loaded again.
        Raises BackendUnavailable for the first command that failed otherwise,
        except those at the indices in ``tolerate``, whose error is their reply.
        ``repeatable`` calls (whose second run changes nothing the first did not:
        reads, progress, enqueue by job id) ride out a restart of Redis: they are
        run again for a moment when the connection drops.
        ``hot`` calls (a worker's cycle, an enqueue of one job) go through the
        topology's hot transport, the lane where there is one (a standalone
        Redis, not over TLS): the same commands and errors, without redis-py's
        per-call costs.
        """
        for delay in (*RETRY_BACKOFF, None) if repeatable else (None,):
            try:
                return await self._pipeline(calls, tolerate, hot)
            except BackendUnavailable as exc:
                if delay is None or not isinstance(exc.__cause__, TRANSIENT):
                    raise
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _pipeline(
        self, calls: Sequence[Call], tolerate: Collection[int], hot: bool
    ) -> list[Any]:
        if not calls:
            return []
        replies = await self._send(calls, hot)
        missing = [i for i, r in enumerate(replies) if isinstance(r, redis_errors.NoScriptError)]
        if missing:
            self.reloads += 1
            await self.load()
            again = await self._send([calls[i] for i in missing], hot)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        for i, reply in enumerate(replies):
            if isinstance(reply, Exception) and i not in tolerate:
                raise unavailable(reply, self.url) from reply
        return replies

    async def _send(self, calls: Sequence[Call], hot: bool = False) -> list[Any]:
        """The replies of the calls, error replies as values (ResponseError)."""
        transport = self.topology.hot if hot else self.topology.redis_py
        try:
            return await transport.pipeline([c.args for c in calls])
        except (redis_errors.RedisError, redis_errors.RedisClusterException, OSError) as exc:
            raise unavailable(exc, self.url) from exc


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
