"""The install lines of the README and the docs run as written, in fresh
virtual environments, so that they cannot rot.

tenure is not on PyPI: its docs install it from a checkout (``./tenure``) or
from a wheel built from one. The lines are read from the docs, never copied
here: the README's "Install" section (a block from a checkout, a block for a
wheel) and the first block of "your first job", which creates the venv. The
checkout is a copy of this one's files (what a clone of it would hold, with
uncommitted work included), built offline from the configured index like any
install. Every other ``pip`` command the docs show must be one run here, or
name an extra that ``pyproject.toml`` declares.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
import venv
from pathlib import Path

import pytest

from tests.acceptance.test_docs_samples import blocks
from tests.acceptance.test_readme import section_blocks

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIP = re.compile(r"^pip (?:install|wheel)\b.*$")


def commands(code: str) -> list[str]:
    """A shell block's commands, without their comments and padding."""
    return [" ".join(line.split("  #", 1)[0].split()) for line in code.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]  # fmt: skip


def install_blocks() -> tuple[list[str], list[str]]:
    """The commands that install from a checkout (the first-job page's venv,
    then the README's lines) and those that build and install a wheel."""
    readme = [code for lang, code in section_blocks("## Install") if lang == "sh"]
    assert len(readme) == 2, "the README's Install: a block from a checkout, one for a wheel"
    checkout, wheel = map(commands, readme)
    first_job = [b.code for b in blocks((ROOT / "docs/howto/first-job.md").read_text())]
    venv_block = commands(first_job[0])
    assert venv_block[0].startswith("python3 -m venv .venv"), venv_block
    return venv_block + [c for c in checkout if c not in venv_block], wheel


def copy_checkout(to: Path) -> None:
    """What a clone of this repository holds, uncommitted work included."""
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)


def script(lines: list[str], cwd: Path) -> subprocess.Popen[str]:
    bash = ["bash", "-e", "-o", "pipefail", "-c", "\n".join(lines)]
    return subprocess.Popen(bash, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip


def python(env: Path, code: str, cwd: Path) -> str:
    done = subprocess.run([env / "bin" / "python", "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
@pytest.mark.timeout(300)  # five pip installs: a busy host slows them down
def test_the_documented_install_lines__install_tenure_in_fresh_venvs(tmp_path: Path) -> None:
    from_checkout, from_wheel = install_blocks()
    here, there = tmp_path / "project", tmp_path / "image"
    for directory in (here, there):
        copy_checkout(directory / "tenure")
    # The wheel's block runs where a venv is already active, as in a Dockerfile.
    venv.create(there / ".venv", with_pip=True)
    activate = ". .venv/bin/activate"
    running = [script(from_checkout, here), script([activate, *from_wheel], there)]
    for done, lines in zip(running, (from_checkout, from_wheel), strict=True):
        output, _ = done.communicate(timeout=240)
        assert done.returncode == 0, "\n".join(lines) + "\n" + output[-4000:]

    installed = python(here / ".venv", "import tenure, psycopg, redis, starlette, "
                       "opentelemetry.trace; print(tenure.__file__)", here)  # fmt: skip
    assert Path(installed).is_relative_to(here / ".venv"), installed  # not the checkout's
    wheel = f"tenure-{PROJECT['version']}-py3-none-any.whl"
    assert (there / "dist" / wheel).exists(), list((there / "dist").iterdir())
    code = "import importlib.metadata, psycopg, tenure; print(importlib.metadata.version('tenure'))"
    assert python(there / ".venv", code, there) == PROJECT["version"]


def test_every_pip_command_in_the_docs__is_run_by_the_install_test() -> None:
    from_checkout, from_wheel = install_blocks()
    extras = set(PROJECT["optional-dependencies"])
    allowed = {*from_checkout, *from_wheel} | {f"pip install './tenure[{x}]'" for x in extras}
    shown = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        for block in blocks(text):
            shown += [(page, c) for c in commands(block.code) if PIP.match(c)]
        shown += [(page, " ".join(c.split())) for c in re.findall(r"`(pip [^`]+)`", text)]
    unknown = [f"{page.relative_to(ROOT)}: {c}" for page, c in shown if c not in allowed]
    assert not unknown, "install lines that no test runs:\n" + "\n".join(unknown)
