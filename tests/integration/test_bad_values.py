"""Bad values met by a running worker and by the command line: a result JSON
cannot carry fails its attempt with a clear error (it is never stored as
null); every bad input to a command is one ``error:`` line; a time stored out
of any date's range still renders."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tenure import App, DeadReason, State, WorkerConfig
from tenure.cli import cli
from tenure.worker import Supervisor

MODULE = """
import datetime, tenure

app = tenure.App({url!r})

@app.task(max_attempts=1)
def nan_result() -> object:
    return {{"ratio": float("nan")}}

@app.task(max_attempts=1)
def datetime_result() -> object:
    return datetime.datetime(2026, 1, 1)

@app.task(max_attempts=1)
def infinite_progress() -> str:
    tenure.current_job().progress({{"done": float("inf")}})
    return "reported"

@app.task(max_attempts=1)
def surrogate_error() -> None:
    raise ValueError("no file " + b"caf\\xe9".decode("utf-8", "surrogateescape") + "\\x00")

@app.task(max_attempts=2)
def retry_in_a_million_years() -> None:
    raise tenure.Retry(in_=1e12 * 31.6)
"""


@pytest.fixture
def values_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    url = f"sqlite:///{tmp_path / 'values.db'}"
    name = f"values_app_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE.format(url=url)))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    module.app.queue().set_policy(backoff_base=0.01, backoff_jitter=0)
    yield module.app
    module.app.close()
    sys.modules.pop(name, None)


def work(app: App, pool: str) -> None:
    config = WorkerConfig(burst=True, idle_poll_max=0.05, concurrency=1, pool=pool)  # type: ignore[arg-type]
    asyncio.run(Supervisor(app, config).run())


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_result_json_cannot_carry__fails_the_attempt_and_is_never_stored(
    values_app: App, pool: str
) -> None:
    nan = values_app.enqueue("nan_result", {})
    when = values_app.enqueue("datetime_result", {})
    work(values_app, pool)
    for job_id, why in [(nan.id, "nan at ['ratio'] is not a JSON number"),
                        (when.id, "a datetime.datetime is not JSON")]:  # fmt: skip
        dead = values_app.get_job(job_id)
        assert (dead.state, dead.dead_reason) == (State.DEAD, DeadReason.MAX_ATTEMPTS)
        assert dead.result is None
        assert dead.error is not None and "bad result" in dead.error and why in dead.error


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_progress_json_cannot_carry__is_refused_to_the_handler(values_app: App, pool: str) -> None:
    job = values_app.enqueue("infinite_progress", {})
    work(values_app, pool)
    dead = values_app.get_job(job.id)
    assert (dead.state, dead.progress, dead.result) == (State.DEAD, None, None)
    assert dead.error is not None and "progress must be JSON: inf at ['done']" in dead.error


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_an_error_whose_message_holds_a_lone_surrogate_or_nul__is_recorded_escaped(
    values_app: App, pool: str
) -> None:
    job = values_app.enqueue("surrogate_error", {})
    work(values_app, pool)
    dead = values_app.get_job(job.id)
    assert (dead.state, dead.dead_reason) == (State.DEAD, DeadReason.MAX_ATTEMPTS)
    assert dead.error is not None and "ValueError: no file caf\\udce9\\x00" in dead.error
    assert [a.outcome for a in dead.history] == ["error"]


def test_a_retry_a_million_years_away__is_an_error_not_a_date_nobody_can_show(
    values_app: App,
) -> None:
    job = values_app.enqueue("retry_in_a_million_years", {})
    work(values_app, "thread")
    failed = values_app.get_job(job.id)
    assert failed.attempts >= 1 and failed.state != State.COMPLETED
    assert failed.error is not None and "Retry(in_=...) must be a number of seconds" in failed.error
    assert failed.run_at < time.time() + 3600  # retried by the queue's backoff


# -- the command line ----------------------------------------------------------


@pytest.fixture
def url(tmp_path: Path) -> str:
    with App(f"sqlite:///{tmp_path / 'cli.db'}") as app:
        app.enqueue("t", {})
    return f"sqlite:///{tmp_path / 'cli.db'}"


BAD_COMMANDS: dict[str, list[str]] = {
    "job id with a lone surrogate": ["job", "01a2\udcff"],
    "job id with a NUL": ["job", "01a2\x00"],
    "cancel of a lone surrogate": ["cancel", "\udcff"],
    "workflow id with a lone surrogate": ["workflow", "wf-\udcff"],
    "dlq show of a lone surrogate": ["dlq", "show", "\udcff"],
    "dlq retry of a lone surrogate": ["dlq", "retry", "\udcff"],
    "cursor of 5,000 digits": ["jobs", "--after", "9" * 5000],
    "cursor of 30 digits": ["jobs", "--after", "9" * 30],
    "cursor of superscripts": ["dlq", "list", "--after", "²"],
    "key with a lone surrogate": ["enqueue", "t", "--key", "k\udcff"],
    "delay of 1e12 s": ["enqueue", "t", "--delay", "1e12"],
    "infinite delay": ["enqueue", "t", "--delay", "inf"],
    "max attempts 2**31": ["enqueue", "t", "--max-attempts", str(2**31)],
    "max attempts 2**63": ["enqueue", "t", "--max-attempts", str(2**63)],
    "priority 2**100": ["enqueue", "t", "--priority", str(2**100)],
    "timeout 1e308": ["enqueue", "t", "--timeout", "1e308"],
    "lease of 1e-9 s": ["policy", "set", "lease_ttl=1e-9", "heartbeat_interval=1e-10"],
    "lease of 1e308 s": ["policy", "set", "lease_ttl=1e308"],
    "jitter true": ["policy", "set", "backoff_jitter=true"],
    "max attempts 2**64": ["policy", "set", f"max_attempts={2**64}"],
}


@pytest.mark.parametrize("args", list(BAD_COMMANDS.values()), ids=list(BAD_COMMANDS))
def test_bad_input_to_a_command__is_one_error_line_and_changes_nothing(
    url: str, args: list[str]
) -> None:
    before = CliRunner().invoke(cli, ["--url", url, "jobs", "--json"]).stdout
    policy = CliRunner().invoke(cli, ["--url", url, "policy", "get", "--json"]).stdout
    result = CliRunner().invoke(cli, ["--url", url, *args])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and "unexpected" not in line, line
    assert CliRunner().invoke(cli, ["--url", url, "jobs", "--json"]).stdout == before
    assert CliRunner().invoke(cli, ["--url", url, "policy", "get", "--json"]).stdout == policy


def test_an_argument_of_invalid_utf8__is_one_error_line(url: str) -> None:
    tenure = Path(sys.executable).with_name("tenure")
    done = subprocess.run([tenure, "--url", url, "job", b"01a2\xff"], capture_output=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith(b"error: invalid job id") and done.stderr.count(b"\n") == 1


def test_a_time_stored_out_of_any_dates_range__still_renders(url: str) -> None:
    """Stored before times were bounded: one such job must not break the
    listings for everyone."""
    with App(url) as app:
        far = app.enqueue("t", {}, delay=60)
        dead = app.enqueue("t", {})
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE jobs SET run_at = 1e18 WHERE id = ?", (far.id,))
        conn.execute("UPDATE jobs SET state = 'dead', dead_reason = 'error', run_at = 1e18,"
                     " finished_at = 1e18 WHERE id = ?", (dead.id,))  # fmt: skip
    conn.close()
    for args in (["jobs"], ["job", far.id], ["dlq", "list"], ["dlq", "show", dead.id]):
        result = CliRunner().invoke(cli, ["--url", url, *args])
        assert result.exit_code == 0, (args, result.stderr)
        assert "1e+18 (epoch s)" in result.stdout
