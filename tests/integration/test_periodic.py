"""Periodic jobs: the ticker (one run at a time, on a clock the test moves) and
real workers ticking together."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.core.clock import FakeClock
from tenure.core.schedules import tick_of
from tenure.worker.ticker import Ticker
from tests.conformance.helpers import all_jobs, wait_for

START = 1_000_030.0  # 30 s past a minute's tick (1_000_020)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tenure.db'}"


@pytest.fixture
def backend(url: str, open_backend: Callable[[str], Any]) -> Any:
    return open_backend(url)


def declare(url: str, missed: str = "once") -> tenure.App:
    app = tenure.App(url)

    @app.periodic(every=60, kwargs={"to": "ops"}, missed=missed)
    @app.task(queue="clock")
    def report(to: str) -> None: ...

    return app


def ticker(app: tenure.App, backend: Any, clock: FakeClock) -> Any:
    """A ticker run synchronously: ``run_once()`` returns the seconds to its next tick."""
    t = Ticker(backend.inner, list(app.schedules.values()), app.tasks, clock)

    class Sync:
        inner = t

        def run_once(self) -> float:
            return backend._portal.run(t.run_once())  # type: ignore[no-any-return]

    return Sync()


def ticks_made(backend: Any) -> list[float]:
    return sorted(tick_of(j.key) or 0.0 for j in all_jobs(backend, queue="clock"))


def test_a_schedule_never_ticked__starts_at_its_next_tick(url: str, backend: Any) -> None:
    clock = FakeClock(START)
    t = ticker(declare(url), backend, clock)
    assert t.run_once() == 50.0  # nothing back-filled: it sleeps until 1_000_080
    assert ticks_made(backend) == []
    clock.advance(50.0)
    assert t.run_once() == 60.0
    [job] = all_jobs(backend, queue="clock")
    assert (tick_of(job.key), job.run_at, job.args, job.task) == (
        1_000_080.0, 1_000_080.0, {"to": "ops"}, "report"
    )  # fmt: skip


def test_a_ticker_woken_late__makes_one_job_for_the_latest_tick(url: str, backend: Any) -> None:
    clock = FakeClock(START)
    t = ticker(declare(url), backend, clock)
    t.run_once()
    clock.advance(50.0 + 150.0)  # frozen through 1_000_080, 1_000_140 and 1_000_200
    assert t.run_once() == 30.0
    assert ticks_made(backend) == [1_000_200.0]


def test_after_downtime_missed_once__a_starting_worker_makes_one_job(
    url: str, backend: Any
) -> None:
    clock = FakeClock(START)
    first = ticker(declare(url), backend, clock)
    first.run_once()
    clock.advance(50.0)
    first.run_once()  # 1_000_080, then no worker for almost ten minutes
    clock.advance(590.0)
    again = ticker(declare(url), backend, clock)
    assert again.run_once() == 10.0
    assert ticks_made(backend) == [1_000_080.0, 1_000_620.0]  # the latest missed tick, once
    clock.advance(10.0)
    again.run_once()
    assert ticks_made(backend)[-1] == 1_000_680.0


def test_after_downtime_missed_skip__a_starting_worker_makes_none(url: str, backend: Any) -> None:
    clock = FakeClock(START)
    first = ticker(declare(url, missed="skip"), backend, clock)
    first.run_once()
    clock.advance(50.0)
    first.run_once()
    clock.advance(590.0)
    again = ticker(declare(url, missed="skip"), backend, clock)
    assert again.run_once() == 10.0
    assert ticks_made(backend) == [1_000_080.0]
    clock.advance(10.0)
    again.run_once()
    assert ticks_made(backend) == [1_000_080.0, 1_000_680.0]


def test_two_tickers_on_one_clock__make_one_job_per_tick(url: str, backend: Any) -> None:
    clock = FakeClock(START)
    both = [ticker(declare(url), backend, clock) for _ in range(2)]
    for _ in range(4):
        for t in both:
            t.run_once()
        clock.advance(60.0)
    assert ticks_made(backend) == [1_000_080.0, 1_000_140.0, 1_000_200.0]
    assert sum(t.inner.enqueued for t in both) == 3


# -- real workers ------------------------------------------------------------

WORKERS = 4
TICKS = 4  # ticks every worker was up for

TASKS = """
import os
from datetime import timedelta

import tenure

app = tenure.App(os.environ["TENURE_URL"])


@app.periodic(every=timedelta(seconds=1))
@app.task
def beat() -> float | None:
    return tenure.current_job().tick  # the tick this job was enqueued for
"""


def test_four_workers__make_one_job_per_tick_and_miss_none(tmp_path: Path, url: str) -> None:
    (tmp_path / "beats.py").write_text(textwrap.dedent(TASKS))
    env = {**os.environ, "TENURE_URL": url, "PYTHONPATH": str(tmp_path)}
    code = (
        "from tenure.worker import run_worker; from tenure import WorkerConfig;"
        "from beats import app;"
        "run_worker(app, WorkerConfig(idle_poll_max=0.05, pool='thread'))"
    )
    app = tenure.App(url)
    workers = [subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env)
               for _ in range(WORKERS)]  # fmt: skip
    try:
        wait_for(lambda: len(app.call(app.backend.workers())) == WORKERS, 20, 0.05)
        all_up = time.time()
        wait_for(lambda: sum(t > all_up for t in ticks(app)) >= TICKS, TICKS + 5, 0.1)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(timeout=20)
    made = ticks(app)
    assert len(made) == len(set(made)), "a tick made two jobs"
    assert made == [made[0] + n for n in range(len(made))], "a tick was missed"
    assert sum(t > all_up for t in made) >= TICKS
    done = [j for j in app.jobs(state="completed", limit=100).jobs]
    assert done and all(j.result == tick_of(j.key) for j in done)
    assert [w.returncode for w in workers] == [0] * WORKERS
    app.close()


def ticks(app: tenure.App) -> list[float]:
    return sorted(tick_of(j.key) or 0.0 for j in app.jobs(limit=1000).jobs)


# -- tenure periodic ---------------------------------------------------------

CLI_TASKS = """
import tenure

app = tenure.App({url!r})


@app.periodic(cron="0 6 * * MON", tz="Europe/Paris", kwargs={{"to": "ops"}})
@app.task(queue="reports")
def weekly(to: str) -> None: ...


@app.periodic(every=30, missed="skip", name="heartbeat")
@app.task
def ping() -> None: ...
"""


def test_tenure_periodic__lists_schedules_with_next_and_last_tick(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from tenure.cli import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TENURE_URL", raising=False)
    (tmp_path / "cli_tasks.py").write_text(CLI_TASKS.format(url=url))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cli_tasks", raising=False)
    app = declare(url)
    spec = app.tasks["report"].spec({"to": "ops"}, queue="reports")
    tick = 1_700_000_000.0
    job = app.call(app.backend.enqueue_tick("weekly", tick, spec))
    app.close()

    runner = CliRunner()
    listed = runner.invoke(cli, ["--app", "cli_tasks:app", "periodic", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["schedule"]: r for r in json.loads(listed.stdout)}
    assert rows["weekly"] | {"next_tick": None} == {
        "schedule": "weekly", "task": "weekly", "queue": "reports", "cron": "0 6 * * MON",
        "every": None, "tz": "Europe/Paris", "missed": "once", "next_tick": None,
        "last_tick": tick, "last_job": job.id,
    }  # fmt: skip
    assert rows["heartbeat"]["every"] == 30.0 and rows["heartbeat"]["last_tick"] is None
    assert rows["heartbeat"]["next_tick"] % 30 == 0 and rows["heartbeat"]["missed"] == "skip"

    shown = runner.invoke(cli, ["--app", "cli_tasks:app", "periodic"]).stdout
    assert "every 0:00:30" in shown and "cron 0 6 * * MON (Europe/Paris)" in shown
    assert job.id in shown

    bare = runner.invoke(cli, ["--url", url, "periodic"])
    assert bare.exit_code == 1
    assert bare.stderr.strip().startswith("error: tenure periodic lists the schedules an App")
