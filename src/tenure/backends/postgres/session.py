"""The liveness session: one connection per backend that holds the advisory
locks of its workers (``liveness.py``) and LISTENs for their wake-ups
(``wakeup.py``), so that a worker costs the server one connection besides its
pool's.

Statements run on it one at a time. Between them it listens: a task waits
for its socket to be readable and reads what came, without a round trip:
notifications go to ``on_notify``; the server's goodbye (an error at the end
of input, or a FATAL notice: a restart, a terminated backend) marks the session
lost, and ``on_gap`` is told, as it is when a new session listens: what was
sent meanwhile was not heard. A caller that needs the connection asks the
listening task to step aside (``_turn``). It has its own ``conninfo``: it may
go to PostgreSQL directly where the pool goes through a pooler.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
from psycopg.errors import Diagnostic
from psycopg.pq import ConnStatus, TransactionStatus

Connection = psycopg.AsyncConnection[Any]


class Session:
    """One autocommit connection to ``conninfo``, from ``connect`` to ``close``
    or until it is lost; a new one is made by ``connect`` only."""

    def __init__(
        self,
        conninfo: str,
        listen: bytes,
        on_notify: Callable[[str], None],
        on_gap: Callable[[], None],
    ) -> None:
        self.conninfo = conninfo
        self.listen = listen  # the LISTEN statement of the channel (statements.py)
        self.on_notify = on_notify
        self.on_gap = on_gap
        self._conn: Connection | None = None
        self._lost = False
        self._lock = asyncio.Lock()  # held by the statement running, or by the listener
        self._aside: asyncio.Future[None] | None = None  # resolved: the listener looks up
        self._idle = False  # the listener holds the lock, only waiting for input
        self._callers = 0  # statements waiting for the lock or running
        self._listener: asyncio.Task[None] | None = None

    def gone(self) -> bool:
        """Without a round trip: whether there is no session, or it is known
        lost, or its idle socket holds the server's goodbye (read here, and
        what else came with it handed on)."""
        if self._conn is None or self._conn.closed or self._lost:
            return True
        if self._idle:  # no statement is out: what the socket holds can be read now
            self._read()
        return self._lost

    async def connect(self) -> None:
        """A new session that listens (the old one closed first: its locks are gone)."""
        await self.close()
        conn = await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, application_name="tenure-liveness"
        )
        try:
            conn.add_notify_handler(lambda n: self.on_notify(n.payload))
            conn.add_notice_handler(self._notice)
            await conn.execute(self.listen)
        except BaseException:
            await conn.close()
            raise
        self._conn, self._lost = conn, False
        self._listener = asyncio.create_task(self._listen(conn), name="tenure-postgres-listen")
        self.on_gap()  # nothing sent before this LISTEN was heard

    async def execute(self, query: str | bytes, params: Any = None) -> list[Any]:
        """The rows of one statement on the session; psycopg's error if it fails.
        The session is then lost unless its connection is idle again (the
        statement's own error): closed, or left inside the statement by a
        cancellation, nobody knows which locks it holds."""
        async with self._turn() as conn:
            try:
                cur = await conn.execute(query, params)
                return await cur.fetchall() if cur.description else []
            except BaseException:
                if conn.closed or conn.pgconn.transaction_status != TransactionStatus.IDLE:
                    self._set_lost()
                raise

    async def close(self) -> None:
        """End the session: every lock it held is released, as at a kill -9."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[Connection]:
        """The connection, for one statement: the listener steps aside (the lock
        is fair: it queues behind every caller waiting), and while callers are
        counted it takes the lock only to give it back: a caller that woke the
        listener's last wait, then queued behind its next one, would otherwise
        wait for the socket's next input (a NOTIFY, seconds away)."""
        self._callers += 1
        try:
            if self._aside is not None:
                _resolve(self._aside)
            async with self._lock:
                conn = self._conn
                if conn is None or conn.closed or self._lost:
                    raise psycopg.OperationalError("the liveness session is gone")
                yield conn
        finally:
            self._callers -= 1

    async def _listen(self, conn: Connection) -> None:
        """Hold the connection while nobody needs it, reading what comes."""
        loop, fd = asyncio.get_running_loop(), conn.fileno()
        while not self._lost and not conn.closed:
            async with self._lock:
                if conn is not self._conn or self._lost or conn.closed:
                    return
                if self._callers:  # they queued behind this turn: theirs first
                    continue
                self._aside = aside = loop.create_future()
                loop.add_reader(fd, _resolve, aside)
                self._idle = True
                try:
                    await aside
                finally:
                    self._idle = False
                    loop.remove_reader(fd)
                self._read()

    def _read(self) -> None:
        """Read what the idle socket holds: notifications, or the end."""
        assert self._conn is not None
        pgconn = self._conn.pgconn
        try:
            pgconn.consume_input()
            while (notice := pgconn.notifies()) is not None:
                if pgconn.notify_handler is not None:
                    pgconn.notify_handler(notice)
        except psycopg.Error:
            self._set_lost()
            return
        if pgconn.status != ConnStatus.OK:
            self._set_lost()

    def _notice(self, diag: Diagnostic) -> None:
        if diag.severity_nonlocalized in ("FATAL", "PANIC"):  # its end comes next
            self._set_lost()

    def _set_lost(self) -> None:
        if not self._lost:
            self._lost = True
            if self._aside is not None:
                _resolve(self._aside)
            self.on_gap()  # idle workers look for themselves meanwhile


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
