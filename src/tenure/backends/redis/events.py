"""Lifecycle events on Redis: a stream per queue, read by id.

Each queue's scripts append to its stream, ``<prefix>:{queue}:events``, in the
script of the transition (``record_event`` in ``_lib.lua``): one hash slot, so
events work on Redis Cluster, and a stream's ids (``<ms>-<n>``, Redis's clock)
grow in the order its scripts ran.

An entry holds the events of one kind that one script recorded for the queue
(a cycle's completions, its claims), in order. An event's id is
``<ms>-<n>.<k>@<queue>``: its entry's stream id, its place in the entry, its
queue. The order of events is ``(ms, n, queue, k)``. One queue's reader reads
its stream from the entry ``<ms>-<n>`` on, skipping what it delivered of it. A
reader of every queue reads every stream at once (``XREAD`` with one id per
stream) and merges them in that order: two streams may hold the same
``<ms>-<n>``, and the queue in the id says, for each stream, whether its entry
of that ``<ms>-<n>`` was delivered. A stream may still get an entry of the
current millisecond: the reader asks Redis for the time before it reads, and
delivers only entries of earlier milliseconds (later ones on its next read).
A new entry's milliseconds are never below Redis's clock when it is written,
so nothing is ever added behind a delivered id (on a Redis whose clock does
not step back; on Cluster, each node has its own clock, and a node behind the
others may add entries behind a delivered id of another node's queue: read
one queue per reader there, or accept it).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from redis.exceptions import RedisError

from tenure.backends.redis.index import Index
from tenure.backends.redis.keys import Keys
from tenure.backends.redis.scripts import Call, Runner, unavailable
from tenure.config import QueuePolicy
from tenure.core.events import Event
from tenure.core.names import check_name, shown
from tenure.errors import InvalidInput

StreamId = tuple[int, int]
HELD_BACK_RETRY = 0.002  # seconds: an entry of the current millisecond is delivered after it
MAX_BLOCK = 1.0  # seconds one XREAD BLOCK waits: a new queue's stream is read after it
CLUSTER_POLL = 0.1  # seconds between two reads on Cluster, where one XREAD spans one slot
TRIM_INTERVAL = 60.0  # seconds between two retention passes of one sweeper
MAX_PART = 2**64 - 1


# Where a reader stands: the last event's entry, its queue, its place in the entry.
Cursor = tuple[StreamId, str, int]


def parse_event_id(after: str | None) -> Cursor | None:
    """``((ms, n), queue, k)`` of an event id; InvalidInput otherwise."""
    if after is None:
        return None
    if isinstance(after, str):
        head, sep, queue = after.partition("@")
        entry, dot, k = head.partition(".")
        ms, dash, n = entry.partition("-")
        parts = (ms, n, k)
        if (sep and dash and dot and all(x.isascii() and x.isdigit() and len(x) <= 20
                                         for x in parts)
                and max(int(x) for x in parts) <= MAX_PART):  # fmt: skip
            check_name("queue", queue)
            return (int(ms), int(n)), queue, int(k)
    raise InvalidInput(f"bad event id {shown(after)}: pass back an event's id")


def _before(sid: StreamId) -> str:
    """The stream id just before ``sid``: XREAD reads after the id it is given."""
    ms, n = sid
    if n > 0:
        return f"{ms}-{n - 1}"
    return f"{ms - 1}-{MAX_PART}" if ms > 0 else "0-0"


def start_of(queue: str, cursor: Cursor | None) -> str:
    """Where to read ``queue``'s stream from, after the event ``cursor``: after
    its entry for an earlier queue (delivered whole), from it for the same
    queue (partly delivered) or a later one (not yet delivered)."""
    if cursor is None:
        return "0-0"
    sid, last_queue, _ = cursor
    return f"{sid[0]}-{sid[1]}" if queue < last_queue else _before(sid)


class EventReader:
    """``read_events`` of :class:`~tenure.backends.redis.RedisBackend`."""

    def __init__(self, runner: Runner, keys: Keys, index: Index) -> None:
        self.runner = runner
        self.keys = keys
        self.index = index
        self._last_trim = -TRIM_INTERVAL

    def stream(self, queue: str) -> str:
        return self.keys.queue(queue) + "events"

    async def read(
        self, queue: str | None, after: str | None, limit: int, timeout: float
    ) -> list[Event]:
        if queue is not None:
            check_name("queue", queue)
        cursor = parse_event_id(after)
        deadline = time.monotonic() + timeout
        while True:
            queues = [queue] if queue is not None else await self.index.queues()
            starts = {q: start_of(q, cursor) for q in queues}
            events, held = await self._read(starts, limit, cursor)
            if held:  # stored already: read again once their millisecond is over
                await asyncio.sleep(HELD_BACK_RETRY)
                events, held = await self._read(starts, limit, cursor)
                if held and not events:
                    continue
            left = deadline - time.monotonic()
            if events or left <= 0:
                return events
            if self.runner.topology.cluster or not starts:
                await asyncio.sleep(min(CLUSTER_POLL, left))
            else:
                await self._block(starts, min(left, MAX_BLOCK))

    async def now(self, queue: str | None, ago: float = 0.0) -> str:
        """After the newest entry of the queue's stream, all of it: a new entry's
        id is above every id the stream ever had, trimmed or not. For every
        queue, before Redis's current millisecond: another stream's next entry
        may share the newest entry's millisecond, but none is written below the
        clock (entries of this millisecond, written just before, come after).
        ``ago`` seconds back: before that millisecond, as stream ids are times."""
        if queue is not None:
            check_name("queue", queue)
        if queue is None or ago:
            seconds, micros = await self.runner.command("TIME", repeatable=True)
            ms = int(seconds) * 1000 + int(micros) // 1000 - int(ago * 1000)
            # No entry has the part MAX_PART: the queue named orders nothing.
            return f"{max(ms, 1) - 1}-{MAX_PART}.{MAX_PART}@{queue or 'default'}"
        newest = await self.runner.command(
            "XREVRANGE", self.stream(queue), "+", "-", "COUNT", 1, repeatable=True
        )
        entry = newest[0][0].decode() if newest else "0-0"
        return f"{entry}.{MAX_PART}@{queue}"

    async def _read(
        self, starts: dict[str, str], limit: int, cursor: Cursor | None
    ) -> tuple[list[Event], bool]:
        """Events that can be delivered now, in order, and whether some were held back."""
        if not starts:
            return [], False
        calls = [Call.command("TIME")]
        if self.runner.topology.cluster:
            calls += [Call.command("XREAD", "COUNT", limit, "STREAMS", self.stream(q), s)
                      for q, s in starts.items()]  # fmt: skip
        else:
            streams = [self.stream(q) for q in starts]
            calls.append(Call.command("XREAD", "COUNT", limit, "STREAMS", *streams,
                                      *starts.values()))  # fmt: skip
        now, *replies = await self.runner.pipeline(calls, repeatable=True)
        now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
        found: dict[str, list[Any]] = {}
        for reply in replies:
            for key, entries in reply or ():
                found[_queue_of(key)] = entries
        return _merge(found, limit, now_ms, cursor)

    async def _block(self, starts: dict[str, str], timeout: float) -> None:
        """Until an entry comes to one of the streams, or ``timeout`` seconds."""
        streams: dict[Any, Any] = {self.stream(q): s for q, s in starts.items()}
        try:
            await self.runner.client.xread(streams, count=1, block=max(1, int(timeout * 1000)))
        except RedisError as exc:
            raise unavailable(exc, self.runner.url) from exc

    def trim_due(self) -> bool:
        """Whether this sweeper's retention pass is due (once per TRIM_INTERVAL)."""
        now = time.monotonic()
        if now - self._last_trim < TRIM_INTERVAL:
            return False
        self._last_trim = now
        return True

    async def trim(self, queues: list[str], policies: dict[str, QueuePolicy]) -> None:
        """Retention by age (MINID, exact: once a minute); by count, every
        append trims (MAXLEN ~: whole nodes, cheap)."""
        if not queues:
            return
        [(seconds, micros)] = await self.runner.pipeline([Call.command("TIME")])
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        calls = []
        for q in queues:
            oldest = now_ms - int(policies.get(q, QueuePolicy()).events_max_age * 1000)
            calls.append(Call.command("XTRIM", self.stream(q), "MINID", max(oldest, 0)))
        await self.runner.pipeline(calls)


def _queue_of(key: bytes | str) -> str:
    text = key.decode() if isinstance(key, bytes) else key
    return text[text.index("{") + 1 : text.rindex("}")]


def _merge(
    found: dict[str, list[Any]], limit: int, now_ms: int, cursor: Cursor | None
) -> tuple[list[Event], bool]:
    """Merge the streams' entries in (ms, n, queue, k) order, up to the first one
    not final: of the current millisecond, or past the end of a stream cut at
    limit. What the cursor says was delivered is skipped."""
    rows: list[tuple[StreamId, str, dict[bytes, bytes]]] = []
    cap: StreamId | None = None
    for queue, entries in found.items():
        for raw_id, fields in entries:
            ms, n = (int(x) for x in raw_id.split(b"-"))
            rows.append(((ms, n), queue, fields))
        if len(entries) >= limit:  # more may follow this stream's last entry
            last = rows[-1][0]
            cap = last if cap is None else min(cap, last)
    rows.sort(key=lambda r: (r[0], r[1]))
    events: list[Event] = []
    for sid, queue, fields in rows:
        if sid[0] >= now_ms:
            return events, True
        if cap is not None and sid > cap:
            break
        skip = cursor[2] if cursor is not None and (sid, queue) == cursor[:2] else -1
        data = orjson.loads(fields[b"d"]) if b"d" in fields else None
        kind, at = fields[b"k"].decode(), sid[0] / 1000
        for k, job_id in enumerate(orjson.loads(fields[b"j"])):
            if k <= skip:
                continue
            id_ = f"{sid[0]}-{sid[1]}.{k}@{queue}"
            events.append(Event(id_, kind, job_id, queue, at, (data[k] if data else None) or {}))
            if len(events) == limit:
                return events, False
    return events, False
