"""Worker liveness and wake-ups on PostgreSQL.

Liveness: each registered worker holds the session advisory lock
``(namespace, lock_no)`` on a connection of its own. PostgreSQL drops the lock
the moment that session ends (the process died, the connection was cut or
terminated), and ``pg_locks`` shows the sweeper of any other worker that it is
gone. Every heartbeat checks the connection, so a worker whose connection
dropped learns it at once and re-registers under a new identity.

Wake-ups: one LISTEN connection per backend object; enqueues and requeues
NOTIFY the queue's name (never a payload bigger than a name).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
from collections.abc import Sequence
from typing import Any

import psycopg

from tenure.core.urls import one_line
from tenure.errors import LivenessLost

log = logging.getLogger("tenure.postgres")


class Liveness:
    def __init__(self, conninfo: str, namespace: int) -> None:
        self.conninfo = conninfo
        self.namespace = namespace
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._locks: dict[str, int] = {}  # worker id -> lock_no
        self._retired: set[str] = set()  # ids this backend held and no longer does
        self._lost = False
        self._lock = asyncio.Lock()

    async def hold(self, worker_id: str, lock_no: int) -> None:
        """Take the worker's lock, on the liveness connection, until release or close."""
        async with self._lock:
            if self._conn is None or self._conn.closed or self._lost or hung_up(self._conn):
                await self._reconnect()
            assert self._conn is not None
            await self._conn.execute("SELECT pg_advisory_lock(%s, %s)", (self.namespace, lock_no))
            self._locks[worker_id] = lock_no

    async def _reconnect(self) -> None:
        if self._conn is not None:
            await self._conn.close()
        self._conn = await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, application_name="tenure-liveness"
        )
        self._retired.update(self._locks)
        self._locks.clear()
        self._lost = False

    async def check(self, worker_id: str) -> None:
        """Raise LivenessLost unless ``worker_id``'s lock is still held by a live session."""
        if worker_id not in self._locks:
            return  # not registered here: nothing to prove
        async with self._lock:
            try:
                assert self._conn is not None
                # A goodbye already here is taken as such, without a query: while
                # the query is out, seems_lost cannot poll, and claims would go on
                # under this identity until its answer.
                if hung_up(self._conn):
                    raise psycopg.OperationalError("the server closed the connection")
                await self._conn.execute("SELECT 1")
            except (psycopg.Error, AssertionError) as exc:
                self._lost = True
                raise LivenessLost(
                    f"the liveness connection of worker {worker_id} dropped ({exc}); "
                    "its leases may be recovered by others at any moment"
                ) from exc

    def seems_lost(self, worker_id: str) -> bool:
        """Without a round trip: whether ``worker_id``'s session is known to be
        gone, or its idle socket holds the server's goodbye (a restart). An id
        this backend held once and no longer holds is gone: a claim that took it
        before the worker registered again must not land under it."""
        if worker_id in self._retired:
            return True
        if worker_id not in self._locks:
            return False
        if self._lost or self._conn is None or self._conn.closed:
            return True
        return not self._lock.locked() and hung_up(self._conn)

    async def release(self, worker_id: str) -> None:
        async with self._lock:
            lock_no = self._locks.pop(worker_id, None)
            self._retired.add(worker_id)
            if lock_no is not None and self._conn is not None and not self._conn.closed:
                with contextlib.suppress(psycopg.Error):
                    await self._conn.execute(
                        "SELECT pg_advisory_unlock(%s, %s)", (self.namespace, lock_no)
                    )

    async def close(self) -> None:
        """End the session: every lock it held is released, as at a kill -9."""
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        self._retired.update(self._locks)
        self._locks.clear()


class Wakeups:
    """LISTEN for the queues' channel; tell waiting workers which queue got a job."""

    def __init__(self, conninfo: str, listen: bytes) -> None:
        self.conninfo = conninfo
        self.listen = listen  # the LISTEN statement of the channel (statements.py)
        self._pending: set[str] = set()
        self._waiters: list[tuple[frozenset[str], asyncio.Event]] = []
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="tenure-postgres-listen")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._listening.wait()
        wanted = frozenset(queues)
        if self._pending & wanted:  # a job came while nobody was waiting
            self._pending -= wanted
            return
        event = asyncio.Event()
        waiter = (wanted, event)
        self._waiters.append(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await event.wait()
        finally:
            self._waiters.remove(waiter)
        self._pending -= wanted

    async def _listen(self) -> None:
        delay = 0.1
        lost = False  # said once, until it listens again
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True, application_name="tenure-listen"
                )
                async with conn:
                    await conn.execute(self.listen)
                    self._listening.set()
                    delay = 0.1
                    if lost:
                        log.info("LISTEN connection back: idle workers are woken again")
                        lost = False
                    async for notice in conn.notifies():
                        self._signal(notice.payload)
            except psycopg.Error as exc:
                cause = one_line(str(exc))
                log.log(logging.DEBUG if lost else logging.WARNING,
                        "LISTEN connection lost (%s); reconnecting", cause)  # fmt: skip
                lost = True
            self._listening.clear()
            self._signal_all()  # what was missed meanwhile: let workers look
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _signal(self, queue: str) -> None:
        self._pending.add(queue)
        for wanted, event in self._waiters:
            if queue in wanted:
                event.set()

    def _signal_all(self) -> None:
        for _, event in self._waiters:
            event.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def hung_up(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection has something to read: the server's goodbye."""
    poll = select.poll()
    poll.register(conn.fileno(), select.POLLIN)
    return bool(poll.poll(0))
