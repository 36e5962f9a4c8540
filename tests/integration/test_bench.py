"""``tenure bench``, the console script, with real workers on every backend: a
small run prints every figure, and storage holds every job it sent, completed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tenure import App, State

TENURE = Path(sys.executable).with_name("tenure")
FIGURES = (
    "enqueue, one by one", "enqueue, bulk", "drain, 1 worker process",
    "drain, 2 worker processes", "idle pickup, p50", "idle pickup, max",
    "end-to-end latency, p50", "end-to-end latency, p99", "jobs completed, left in storage",
)  # fmt: skip


def test_a_small_bench__prints_every_figure_and_loses_no_job(backend_url: str) -> None:
    jobs, idle, steady = 40, 2, 20
    done = subprocess.run(
        [str(TENURE), "--url", backend_url, "bench", "--jobs", str(jobs), "--one-by-one", "10",
         "--batch", "15", "--idle", str(idle), "--steady", str(steady), "--rate", "100"],
        capture_output=True, text=True, timeout=240, check=False,
        env={**os.environ, "COLUMNS": "200"},  # the table's lines unwrapped
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {f: next((ln for ln in done.stdout.splitlines() if f in ln), "") for f in FIGURES}
    for figure, line in lines.items():
        assert re.search(r"\d", line.split(figure, 1)[-1]), f"{figure}: {line!r}\n{done.stdout}"
    sent = 2 * jobs + 1 + idle + steady
    assert f"{sent:,}" in lines["jobs completed, left in storage"]
    assert "MISSING" not in done.stdout
    with App(backend_url) as app:
        queues = [q for q in app.queues() if q.startswith("bench.")]
        assert len(queues) == 3
        counts = [app.queue(q).counts() for q in queues]
    assert sum(n[State.COMPLETED] for n in counts) == sent
    assert sum(sum(n.values()) for n in counts) == sent
