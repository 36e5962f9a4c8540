"""docs/transactional-enqueue.md's examples run as written, so they cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.servers import PostgresServer

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(# (\w+\.py)\n.*?)^```$", re.MULTILINE | re.DOTALL)


def example(name: str) -> str:
    doc = (ROOT / "docs" / "transactional-enqueue.md").read_text()
    [code] = [code for code, file in BLOCK.findall(doc) if file == name]
    return code


def run(code: str, cwd: Path) -> list[str]:
    (cwd / "example.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    done = subprocess.run([sys.executable, "example.py"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_sqlite_example__commits_one_job_and_rolls_back_the_other(tmp_path: Path) -> None:
    assert run(example("shop_sqlite.py"), tmp_path) == ["queued", "1"]


def test_the_postgres_example__commits_one_job_and_rolls_back_the_other(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    code = example("shop_postgres.py")
    assert code.count("postgresql://app@db/shop") == 1
    code = code.replace("postgresql://app@db/shop", postgres_server.new_database())
    assert run(code, tmp_path) == ["queued", "1"]
