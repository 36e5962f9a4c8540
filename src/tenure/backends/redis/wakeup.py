"""Wake-ups for idle workers: a blocking pop on per-queue signal lists.

Every script that makes jobs claimable (enqueue, a retry, a release, a rescue, a
promotion by the sweeper) pushes tokens onto its queue's signal list. An idle
worker blocks in ``BLPOP`` on its queues' lists, on a connection of its own, so
it claims within milliseconds of an enqueue instead of polling.

A pop outlives the wait that started it: when the worker stops waiting (a slot
freed, its own timeout), the pop stays pending and the next wait picks it up,
so the connection never has to be dropped mid-command. Errors never escape: a
wait on a broken Redis waits out its timeout, or UNREACHABLE_WAIT if that is
shorter (an idle worker's timeout is long, and a primary that failed over is
worth looking for again soon), and the claim that follows reports the failure.

A job can also become claimable with no token: a scheduled job comes due (its
time passes), or a queue an idle worker left with jobs in it (held back by
``max_active``, a rate limit, a task it does not know) has room again. Before it
blocks, a wait reads each queue's earliest scheduled job and whether jobs are
queued (one round trip), and blocks no longer than until the first comes due,
or HELD_BACK_POLL for such a queue. A script that makes a job come due sooner
than the earliest one pushes a token (``signal_sooner`` in ``_lib.lua``), so a
wait that read the old one wakes to read again. The worker's own safety poll
(``Capabilities.idle_poll``) is then long.

On Redis Cluster the lists live on several nodes: one pop per queue, and the
first token wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Sequence

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError

from tenure.backends.redis.keys import Keys
from tenure.backends.redis.topology import Topology
from tenure.backends.redis.transport import Command

log = logging.getLogger("tenure.redis")

MARGIN = 5.0  # seconds a pop may take beyond its BLPOP timeout before we give up on it
IDLE_POLL = 60.0  # seconds: an idle worker's safety poll (Capabilities.idle_poll)
UNREACHABLE_WAIT = 1.0  # seconds a wait whose pop failed waits, at most, before it returns
HELD_BACK_POLL = 1.0  # seconds: a queue with jobs an idle worker did not claim is looked at again


class Wakeups:
    """``wait_for_jobs`` of the Redis backend: a :class:`BlockingPop` per group of
    signal lists a worker waits on."""

    def __init__(self, topology: Topology, keys: Keys) -> None:
        self.topology = topology
        self.keys = keys
        self._pops: dict[tuple[str, ...], BlockingPop] = {}

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Block on the queues' signal lists (BLPOP) until a token or the timeout."""
        if not queues:
            return
        queues = list(dict.fromkeys(queues))
        timeout = min(timeout, await self._due_in(queues))
        if timeout <= 0:
            return
        lists = tuple(self.keys.signal(q) for q in queues)
        groups = [(key,) for key in lists] if self.topology.cluster else [lists]
        waits = [asyncio.ensure_future(self._pop(g).wait(g, timeout)) for g in groups]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()  # a pending pop outlives its wait: the next wait picks it up

    async def _due_in(self, queues: Sequence[str]) -> float:
        """Seconds until one of the queues may hold a claimable job no token
        announces (see the module docstring); inf if none may, or on an error
        (the wait then waits out its timeout, as on any error)."""
        commands: list[Command] = [("TIME",)]
        for q in queues:
            prefix = self.keys.queue(q)
            commands += [("ZRANGE", prefix + "scheduled", 0, 0, "WITHSCORES"),
                         ("EXISTS", prefix + "ready")]  # fmt: skip
        try:
            now, *replies = await self.topology.transport.pipeline(commands)
        except (RedisError, OSError):
            return math.inf
        if any(isinstance(r, Exception) for r in (now, *replies)):
            return math.inf
        due_in = math.inf
        for head, queued in zip(replies[::2], replies[1::2], strict=True):
            if head:
                due_in = min(due_in, float(head[1]) - (int(now[0]) + int(now[1]) / 1e6))
            if int(queued):
                due_in = min(due_in, HELD_BACK_POLL)
        return due_in

    def _pop(self, lists: tuple[str, ...]) -> BlockingPop:
        if lists not in self._pops:
            topology = self.topology
            self._pops[lists] = BlockingPop(lambda: topology.connection(lists[0]))
        return self._pops[lists]

    async def close(self) -> None:
        for pop in self._pops.values():
            await pop.close()
        self._pops = {}


class BlockingPop:
    """One blocking connection and at most one pending pop."""

    def __init__(self, connect: Callable[[], AbstractConnection]) -> None:
        self._connect = connect
        self._conn: AbstractConnection | None = None
        self._pop: asyncio.Task[bool] | None = None
        self._lists: tuple[str, ...] = ()

    async def wait(self, lists: tuple[str, ...], timeout: float) -> None:
        """Return when a token arrives on one of ``lists``, or after ``timeout`` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0.001:
            pop = self._pop
            if pop is not None and pop.done():
                self._pop = None
                if pop.cancelled() or pop.exception() is not None:
                    # Redis is unreachable (or failing over): wait a little,
                    # and let the claim that follows say how it is
                    await asyncio.sleep(min(left, UNREACHABLE_WAIT))
                    return
                if pop.result():
                    return
                continue
            if pop is not None and self._lists != lists:
                await self._abandon()
                continue
            if pop is None:
                self._lists = lists
                pop = self._pop = asyncio.create_task(self._blpop(lists, left))
            done, _ = await asyncio.wait({pop}, timeout=left)
            if not done:
                return

    async def _blpop(self, lists: tuple[str, ...], timeout: float) -> bool:
        if self._conn is None:
            self._conn = self._connect()
        conn = self._conn
        try:
            await conn.send_command("BLPOP", *lists, f"{max(timeout, 0.001):.3f}")
            async with asyncio.timeout(timeout + MARGIN):
                reply = await conn.read_response()
        except BaseException:
            await conn.disconnect()
            raise
        return reply is not None

    async def _abandon(self) -> None:
        """Give up the pending pop (the queues changed): its connection goes with it."""
        pop, self._pop = self._pop, None
        if pop is not None:
            pop.cancel()
            with contextlib.suppress(BaseException):
                await pop

    async def close(self) -> None:
        await self._abandon()
        if self._conn is not None:
            await self._conn.disconnect()
            self._conn = None
