"""What a worker's log says of a job that fails and dies: one record per
attempt that ends other than ok (WARNING, with the handler's traceback), one
when the job is dead-lettered (ERROR, with its reason), and at DEBUG each
claim; each record carries the attempt's fields. A real `tenure worker`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from tenure import App, State

TASKS = """
import tenure
app = tenure.App({url!r})

@app.task
def fails(n: int) -> None:
    raise ValueError(f"boom {{n}}")
"""

FIELDS = ("job_id", "task", "queue", "attempt", "fence", "worker")


def burst(tmp_path: Path, module: str, *options: str) -> str:
    """A `tenure worker --burst` of ``module``'s app (a file in tmp_path): its stderr."""
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("TENURE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "tenure.cli", "worker", f"{module}:app", "--burst",
         "--pool", "thread", *options],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def run_worker(tmp_path: Path, *options: str) -> tuple[App, Any, str]:
    url = f"sqlite:///{tmp_path / 'logs.db'}"
    (tmp_path / "failing_tasks.py").write_text(textwrap.dedent(TASKS.format(url=url)))
    app = App(url)
    app.queue("default").set_policy(backoff_base=0.0, max_attempts=2)
    job = app.enqueue("fails", {"n": 7})
    return app, job, burst(tmp_path, "failing_tasks", *options)


def test_the_json_log_of_a_job_that_dies__parses_and_carries_each_attempts_fields(
    tmp_path: Path,
) -> None:
    app, job, stderr = run_worker(tmp_path, "--log-format", "json", "--log-level", "debug")
    with app:
        assert app.get_job(job.id).state is State.DEAD
        worker = app.get_job(job.id).history[0].worker
    records = [orjson.loads(line) for line in stderr.splitlines()]  # every line is JSON
    about = [r for r in records if r.get("job_id") == job.id]
    claims = [r for r in about if r["level"] == "DEBUG" and "claimed" in r["message"]]
    [failed] = [r for r in about if r["level"] == "WARNING"]
    [dead] = [r for r in about if r["level"] == "ERROR"]
    assert [r["attempt"] for r in claims] == [1, 2]
    for record in (*claims, failed, dead):
        assert set(FIELDS) <= set(record), record
        assert (record["task"], record["queue"], record["worker"]) == ("fails", "default", worker)
        assert record["time"] and record["logger"].startswith("tenure")
    assert (failed["attempt"], failed["fence"], failed["outcome"]) == (1, 1, "error")
    assert "ValueError: boom 7" in failed["traceback"] and "Traceback" in failed["traceback"]
    assert failed["retry_in"] == pytest.approx(0.0)
    assert (dead["attempt"], dead["fence"], dead["dead_reason"]) == (2, 2, "max_attempts")
    assert "ValueError: boom 7" in dead["message"]


def test_the_text_log_of_a_failed_attempt__shows_its_traceback_under_it(tmp_path: Path) -> None:
    app, job, stderr = run_worker(tmp_path)
    app.close()
    lines = stderr.splitlines()
    [at] = [i for i, line in enumerate(lines) if "WARNING" in line and job.id in line]
    assert "attempt 1 ended error: ValueError: boom 7; retrying in 0.0 s" in lines[at]
    assert lines[at + 1] == "    Traceback (most recent call last):"
    assert any("ERROR" in line and "dead-lettered after attempt 2" in line for line in lines)


def start_from(directory: Path, url: str) -> str:
    """The log of a `tenure worker --burst` started in ``directory`` on ``url``."""
    (directory / "rel_tasks.py").write_text(f"import tenure\napp = tenure.App({url!r})\n")
    env = {**os.environ, "PYTHONPATH": str(directory)}
    env.pop("TENURE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "tenure.cli", "worker", "rel_tasks:app", "--burst",
         "--pool", "thread"],
        env=env, cwd=directory, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_worker_on_a_relative_sqlite_url__logs_the_absolute_path_and_warns(
    tmp_path: Path,
) -> None:
    here = tmp_path / "started here"
    (here / "data").mkdir(parents=True)
    stderr = start_from(here, "sqlite:///data/jobs.db?durable=1")
    path = here / "data" / "jobs.db"
    assert path.exists()
    [started] = [line for line in stderr.splitlines() if " started on " in line]
    assert f"started on sqlite:///data/jobs.db?durable=1 ({path})" in started
    [warning] = [line for line in stderr.splitlines() if "WARNING" in line]
    assert "sqlite:///data/jobs.db?durable=1 is a relative path" in warning
    assert f"resolved against the directory this worker started in: {path};" in warning
    assert warning.endswith(f"sqlite:///{path}?durable=1")  # the absolute form: four slashes


def test_a_worker_on_an_absolute_sqlite_url__does_not_warn(tmp_path: Path) -> None:
    stderr = start_from(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}")
    [started] = [line for line in stderr.splitlines() if " started on " in line]
    assert f"started on sqlite:///{tmp_path / 'jobs.db'}, queues" in started
    assert "WARNING" not in stderr, stderr  # the worker has exited: its log is complete


VANISHING = """
import sqlite3
import tenure
app = tenure.App({url!r})

@app.task
def vanishes() -> None:  # as a job does that was lost with a failed-over primary
    with sqlite3.connect({path!r}) as db:
        db.execute("DELETE FROM jobs WHERE id = ?", (tenure.current_job().id,))
    raise ValueError("settled by a fail, which finds no job")
"""


def test_a_job_gone_from_storage_while_it_ran__is_said_in_one_line_without_a_traceback(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gone.db"
    url = f"sqlite:///{path}"
    (tmp_path / "vanishing_tasks.py").write_text(VANISHING.format(url=url, path=str(path)))
    with App(url) as app:
        job = app.enqueue("vanishes")
    stderr = burst(tmp_path, "vanishing_tasks")
    about = [line for line in stderr.splitlines() if job.id in line]
    assert any("WARNING" in line and "no longer in storage" in line for line in about), stderr
    assert "Traceback" not in stderr
