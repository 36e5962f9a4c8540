"""The README's demo runs, so it cannot rot."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_loses_nothing_after_a_kill_9():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed 8 of 8; lost 0" in done.stdout
    assert "crashed, 2: completed" in done.stdout  # the killed attempts were recovered


def test_the_readme_names_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
