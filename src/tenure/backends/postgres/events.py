"""Lifecycle events on PostgreSQL: read in (xid, id) order, by readers that poll.

A row holds the events of one kind and queue that one statement recorded (a
cycle's completions, its claims). Ids from a sequence are taken in one order
and committed in another: reading ``id > after`` would skip an event whose
transaction took a smaller id and committed later. So an event's id is
``<xid>-<n>.<k>``: the transaction that wrote its row, the row's place in the
sequence, the event's place in the row; readers see only rows of transactions
older than every transaction still running (``pg_snapshot_xmin``), a part of
the order that can no longer change. A long transaction anywhere on the server
delays events (it never loses them). A waiting reader looks every
EVENTS_POLL seconds, and sooner while events are held back behind a running
transaction. Writers do not NOTIFY: a transaction that notifies takes a
database-wide lock at commit and holds it through its WAL flush, so with
``fsync`` on, every worker's cycle would commit one after the other
(docs/benchmarks.md, "PostgreSQL with fsync on").
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from tenure.backends.checks import check_ago
from tenure.backends.postgres.database import Database
from tenure.core.events import Event
from tenure.core.names import check_name, shown
from tenure.errors import InvalidInput

HELD_BACK_RETRY = 0.01  # seconds before a look again while events are held back
# Seconds a read waits for events recorded but held back, even one that waits
# for no new event (timeout 0): a transaction of another database on the same
# server, however short, would otherwise hide them from it.
HELD_BACK_WAIT = 1.0
EVENTS_POLL = 0.05  # seconds between two looks of a reader waiting for events
MAX_ID = 2**63 - 1


# Where a reader stands: the row of the last event (xid, id), its place in it.
Cursor = tuple[str, int, int]


def parse_event_id(after: str | None) -> Cursor:
    """``(xid, id, k)`` of an event id ``<xid>-<id>.<k>``; InvalidInput otherwise."""
    if after is None:
        return "0", 0, -1
    if isinstance(after, str):
        xid, sep, rest = after.partition("-")
        n, dot, k = rest.partition(".")
        parts = (xid, n, k)
        if (sep and dot and all(x.isascii() and x.isdigit() and len(x) <= 20 for x in parts)
                and int(xid) < 2**64 and int(n) <= MAX_ID and int(k) <= MAX_ID):  # fmt: skip
            return xid, int(n), int(k)
    raise InvalidInput(f"bad event id {shown(after)}: pass back an event's id")


def row_data(data: Any, n: int) -> list[Any]:
    """The data of each of a row's ``n`` events, stored as a list (one per
    event), as none (NULL), or in the shared form ``{"all": {...}}``: every
    event has that data (a batch's enqueued events, built once by the client)."""
    if isinstance(data, dict):
        return [data["all"]] * n
    return data or [None] * n


class EventReader:
    """The event verbs: read, and where a reader starts."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def read(
        self, queue: str | None, after: str | None, limit: int, timeout: float = 0.0
    ) -> list[Event]:
        if queue is not None:
            check_name("queue", queue)
        cursor = parse_event_id(after)
        start = time.monotonic()
        began: int | None = None  # every transaction committed when the read began is below
        while True:
            events, held, horizon, xmax = await self._read(queue, cursor, limit)
            if began is None:
                began = xmax if held else 0
            # A reader reads what was recorded before it asked (a caller's own
            # completion, say): events held back behind a transaction older
            # than the read are waited for, up to HELD_BACK_WAIT; a full page
            # needs no wait, what is held back comes after it.
            whole = horizon >= began or len(events) == limit
            waited = time.monotonic() - start
            if events:
                left = 0.0 if whole else HELD_BACK_WAIT - waited
            else:
                left = (max(timeout, HELD_BACK_WAIT) if held else timeout) - waited
            if left <= 0:
                return events
            await asyncio.sleep(min(HELD_BACK_RETRY if held else EVENTS_POLL, left))

    async def now(self, queue: str | None, ago: float = 0.0) -> str:
        # Just before the first transaction that had not started when the call
        # began, once every older one ended (up to HELD_BACK_WAIT): what they
        # recorded comes before, what any other records, after. Past the wait,
        # just before the oldest still running instead: a few events recorded
        # before the call come after it then, none recorded later is skipped.
        if queue is not None:
            check_name("queue", queue)
        if check_ago(ago):
            return await self._events_before(ago)
        start = time.monotonic()
        began: int | None = None
        while True:
            async with self.db.conn() as conn:
                cur = await conn.execute(self.db.q["events_horizon"])
                row = await cur.fetchone()
            assert row is not None
            horizon = int(row[0])
            began = int(row[1]) if began is None else began
            if horizon >= began:
                return f"{began - 1}-{MAX_ID}.{MAX_ID}"
            if time.monotonic() - start >= HELD_BACK_WAIT:
                return f"{horizon - 1}-{MAX_ID}.{MAX_ID}"
            await asyncio.sleep(HELD_BACK_RETRY)

    async def _events_before(self, ago: float) -> str:
        """After the whole of the newest row recorded over ``ago`` seconds ago
        (before every row when none is)."""
        async with self.db.conn() as conn:
            cur = await conn.execute(self.db.q["last_event_before"], {"ago": ago})
            row = await cur.fetchone()
        return "0-0.0" if row is None else f"{row[0]}-{row[1]}.{MAX_ID}"

    async def _read(
        self, queue: str | None, cursor: Cursor, limit: int
    ) -> tuple[list[Event], bool, int, int]:
        """The events after ``cursor``, whether some are held back, the
        horizon and the snapshot's xmax (see read_events)."""
        xid, n, skip = cursor
        params = {"queue": queue, "xid": xid, "id": n, "limit": limit}
        async with self.db.conn() as conn:
            cur = await conn.execute(self.db.q["read_events"], params)
            rows = await cur.fetchall()
        held, horizon, xmax = rows[0][-3:]
        events: list[Event] = []
        for x, i, q, kind, jobs, at, data, *_ in rows:
            if x is None:
                continue
            ids = orjson.loads(jobs)
            each = row_data(orjson.loads(data) if data else None, len(ids))
            for k, job_id in enumerate(ids):
                if (x, i) == (xid, n) and k <= skip:
                    continue
                events.append(Event(f"{x}-{i}.{k}", kind, job_id, q, at, each[k] or {}))
                if len(events) == limit:
                    return events, False, int(horizon), int(xmax)
        return events, bool(held), int(horizon), int(xmax)
