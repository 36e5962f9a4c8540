"""Wake-ups on PostgreSQL: idle workers LISTEN; writers NOTIFY.

One LISTEN connection per backend object, on the channel ``tenure.<schema>``;
enqueues, requeues, resumes and releases of workflow steps NOTIFY the
queue's name (never a payload bigger than a name), which PostgreSQL delivers
when their transaction commits (``Database.notify``, or ``pg_notify`` within
a statement). A lost LISTEN connection wakes every waiter, so nothing
sent meanwhile is missed, and is made again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import psycopg

from tenure.core.urls import one_line

log = logging.getLogger("tenure.postgres")


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
            # A job committed between the caller's last claim and the LISTEN
            # sent no NOTIFY this connection hears: once it listens, the
            # caller claims again, as after a LISTEN connection lost.
            self._task = asyncio.create_task(self._listen(), name="tenure-postgres-listen")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._listening.wait()
            return
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
