"""Periodic schedules: cron parsing, tick maths, missed ticks, and declaration errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import tenure
from tenure.core.schedules import Missed, Schedule, tick_of
from tenure.errors import InvalidInput

NY = ZoneInfo("America/New_York")


def at(*fields: int, tz: Any = UTC, fold: int = 0) -> float:
    return datetime(*fields, tzinfo=tz, fold=fold).timestamp()


def cron(expr: str, tz: str | None = None, missed: str = "once") -> Schedule:
    return Schedule.create("s", "t", "default", {}, cron=expr, tz=tz, missed=missed)


def every(seconds: Any, missed: str = "once") -> Schedule:
    return Schedule.create("s", "t", "default", {}, every=seconds, missed=missed)


def ticks(schedule: Schedule, start: float, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = schedule.next_after(start)
        out.append(start)
    return out


# -- next-tick maths -------------------------------------------------------


def test_cron_ticks__fall_where_cron_runs() -> None:
    s = cron("*/5 * * * *")
    assert s.next_after(at(2026, 12, 1, 18, 43, 31)) == at(2026, 12, 1, 18, 45)
    assert s.next_after(at(2026, 12, 1, 18, 45)) == at(2026, 12, 1, 18, 50)  # strictly after
    assert s.last_at_or_before(at(2026, 12, 1, 18, 45)) == at(2026, 12, 1, 18, 45)
    assert s.last_at_or_before(at(2026, 12, 1, 18, 49, 59, 999_999)) == at(2026, 12, 1, 18, 45)
    assert s.describe() == "cron */5 * * * * (UTC)"


def test_a_cron_of_six_fields__counts_seconds_first() -> None:
    s = cron("*/20 * * * * *")
    assert ticks(s, at(2026, 1, 1, 0, 0, 1), 3) == [
        at(2026, 1, 1, 0, 0, 20), at(2026, 1, 1, 0, 0, 40), at(2026, 1, 1, 0, 1)
    ]  # fmt: skip


def test_a_cron_in_a_time_zone__ticks_at_its_wall_time() -> None:
    s = cron("0 9 * * MON-FRI", tz="America/New_York")
    # Friday 2026-12-04 10:00 in New York: next is Monday 09:00 EST (14:00 UTC)
    assert s.next_after(at(2026, 12, 4, 10, tz=NY)) == at(2026, 12, 7, 14)


def test_a_wall_time_skipped_by_daylight_saving__ticks_once_just_after() -> None:
    s = cron("30 2 * * *", tz="America/New_York")  # 2026-03-08: 02:00 -> 03:00
    assert ticks(s, at(2026, 3, 7, 12, tz=NY), 2) == [
        at(2026, 3, 8, 3, 0, tz=NY), at(2026, 3, 9, 2, 30, tz=NY)
    ]  # fmt: skip


def test_a_wall_time_that_comes_twice__ticks_once() -> None:
    s = cron("30 1 * * *", tz="America/New_York")  # 2026-11-01: 02:00 -> 01:00
    assert ticks(s, at(2026, 10, 31, 12, tz=NY), 2) == [
        at(2026, 11, 1, 5, 30), at(2026, 11, 2, 6, 30)
    ]  # fmt: skip


def test_an_hourly_step_through_the_repeated_hour__ticks_every_half_hour_of_real_time() -> None:
    s = cron("*/30 * * * *", tz="America/New_York")
    start = at(2026, 11, 1, 4, 50)  # 00:50 EDT
    assert [t - start for t in ticks(s, start, 5)] == [600, 2400, 4200, 6000, 7800]
    inside = at(2026, 11, 1, 1, 40, tz=NY, fold=1)  # 01:40 EST, the second 01:40
    assert s.last_at_or_before(inside) == at(2026, 11, 1, 6, 30)


def test_interval_ticks__are_multiples_of_it_since_the_epoch() -> None:
    s = every(timedelta(minutes=15))
    assert s.next_after(at(2026, 12, 1, 18, 44)) == at(2026, 12, 1, 18, 45)
    assert s.last_at_or_before(at(2026, 12, 1, 18, 45)) == at(2026, 12, 1, 18, 45)
    half = every(1.5)
    assert half.next_after(3.0) == 4.5
    assert half.last_at_or_before(4.4) == 3.0
    assert every(90).describe() == "every 0:01:30"


# -- missed ticks ----------------------------------------------------------


def test_a_worker_starting_after_downtime__owes_the_latest_missed_tick_once() -> None:
    s = every(60)
    assert s.owed_at_start(last=600.0, now=1000.0) == 960.0
    assert s.owed_at_start(last=960.0, now=1000.0) is None  # nothing missed
    assert s.owed_at_start(last=None, now=1000.0) is None  # never ticked: no back-fill


def test_a_schedule_that_skips_missed_ticks__owes_none() -> None:
    s = every(60, missed="skip")
    assert s.missed is Missed.SKIP
    assert s.owed_at_start(last=600.0, now=1000.0) is None


# -- the tick's key --------------------------------------------------------


def test_a_ticks_key__names_the_schedule_and_the_tick() -> None:
    s = Schedule.create("nightly", "report", "default", {}, cron="0 0 * * *")
    assert s.key(at(2026, 12, 1)) == "nightly@2026-12-01T00:00:00+00:00"
    assert tick_of(s.key(at(2026, 12, 1))) == at(2026, 12, 1)
    assert tick_of(every(1.5).key(4.5)) == 4.5
    assert [tick_of(k) for k in (None, "", "order-17", "a@b", "a@2026-12-01T00:00:00")] == [
        None, None, None, None, None
    ]  # fmt: skip


# -- declaration -----------------------------------------------------------


@pytest.fixture
def app(tmp_path: Path) -> tenure.App:
    return tenure.App(f"sqlite:///{tmp_path / 'never-opened.db'}")  # declarations only


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression '61 \\* \\* \\* \\*': Bad minute"),
        ({"cron": "* * *"}, "expected 5 fields"),
        ({"cron": "@daily"}, "expected 5 fields"),
        ({"cron": 5}, "cron must be a string"),
        ({"cron": "0 0 31 2 *"}, "Bad day-of-month"),
        ({}, "give either cron="),
        ({"cron": "* * * * *", "every": 60}, "not both"),
        ({"every": 0}, "every must be at least 1 second"),
        ({"every": timedelta(seconds=-5)}, "every must be at least 1 second"),
        ({"every": float("nan")}, "every must be at least 1 second"),
        ({"every": "5m"}, "every must be a timedelta or a number of seconds"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus_Mons"}, "unknown time zone"),
        ({"cron": "* * * * *", "tz": "../../etc/passwd"}, "unknown time zone"),
        ({"every": 60, "tz": "Europe/Paris"}, "tz applies to cron schedules only"),
        ({"every": 60, "missed": "twice"}, "missed must be 'once' or 'skip'"),
        ({"every": 60, "args": [object()]}, "must be JSON"),
        ({"every": 60, "kwargs": {"n": float("nan")}}, "not a JSON number"),
        ({"every": 60, "kwargs": {"nope": 1}}, "arguments do not fit task 'beat'"),
        ({"every": 60, "args": "ab"}, "args must be a list or tuple"),
        ({"every": 60, "name": "bad name"}, "invalid schedule name"),
    ],
)
def test_a_bad_schedule__is_refused_at_declaration(
    app: tenure.App, options: dict[str, Any], message: str
) -> None:

    def beat(n: int = 0) -> None: ...

    task = app.task(beat)
    with pytest.raises(InvalidInput, match=message):
        app.periodic(**options)(task)
    assert app.schedules == {}


def test_periodic_below_task__is_refused(app: tenure.App) -> None:
    with pytest.raises(InvalidInput, match=r"goes above @app.task"):

        @app.task
        @app.periodic(every=60)  # type: ignore[arg-type]
        def beat() -> None: ...


def test_a_second_schedule_of_a_task__needs_its_own_name(app: tenure.App) -> None:

    @app.periodic(cron="0 * * * *", kwargs={"n": 2}, name="beat-hourly")
    @app.periodic(every=timedelta(minutes=1), args=[1], missed="skip")
    @app.task(queue="clock")
    def beat(n: int) -> int:
        return n

    assert beat(3) == 3  # still the task
    assert {n: (s.queue, dict(s.args), s.missed) for n, s in app.schedules.items()} == {
        "beat": ("clock", {"n": 1}, Missed.SKIP),
        "beat-hourly": ("clock", {"n": 2}, Missed.ONCE),
    }
    with pytest.raises(InvalidInput, match="already declared"):
        app.periodic(every=60)(beat)
