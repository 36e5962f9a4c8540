"""The README's `make demo` runs as a newcomer runs it, so it cannot rot: into a
new venv, with tenure alone installed, its output piped (to a file, to less)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What `make test` needs and the demo does not: each extra's and tool's package.
NOT_FOR_THE_DEMO = {"playwright", "mypy", "mkdocs", "psycopg", "redis", "starlette", "pytest"}


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=240, check=False)  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(300)  # a venv and a pip install first
def test_make_demo__installs_tenure_alone_and_loses_nothing_after_a_kill_9(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    done = make("demo", f"VENV={venv}", f"PYTHON={sys.executable}")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "completed 8 of 8; lost 0" in out
    assert "crashed, 2: completed" in out  # the killed attempts were recovered
    # Piped, no line is cut at 80 columns.
    assert re.search(r"^worker B's sweeper saw A's liveness lock free and put its \d+ jobs back "
                     r"in the queue [\d.]+ s after the kill$", out, re.MULTILINE), out  # fmt: skip
    [logs] = re.findall(r"^the workers' logs: (\S+), (\S+)$", out, re.MULTILINE)
    for log in map(Path, logs):
        assert "started on" in log.read_text(), log
    listed = subprocess.run([venv / "bin" / "python", "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "tenure" in installed
    assert not installed & NOT_FOR_THE_DEMO, installed & NOT_FOR_THE_DEMO
    # The demo's venv is not `make test`'s: that one still installs everything.
    assert make("--question", "install", f"VENV={venv}").returncode == 1
    planned = make("--dry-run", "test", f"VENV={venv}", "PYTHON=python3").stdout
    assert "pip install --quiet -e '.[all,dev,docs]'" in planned, planned


def test_the_readme_names_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
