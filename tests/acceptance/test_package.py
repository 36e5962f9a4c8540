"""The package as a user gets it: built, checked, installed alone in a clean venv.

``python -m build`` makes the sdist, then the wheel from the sdist (so a file
the sdist forgets fails here), ``twine check`` reads their metadata as PyPI
would, and a new venv installs the wheel with its dependencies from the
configured index, nothing from this checkout. The installed tenure then runs
a job's first steps and its CLI, from a directory where the source is not.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

USE = """
import importlib.metadata, pathlib, tenure
assert pathlib.Path(tenure.__file__).is_relative_to(pathlib.Path(__import__("sys").prefix))
with tenure.App("sqlite:///jobs.db") as app:
    job = app.enqueue("send_email", {"to": "a@example.com"})
    print(importlib.metadata.version("tenure"), app.get_job(job.id).state.value)
"""


def run(*command: str | Path, cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-4000:])
    return done.stdout


@pytest.mark.slow
def test_the_wheel__installs_alone_in_a_clean_venv_and_runs(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--outdir", dist, ROOT, cwd=tmp_path)
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    assert (wheel.name, sdist.name) == (f"tenure-{VERSION}-py3-none-any.whl",
                                        f"tenure-{VERSION}.tar.gz")  # fmt: skip
    run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist, cwd=tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"tenure/py.typed", "tenure/backends/sqlite/queries.sql",
            "tenure/backends/redis/scripts/claim.lua"} <= names  # fmt: skip
    assert not any(n.startswith(("tests/", "docs/", "benchmarks/")) for n in names)
    metadata = zipfile.ZipFile(wheel).read(f"tenure-{VERSION}.dist-info/METADATA").decode()
    urls = {line.split(": ", 1)[1].split(",")[0] for line in metadata.splitlines()
            if line.startswith("Project-URL: ")}  # fmt: skip
    assert urls == {"Homepage", "Documentation", "Source", "Issues", "Changelog"}, metadata

    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    run(env / "bin" / "python", "-m", "pip", "install", "--quiet", wheel, cwd=tmp_path)
    home = tmp_path / "elsewhere"
    home.mkdir()
    assert run(env / "bin" / "python", "-c", USE, cwd=home).split() == [VERSION, "queued"]
    assert run(env / "bin" / "tenure", "--version", cwd=home).split()[-1] == VERSION
    assert "worker" in run(env / "bin" / "tenure", "--help", cwd=home)
    assert "queued" in run(env / "bin" / "tenure", "--url", "sqlite:///jobs.db", "status",
                           cwd=home)  # fmt: skip
