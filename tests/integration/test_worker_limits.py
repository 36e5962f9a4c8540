"""``tenure worker`` refuses what it cannot run, and says why it cannot start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tenure.config import MAX_CONCURRENCY, WorkerConfig
from tenure.errors import InvalidInput

TENURE = Path(sys.executable).with_name("tenure")


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_concurrency_up_to_the_pools_maximum__is_accepted(pool: str) -> None:
    config = WorkerConfig(concurrency=MAX_CONCURRENCY[pool], pool=pool)  # type: ignore[arg-type,index]
    assert config.concurrency == MAX_CONCURRENCY[pool]  # type: ignore[index]


@pytest.mark.parametrize(("pool", "most"), [("process", 256), ("thread", 1024)])
def test_concurrency_beyond_the_pools_maximum__is_invalid_input(pool: str, most: int) -> None:
    with pytest.raises(InvalidInput, match=f"at most {most}"):
        WorkerConfig(concurrency=most + 1, pool=pool)  # type: ignore[arg-type]


def tenure_worker(tmp_path: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "limits_mod.py").write_text(textwrap.dedent(module))
    env = {k: v for k, v in os.environ.items() if k != "TENURE_URL"}
    return subprocess.run(
        [str(TENURE), "worker", "limits_mod:app", "--burst", *args],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize(("pool", "most"), [("process", 256), ("thread", 1024)])
def test_worker_with_a_concurrency_of_100000__is_one_error_line_and_starts_nothing(
    tmp_path: Path, pool: str, most: int
) -> None:
    module = f"import tenure\napp = tenure.App('sqlite:///{tmp_path / 't.db'}')\n"
    done = tenure_worker(tmp_path, module, "-c", "100000", "--pool", pool)
    assert done.returncode == 1
    assert f"concurrency 100000 is more than a {pool} pool runs (at most {most})" in (
        one_error_line(done)
    )
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("code", [4, 0, "no config"])
def test_an_app_module_that_exits_at_import__is_one_error_line_naming_it(
    tmp_path: Path, code: object
) -> None:
    done = tenure_worker(tmp_path, f"import sys\nsys.exit({code!r})\n")
    line = one_error_line(done)
    assert f"cannot import 'limits_mod': it called sys.exit({code!r})" in line
