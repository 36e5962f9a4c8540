"""The whole system under fire: real workers of both pools, thousands of
mixed jobs, one fault every few seconds (``nemesis.py``), judged by the
history checker (``history.py``). Green only when every must-be-zero row is 0.

A minute per backend runs with the suite (``TENURE_SOAK_QUICK_SECONDS``);
``make soak`` runs ``TENURE_SOAK_SECONDS`` (5 minutes) per backend and per
delivery mode, and the Redis ``appendfsync everysec`` run that measures what a
server crash may lose.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tenure.backends.factory import available_kinds
from tests.conftest import required_backends
from tests.fault import history
from tests.fault.soak import SoakConfig, SoakResult, soak
from tests.servers import ServerUnavailable

QUICK = float(os.environ.get("TENURE_SOAK_QUICK_SECONDS", "60"))
LONG = float(os.environ.get("TENURE_SOAK_SECONDS", "300"))
EVERYSEC_WINDOW = 2.0  # Redis: everysec may lose up to about two seconds of writes


def run(config: SoakConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> SoakResult:
    try:
        result = soak(config, tmp_path)
    except ServerUnavailable as exc:
        if config.backend in required_backends():
            pytest.fail(f"{config.backend} is required but: {exc}")
        pytest.skip(f"no {config.backend} server: {exc}")
    with capsys.disabled():
        print(f"\n{config.backend}, {config.delivery}, {config.seconds:g} s, "
              f"seed {config.seed}, records in {tmp_path}\n{result.table()}")  # fmt: skip
    return result


def assert_green(result: SoakResult) -> None:
    failed = result.report.violations()
    assert not failed, f"must-be-zero rows not zero:\n{result.table()}"


@pytest.mark.slow
@pytest.mark.timeout(QUICK + 600)
@pytest.mark.parametrize("backend", available_kinds())
def test_a_minute_under_fire__every_must_be_zero_row_is_zero(backend, tmp_path, capsys):
    result = run(SoakConfig(backend, QUICK), tmp_path, capsys)
    if backend != "sqlite":
        assert result.report.as_dict()["faults: kill-server"] >= 8
    assert_green(result)


@pytest.mark.soak
@pytest.mark.timeout(LONG + 900)
@pytest.mark.parametrize("delivery", ["at-least-once", "at-most-once"])
@pytest.mark.parametrize("backend", available_kinds())
def test_five_minutes_under_fire__every_must_be_zero_row_is_zero(
    backend, delivery, tmp_path, capsys
):
    result = run(SoakConfig(backend, LONG, delivery=delivery, interval=4.0), tmp_path, capsys)
    assert_green(result)


@pytest.mark.soak
@pytest.mark.timeout(LONG + 900)
def test_redis_everysec__loses_only_writes_of_the_last_seconds_before_a_crash(tmp_path, capsys):
    """With ``appendfsync everysec`` a server crash may lose what it acknowledged
    in the last second or so: measured, and nothing older may be lost."""
    config = SoakConfig("redis", LONG, appendfsync="everysec", interval=4.0)
    result = run(config, tmp_path, capsys)
    run_ = history.load(tmp_path)
    kills = [f.started for f in run_.faults if f.kind == "kill-server"]
    lost = {r.split(":")[0] for row in result.report.rows if row.name == history.LOST
            for r in row.examples}  # fmt: skip
    ages = []
    for r in run_.requests:
        if r.job_id in lost and r.acked_wall is not None:
            ages.append(min((k - r.acked_wall for k in kills if k >= r.acked_wall), default=1e9))
    with capsys.disabled():
        print(f"everysec: {len(ages)} acknowledged jobs lost; oldest acknowledged "
              f"{max(ages, default=0):.3f} s before a kill")  # fmt: skip
    assert max(ages, default=0.0) <= EVERYSEC_WINDOW, result.table()
