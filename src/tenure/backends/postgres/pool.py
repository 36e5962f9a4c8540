"""The PostgreSQL backend's pool of connections: it starts no task of its own.

psycopg_pool keeps tasks on the event loop that opened it (a scheduler, and
workers that connect in the background when the pool grows or replaces a
connection); a cancellation landing in one of their connection attempts is
taken for a failed attempt, logged and retried, and the task lives on. An App
used on a caller's loop and never closed left them there: ``asyncio.run``, which
ends by cancelling every task of its loop and waiting for them, waited for ever.
Here the call that needs a connection makes it, in its own task, so a cancelled
call ends at once; what the pool holds is its idle connections, which
``close()`` closes. Of those, all but one close once unused for IDLE_KEPT:
a worker that drained a queue goes back to what an idle one holds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import select
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

__all__ = ["Pool", "PoolTimeout", "hung_up"]

Connection = psycopg.AsyncConnection[Any]
IDLE_KEPT = 5.0  # seconds an idle connection beyond the first stays open unused
# What the server says when it admits no more connections (SQLSTATE 53300,
# which libpq's failed connection does not carry): max_connections reached,
# or only the slots reserved for superusers left.
SERVER_FULL = ("too many clients", "remaining connection slots are reserved")
# Seconds a pool refused one more connection by a full server makes do with
# those it has before it asks again.
FULL_PAUSE = 1.0


def server_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's refusal of one more connection."""
    return any(sign in str(exc) for sign in SERVER_FULL)


class PoolTimeout(psycopg.OperationalError):
    """Every connection of the pool stayed in use for as long as a call may wait."""


class Pool:
    """Up to ``size`` autocommit connections to ``conninfo``, each made on demand
    with psycopg's ``options`` and set up by ``configure``; a call waits up to
    ``wait`` seconds for one when all are in use. Idle connections are taken
    newest first, so that a quiet producer keeps using one."""

    def __init__(
        self,
        conninfo: str,
        *,
        size: int,
        wait: float,
        configure: Callable[[Connection], Awaitable[None]],
        options: dict[str, Any] | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.options = options or {}
        self.size = size
        self.wait = wait
        self._configure = configure
        self._idle: collections.deque[tuple[Connection, float]] = collections.deque()
        self._count = 0  # connections open (idle or in use) or being made
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False
        self._full_until = 0.0  # a full server refused a connection: make do until then
        self.made = 0  # connections made so far (a new one may be to a restarted server)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A connection for the block, given back after it, however it ends."""
        conn = await self.getconn()
        try:
            yield conn
        finally:
            await self.putconn(conn)

    async def getconn(self) -> Connection:
        """An idle connection the server has not hung up on, a new one if the pool
        has room, or else the first given back within ``wait`` seconds."""
        deadline = asyncio.get_running_loop().time() + self.wait
        while True:
            if self._closed:
                raise psycopg.OperationalError("the connection pool is closed")
            if self._idle:
                conn, _ = self._idle.pop()
                if await self._usable(conn):
                    return conn
            elif self._count < self.size and asyncio.get_running_loop().time() >= self._full_until:
                try:
                    return await self._connect()
                except psycopg.OperationalError as exc:
                    if not self._count or not server_full(exc):
                        raise
                    # Another of ours is in use: wait for it rather than fail a
                    # busy worker's claim or settle because the server is full.
                    self._full_until = asyncio.get_running_loop().time() + FULL_PAUSE
                    await self._wait_until(deadline)
            else:
                await self._wait_until(deadline)

    async def putconn(self, conn: Connection) -> None:
        """Give ``conn`` back: kept if idle and open; closed if broken, or left in
        a transaction or in the middle of a statement (its call failed or was
        cancelled): closing rolls back, with no round trip to wait for."""
        if self._closed or conn.closed or conn.pgconn.transaction_status != TransactionStatus.IDLE:
            await self._discard(conn)
            return
        now = asyncio.get_running_loop().time()
        self._idle.append((conn, now))
        self._wake_one()
        while len(self._idle) > 1 and self._idle[0][1] < now - IDLE_KEPT:  # the oldest
            await self._discard(self._idle.popleft()[0])

    async def shed(self) -> None:
        """Close the idle connections: the server has none to spare."""
        while self._idle:
            await self._discard(self._idle.pop()[0])

    async def close(self) -> None:
        """Close the idle connections; those in use close when given back, and
        callers waiting for one fail."""
        self._closed = True
        await self.shed()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def _connect(self) -> Connection:
        self._count += 1
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.conninfo, application_name="tenure", autocommit=True, **self.options
            )
            try:
                await self._configure(conn)
            except BaseException:
                await conn.close()
                raise
            self.made += 1
        except BaseException:
            self._count -= 1
            self._wake_one()  # the room this attempt took is free again
            raise
        return conn

    async def _usable(self, conn: Connection) -> bool:
        """Whether an idle connection still works. Probed only when its socket is
        readable (the server said goodbye): a probe per checkout would cost a
        round trip, and a restarted server should cost nobody an error."""
        if conn.closed:
            await self._discard(conn)
            return False
        if not hung_up(conn):
            return True
        try:
            await conn.execute("")
        except psycopg.Error:
            await self._discard(conn)
            return False
        except BaseException:  # cancelled while probing: not left uncounted
            await self._discard(conn)
            raise
        return True

    async def _discard(self, conn: Connection) -> None:
        self._count -= 1
        try:
            await conn.close()
        finally:
            self._wake_one()  # room for a new connection

    async def _wait_until(self, deadline: float) -> None:
        """Wait for a connection given back (or room for a new one)."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise PoolTimeout(
                f"no connection of the pool's {self.size} was free for {self.wait:g} s"
            )
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(remaining):
                await waiter
        except TimeoutError:
            pass  # getconn's next turn raises PoolTimeout
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._wake_one()  # woken, but cancelled before it took the connection
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


def hung_up(conn: psycopg.BaseConnection[Any]) -> bool:
    """Whether an idle connection has something to read: the server's goodbye."""
    poll = select.poll()
    poll.register(conn.fileno(), select.POLLIN)
    return bool(poll.poll(0))
