"""The fleet's sweep guard on Redis, in one command per attempt.

The guard, ``<prefix>:{@}:sweep-guard``, holds the time of the last sweep by
Redis's clock, and lives as long as the interval of the process that swept.
A sweeper asks ``SET guard <now> NX PX <its interval> GET``, one command:
absent (nobody swept within their interval), it is set, and this process
sweeps; present, its value says when the last sweep was, so a process whose
interval is longer than the last sweeper's waits out its own (``retry_in``),
and one whose interval has passed since sets it in its turn (``SET … XX
GET``) and sweeps unless the value it replaced is not the one it judged
(another got there first). A forced sweep (``min_interval`` 0) marks the time
for MARK_MS, so that it counts for the others too.

``<now>`` is Redis's clock as this process estimates it (:class:`ServerClock`:
the last ``TIME`` it read, carried forward by its monotonic clock), so that an
attempt needs no script nor ``TIME`` of its own; the guard only spaces sweeps,
while what a sweep recovers is judged by ``TIME`` in its scripts.
"""

from __future__ import annotations

import time
from typing import Any

from tenure.backends.redis.keys import Keys
from tenure.backends.redis.scripts import Runner

MARK_MS = 3_600_000  # how long a forced sweep's mark lives: longer than any interval


class ServerClock:
    """Redis's clock as this process estimates it, from the last reading."""

    def __init__(self) -> None:
        self._offset: float | None = None  # Redis's clock - our monotonic clock

    def read(self, server_now: float) -> None:
        self._offset = server_now - time.monotonic()

    async def now(self, runner: Runner) -> float:
        if self._offset is None:
            seconds, micros = await runner.command("TIME", repeatable=True)
            self.read(int(seconds) + int(micros) / 1e6)
        assert self._offset is not None
        return time.monotonic() + self._offset


class Guard:
    """Whether this process sweeps now (see the module docstring)."""

    def __init__(self, runner: Runner, keys: Keys) -> None:
        self.runner = runner
        self.key = keys.sweep_guard
        self.clock = ServerClock()

    async def enter(self, min_interval: float) -> float | None:
        """None: sweep now (the guard is set); else the seconds until a sweep is
        allowed. ``min_interval`` 0: a forced sweep, which marks the time."""
        now = await self.clock.now(self.runner)
        mark = repr(now)
        if min_interval <= 0:
            await self.runner.command("SET", self.key, mark, "PX", MARK_MS)
            return None
        ms = max(1, round(min_interval * 1000))
        last = await self.runner.command("SET", self.key, mark, "NX", "PX", ms, "GET")
        if last is None:
            return None
        left = _time(last) + min_interval - now
        if left > 0:
            return left
        # A forced sweep's long mark, and our interval has passed since: ours
        # unless another replaced it first.
        replaced = await self.runner.command("SET", self.key, mark, "XX", "PX", ms, "GET")
        return None if replaced in (None, last) else min_interval


def _time(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0  # not ours (an older tenure's mark): taken as long ago
