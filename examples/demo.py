"""tenure in one minute, on the embedded SQLite default.

1. enqueue 8 jobs;
2. start two workers (real processes: `tenure worker demo_tasks:app`);
3. kill -9 one of them while it holds jobs;
4. watch the other worker's sweeper notice, from the dead worker's released
   liveness lock, and recover every job it held; nothing is lost, and the
   killed attempts can never settle.

Run it with `make demo`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.table import Table

import tenure

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
# soft_wrap: a line is never cut at the console's width, which is 80 columns
# when the output is piped (to a file, to less) rather than shown on a terminal.
console = Console(highlight=False, soft_wrap=True)
LOGS = Path(tempfile.mkdtemp(prefix="tenure-demo-"))


def start_worker(env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    """A real worker process, as `tenure worker` runs it (its log goes to demo-<name>.log)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tenure.cli", "worker", "demo_tasks:app",
         "--queue", "images", "--concurrency", "2"],
        cwd=HERE, env=env, stdout=subprocess.DEVNULL,
        stderr=(LOGS / f"worker-{name}.log").open("wb"),
    )  # fmt: skip


def wait_until(predicate: Callable[[], T], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise SystemExit(f"demo: timed out after {timeout} s")


def main() -> int:
    workdir = LOGS
    url = f"sqlite:///{workdir / 'demo.db'}"
    env = {**os.environ, "TENURE_URL": url, "PYTHONPATH": str(HERE)}
    os.environ["TENURE_URL"] = url
    sys.path.insert(0, str(HERE))
    from demo_tasks import app, resize

    console.print(f"[bold]tenure demo[/] on {url}")
    console.print(f"the workers' logs: {LOGS / 'worker-A.log'}, {LOGS / 'worker-B.log'}\n")
    jobs = resize.enqueue_many([{"image": f"photo-{i}.jpg", "width": 640} for i in range(8)])
    console.print(f"enqueued {len(jobs)} jobs on queue 'images' (each takes ~1 s)")

    victim, survivor = start_worker(env, "A"), start_worker(env, "B")

    def victim_mid_handler() -> list[tenure.Job]:
        active = app.queue("images").jobs("active", limit=10).jobs
        mine = [j for j in active if j.worker and f".{victim.pid}." in j.worker]
        # Kill it once it is well into its handlers: every job it holds has reported progress.
        return mine if mine and all(j.progress for j in mine) else []

    victim_jobs = wait_until(victim_mid_handler)
    console.print(f"worker A (pid {victim.pid}) holds {len(victim_jobs)} jobs, mid-handler; "
                  f"worker B (pid {survivor.pid}) runs beside it")  # fmt: skip

    killed_at = time.time()
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    console.print("[red]kill -9[/] worker A, mid-handler\n")

    def recovered() -> list[float]:
        ends = [app.get_job(j.id).history[0].ended_at for j in victim_jobs]
        return [e - killed_at for e in ends if e is not None] if all(ends) else []

    recovery = max(wait_until(recovered))
    console.print(
        f"worker B's sweeper saw A's liveness lock free and put its {len(victim_jobs)} jobs "
        f"back in the queue [bold green]{recovery:.2f} s[/] after the kill"
    )

    wait_until(lambda: app.queue("images").counts()["completed"] == len(jobs), timeout=60)
    survivor.send_signal(signal.SIGTERM)
    survivor.wait(timeout=30)

    table = Table(title="every job, with its history")
    for column in ("job", "state", "attempts", "history (fence: outcome)", "result"):
        table.add_column(column)
    for j in (app.get_job(j.id) for j in jobs):
        history = ", ".join(f"{a.fence}: {a.outcome}" for a in j.history)
        table.add_row(j.id[-8:], str(j.state), str(j.attempts), history, str(j.result["image"]))
    console.print(table)
    counts = app.queue("images").counts()
    lost = len(jobs) - counts["completed"]
    console.print(f"\ncompleted {counts['completed']} of {len(jobs)}; lost {lost}; "
                  f"recovery after kill -9: {recovery:.2f} s")  # fmt: skip
    app.close()
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
