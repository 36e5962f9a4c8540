"""What a SQLite worker imports: its start pays for no other backend, no web,
no metrics, no tracing, no table printing, and no cron parser for an App
without schedules (issue #26: a worker's imports are most of its start)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tenure import App, State

# Top-level modules (or tenure's own) that the worker must not import.
UNNEEDED = (
    "redis", "psycopg", "psycopg_pool", "hiredis", "opentelemetry", "starlette", "uvicorn",
    "jinja2", "prometheus_client", "rich", "pythonjsonlogger", "cronsim",
    "tenure.backends.redis", "tenure.backends.postgres", "tenure.web", "tenure.metrics",
    "tenure.chaos", "tenure.bench", "tenure.testing",
)  # fmt: skip

MODULE = """
import sys, tenure

app = tenure.App({url!r})

@app.task
def modules() -> list[str]:
    return sorted(sys.modules)
"""

# The CLI's worker, which writes the modules it holds when it exits.
WORKER = """
import atexit, sys
from pathlib import Path
atexit.register(lambda: Path("supervisor.modules").write_text("\\n".join(sorted(sys.modules))))
sys.argv = ["tenure", "worker", "startup_app:app", "--burst", "--concurrency", "2"]
from tenure.cli import main
main()
"""


def unneeded(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == u or m.startswith(u + ".") for u in UNNEEDED)]


def test_a_sqlite_worker__imports_no_other_backend_nor_web_metrics_or_cron(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'startup.db'}"
    (tmp_path / "startup_app.py").write_text(textwrap.dedent(MODULE.format(url=url)))
    with App(url) as producer:
        job = producer.enqueue("modules", {})
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WORKER)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with App(url) as producer:
        ran = producer.get_job(job.id)
    assert ran.state is State.COMPLETED, ran.error
    supervisor = (tmp_path / "supervisor.modules").read_text().split()
    assert "tenure.worker.supervisor" in supervisor  # the file is the worker's
    assert unneeded(supervisor) == []
    assert unneeded(ran.result) == []  # the executor's: forked from the zygote
