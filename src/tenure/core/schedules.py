"""Periodic jobs' schedules: when a schedule ticks, and which tick a worker owes.

Pure logic, no I/O. Every worker computes the same ticks on its own: a cron
expression's fall where cron would run it in the schedule's time zone (parsed
and stepped by cronsim, which handles daylight saving time as Debian's cron
does: a wall time skipped by a jump forward runs once just after it, a wall
time that comes twice runs once); an interval's fall on whole multiples of it
since the Unix epoch. Storage then makes one job per tick, however many
workers tick (``Backend.enqueue_tick``); the tick's job carries its tick in its
key (:meth:`Schedule.key`, read back by :func:`tick_of`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from typing import Any

from tenure.core.names import check_name, shown
from tenure.core.values import MAX_SECONDS
from tenure.errors import InvalidInput

MIN_EVERY = 1.0  # seconds: cron's own finest step; each tick costs a round trip per worker
US = 1_000_000


class Missed(StrEnum):
    """What a worker starting up does about ticks that fell while no worker ran."""

    ONCE = "once"  # one job, for the most recent of them
    SKIP = "skip"  # none: the schedule goes on at its next tick


@dataclass(frozen=True)
class Schedule:
    """One periodic job: its task's jobs, made at each tick, with fixed arguments.

    ``name`` is unique among an App's schedules (the task's name unless given);
    with its queue it names the schedule's last tick in storage.
    """

    name: str
    task: str
    queue: str
    args: Mapping[str, Any]
    cron: str | None = None
    every: float | None = None  # seconds
    tz: str = "UTC"
    missed: Missed = Missed.ONCE
    _zone: tzinfo = field(default=UTC, repr=False, compare=False)
    _every_us: int = field(default=0, repr=False, compare=False)

    @classmethod
    def create(
        cls,
        name: str,
        task: str,
        queue: str,
        args: Mapping[str, Any],
        *,
        cron: object = None,
        every: object = None,
        tz: object = None,
        missed: object = "once",
    ) -> Schedule:
        """A validated schedule; InvalidInput saying what is wrong otherwise."""
        check_name("schedule", name)
        if (cron is None) == (every is None):
            raise InvalidInput(
                f"schedule {name!r}: give either cron='*/5 * * * *' or every=timedelta(...), "
                f"{'not both' if cron is not None else 'one of them'}"
            )
        if missed not in ("once", "skip"):
            raise InvalidInput(
                f"schedule {name!r}: missed must be 'once' or 'skip', got {shown(missed)}"
            )
        miss = Missed(missed)
        if every is not None:
            if tz is not None:
                raise InvalidInput(
                    f"schedule {name!r}: tz applies to cron schedules only (an interval's "
                    "ticks are the same instants in every time zone)"
                )
            every_us = _every_us(name, every)
            return cls(name, task, queue, dict(args), None, every_us / US, "UTC", miss,
                       UTC, every_us)  # fmt: skip
        zone_name = "UTC" if tz is None else tz
        schedule = cls(name, task, queue, dict(args), _cron(name, cron), None, str(zone_name),
                       miss, _zone(name, zone_name))  # fmt: skip
        schedule.next_after(datetime.now(UTC).timestamp())  # one that never ticks fails now
        return schedule

    # -- ticks -------------------------------------------------------------

    def next_after(self, t: float) -> float:
        """The first tick strictly after ``t`` (seconds since the epoch)."""
        if self._every_us:
            return (math.floor(t * US) // self._every_us + 1) * self._every_us / US
        for tick in self._cron_ticks(t, reverse=False):
            if tick > t:
                return tick
        raise AssertionError("unreachable: a cron iteration ends only by raising")

    def last_at_or_before(self, t: float) -> float:
        """The latest tick at or before ``t``."""
        if self._every_us:
            return (math.floor(t * US) // self._every_us) * self._every_us / US
        # cronsim, reversed from a whole second, starts one second before it
        for tick in self._cron_ticks(math.floor(t) + 1, reverse=True):
            if tick <= t:
                return tick
        raise AssertionError("unreachable: a cron iteration ends only by raising")

    def owed_at_start(self, last: float | None, now: float) -> float | None:
        """The tick a worker starting at ``now`` enqueues for the ticks missed
        since ``last`` (the last tick storage holds a job of), if any: the most
        recent one, once, unless the schedule skips them. A schedule never
        ticked (``last`` None) starts at its next tick: nothing is back-filled."""
        if last is None or self.missed is Missed.SKIP:
            return None
        due = self.last_at_or_before(now)
        return due if due > last else None

    def key(self, tick: float) -> str:
        """The idempotency key of the tick's job: ``<name>@<tick, ISO 8601 UTC>``."""
        return f"{self.name}@{_iso(tick)}"

    def describe(self) -> str:
        """The schedule in a few words: ``cron */5 * * * * (UTC)`` or ``every 0:00:30``."""
        if self.cron is not None:
            return f"cron {self.cron} ({self.tz})"
        return f"every {timedelta(microseconds=self._every_us)}"

    def _cron_ticks(self, t: float, *, reverse: bool) -> Iterator[float]:
        """Ticks from ``t`` on (or back): a few at most are read, the first one
        past ``t`` (a wall time that comes twice may yield an earlier instant)."""
        from cronsim import CronSim, CronSimError  # an App without cron schedules never needs it

        assert self.cron is not None
        start = datetime.fromtimestamp(t, self._zone)
        try:
            for when in itertools.islice(CronSim(self.cron, start, reverse=reverse), 100):
                yield when.timestamp()
        except (CronSimError, ValueError, OverflowError) as exc:
            raise InvalidInput(f"schedule {self.name!r}: cron {self.cron!r}: {exc}") from None
        raise InvalidInput(f"schedule {self.name!r}: cron {self.cron!r}: no tick found")


def tick_of(key: str | None) -> float | None:
    """The tick a periodic job was enqueued for, from its key (None for other jobs)."""
    if not key or "@" not in key:
        return None
    name, _, iso = key.rpartition("@")
    try:
        check_name("schedule", name)
        when = datetime.fromisoformat(iso)
    except (InvalidInput, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return round(when.timestamp(), 6)


def _iso(tick: float) -> str:
    when = datetime.fromtimestamp(tick, UTC)
    return when.isoformat(timespec="microseconds" if when.microsecond else "seconds")


def _every_us(name: str, every: object) -> int:
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, int | float) and not isinstance(every, bool):
        seconds = float(every)
    else:
        raise InvalidInput(
            f"schedule {name!r}: every must be a timedelta or a number of seconds, "
            f"got {shown(every)}"
        )
    if not math.isfinite(seconds) or not MIN_EVERY <= seconds <= MAX_SECONDS:
        raise InvalidInput(
            f"schedule {name!r}: every must be at least {MIN_EVERY:g} second and at most "
            f"ten years, got {shown(every)}"
        )
    return round(seconds * US)


def _cron(name: str, cron: object) -> str:
    if not isinstance(cron, str):
        raise InvalidInput(f"schedule {name!r}: cron must be a string, got {shown(cron)}")
    from cronsim import CronSim, CronSimError

    text = " ".join(cron.split())
    fields = len(text.split())
    if fields not in (5, 6):
        raise InvalidInput(
            f"schedule {name!r}: invalid cron expression {shown(cron)}: expected 5 fields "
            "(minute hour day-of-month month day-of-week), or 6 with seconds first"
        )
    try:
        CronSim(text, datetime.now(UTC))
    except (CronSimError, ValueError) as exc:
        raise InvalidInput(
            f"schedule {name!r}: invalid cron expression {shown(cron)}: {exc}"
        ) from None
    return text


def _zone(name: str, tz: object) -> tzinfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(tz, str) or not tz:
        raise InvalidInput(f"schedule {name!r}: tz must be an IANA time zone name, got {shown(tz)}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(
            f"schedule {name!r}: unknown time zone {shown(tz)}: use an IANA name such as "
            "'Europe/Paris' or 'UTC'"
        ) from None
