"""Hooks in a real `tenure worker`, on both pools: around every attempt (in the
process and thread that run the handler), on dead-letter, at the worker's start
and stop; a hook that raises is logged and changes nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tenure import App, State

TASKS = """
import contextlib, os, tenure

app = tenure.App({url!r})
NOTES = {notes!r}

def note(line: str) -> None:
    with open(NOTES, "a") as f:
        f.write(line + "\\n")

@app.hooks.around_attempt
@contextlib.contextmanager
def around(job):
    note(f"before {{job.task}} {{job.attempt}} pid={{os.getpid()}}")
    try:
        yield
    except Exception as exc:
        note(f"after {{job.task}} raised {{type(exc).__name__}}")
        raise
    else:
        note(f"after {{job.task}} ok")

@app.hooks.around_attempt
def breaks_before(job):
    raise RuntimeError("a hook that breaks before")

@app.hooks.around_attempt
@contextlib.contextmanager
def breaks_after(job):
    yield
    raise RuntimeError("a hook that breaks after")

@app.hooks.on_dead
def dead(job):
    note(f"dead {{job.task}} {{job.state}} {{job.dead_reason}}")

@app.hooks.on_worker_start
def start(worker_id):
    note(f"start pid={{os.getpid()}}")

@app.hooks.on_worker_stop
def stop(worker_id):
    note("stop")

@app.task
def works() -> int:
    return 1

@app.task
async def works_async() -> int:
    return 2

@app.task
def fails() -> None:
    raise ValueError("no")
"""


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_hooks_wrap_attempts_see_deaths_and_a_broken_hook_changes_nothing(
    tmp_path: Path, pool: str
) -> None:
    url = f"sqlite:///{tmp_path / 'hooks.db'}"
    notes = tmp_path / "notes.txt"
    (tmp_path / "hooked_tasks.py").write_text(
        textwrap.dedent(TASKS.format(url=url, notes=str(notes)))
    )
    with App(url) as app:
        app.queue("default").set_policy(max_attempts=1)
        jobs = [app.enqueue(name, {}) for name in ("works", "works_async", "fails")]
        env = {
            **os.environ,
            "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        env.pop("TENURE_URL", None)
        done = subprocess.run(
            [sys.executable, "-m", "tenure.cli", "worker", "hooked_tasks:app", "--burst",
             "--pool", pool, "--concurrency", "1"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        states = [app.get_job(j.id).state for j in jobs]
    assert states == [State.COMPLETED, State.COMPLETED, State.DEAD]
    lines = notes.read_text().splitlines()
    assert lines[0].startswith("start") and lines[-1] == "stop"
    supervisor = lines[0].rsplit("pid=", 1)[1]
    wrapped = [line.rsplit(" pid=", 1)[0] for line in lines if not line.startswith("dead")]
    assert wrapped[1:-1] == [
        "before works 1", "after works ok",
        "before works_async 1", "after works_async ok",
        "before fails 1", "after fails raised ValueError",
    ]  # fmt: skip
    pids = {line.rsplit("pid=", 1)[1] for line in lines[1:] if "pid=" in line}
    # around the handler, where it runs: an executor process, or the worker's own
    assert pids == {supervisor} if pool == "thread" else supervisor not in pids
    assert "dead fails dead max_attempts" in lines
    assert done.stderr.count("RuntimeError: a hook that breaks before") == 3
    # after the handler that raised, breaks_after's generator gets the error at
    # its yield and lets it through: it never reaches its own raise
    assert done.stderr.count("RuntimeError: a hook that breaks after") == 2
