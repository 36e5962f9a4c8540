"""Lifecycle events on SQLite: written by the transition's own transaction,
read by number.

An event's id is its number. A row of the ``events`` table holds the events
of one queue that one transaction recorded (a cycle's completions, then its
claims: one statement, not one per kind), numbered after the last event: one
writer at a time holds the write lock, so numbers commit in order and a
reader that resumes after one misses nothing. A waiting reader watches
``PRAGMA data_version`` (a counter in the WAL's shared memory that moves when
another connection commits), not the table: SQLite cannot wake another
process by itself, and the counter costs no read of the database.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tenure.backends.sqlite.database import Database
from tenure.backends.sqlite.queries import Q
from tenure.config import QueuePolicy
from tenure.core.clock import Clock
from tenure.core.events import Event
from tenure.core.names import shown
from tenure.errors import InvalidInput

WATCH_INTERVAL = 0.05  # seconds between two looks at data_version while waiting
TRIM_INTERVAL = 60.0  # seconds between two retention passes of one sweeper
DEFAULTS = QueuePolicy()

# One event to record: (queue, kind, job_id, data or None)
Row = tuple[str, str, str, dict[str, Any] | None]


def record(
    conn: sqlite3.Connection | sqlite3.Cursor,
    now: float,
    events: Sequence[Row],
    on: Collection[str] = (),
) -> None:
    """Record events in the caller's transaction, for queues that keep them
    (``on``: queues this transaction found they do): a row for each queue, its
    events in order, whatever their kinds."""
    if not events:
        return
    rows: dict[str, tuple[list[str], list[Any], list[list[Any]]]] = {}
    for queue, kind, job_id, data in events:
        jobs, each, runs = rows.setdefault(queue, ([], [], []))
        jobs.append(job_id)
        each.append(data)
        if runs and runs[-1][0] == kind:
            runs[-1][1] += 1
        else:
            runs.append([kind, 1])
    for queue, (jobs, each, runs) in rows.items():
        conn.execute(
            Q["record_events" if queue in on else "record_events_if_on"],
            (queue, runs[0][0], orjson.dumps(jobs), orjson.dumps(each) if any(each) else None,
             now, len(jobs), orjson.dumps(runs) if len(runs) > 1 else None),
        )  # fmt: skip


@dataclass
class Pending:
    """What a transaction records as it ends: its events, and the queues whose
    policy it read and found recording them (their rows are written without
    reading it again); whether it queued jobs (a workflow's steps released),
    for which idle workers are woken once it commits."""

    events: list[Row] = field(default_factory=list)
    on: set[str] = field(default_factory=set)
    queued: bool = False

    def record(self, conn: sqlite3.Connection, now: float) -> None:
        record(conn, now, self.events, self.on)


def record_job(
    conn: sqlite3.Connection,
    now: float,
    job_id: str,
    events: Iterable[tuple[str, dict[str, Any] | None]],
) -> None:
    """Record events of one job (in its queue) in the caller's transaction."""
    conn.execute(Q["record_job_events"], (now, job_id, orjson.dumps(list(events))))


def events_of_rows(rows: Iterable[tuple[Any, ...]], after: int, limit: int) -> list[Event]:
    """The events the rows hold, numbered after ``after``, up to ``limit``."""
    events: list[Event] = []
    for last, n, queue, kind, at, jobs, data, kinds in rows:
        each = orjson.loads(data) if data else None
        kind_of = [k for k, count in orjson.loads(kinds) for _ in range(count)] if kinds else None
        for k, job_id in enumerate(orjson.loads(jobs)):
            number = last - n + 1 + k
            if number > after:
                found = each[k] if each else None
                kind_k = kind_of[k] if kind_of else kind
                events.append(Event(str(number), kind_k, job_id, queue, at, found or {}))
                if len(events) == limit:
                    return events
    return events


def event_cursor(after: str | None) -> int:
    """The id after which to read; InvalidInput for what is not one of ours."""
    if after is None:
        return 0
    if isinstance(after, str) and after.isascii() and after.isdigit() and len(after) <= 19:
        return int(after)
    raise InvalidInput(f"bad event id {shown(after)}: pass back an event's id")


class EventReader:
    """Reading the events, and their retention (the sweeper's)."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self._last_trim = 0.0  # when this sweeper last applied events' retention

    async def read(self, queue: str | None, start: int, limit: int, timeout: float) -> list[Event]:
        """Up to ``limit`` events after number ``start``, waiting up to ``timeout``
        seconds for one."""
        deadline = time.monotonic() + timeout
        while True:
            events, version = await self.db.run(self._read_events, queue, start, limit)
            if events or time.monotonic() >= deadline:
                return events
            while version == await self.db.run(self._data_version):
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                await asyncio.sleep(min(WATCH_INTERVAL, left))

    def last(self, ago: float) -> int:
        """The number of the last event recorded ``ago`` seconds ago or before."""
        if ago:
            (last,) = self.db.conn.execute(
                Q["last_event_before"], (self.clock.now() - ago,)
            ).fetchone()
        else:
            (last,) = self.db.conn.execute(Q["last_event"]).fetchone()
        return int(last)

    def _read_events(self, queue: str | None, after: int, limit: int) -> tuple[list[Event], int]:
        conn = self.db.conn
        version = self._data_version()
        rows = conn.execute(Q["read_events"], (after, queue, limit)).fetchall()
        return events_of_rows(rows, after, limit), version

    def _data_version(self) -> int:
        (version,) = self.db.conn.execute("PRAGMA data_version").fetchone()
        return int(version)

    def trim(self, conn: sqlite3.Connection, now: float) -> None:
        """Retention, once per TRIM_INTERVAL of this sweeper: a pass reads every event."""
        if now - self._last_trim < TRIM_INTERVAL:
            return
        self._last_trim = now
        conn.execute(Q["trim_events"], (now, DEFAULTS.events_max_age, DEFAULTS.events_max_count))
