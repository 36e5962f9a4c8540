"""The bench the chaos experiments run on: a private queue, real worker
processes (each in its own process group, so that it can be frozen whole), and
storage watched from outside."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tenure.app import App
from tenure.core.states import Outcome
from tenure.errors import InvalidTransition
from tenure.job import Attempt, Job

T = TypeVar("T")
APP_PATH = "tenure.chaos.tasks:app"


class ExperimentFailed(Exception):
    """A condition the experiment waits for never came: itself a broken guarantee."""


class Lab:
    """A private queue and the workers an experiment starts, signals and watches."""

    def __init__(self, url: str, name: str, **policy: Any) -> None:
        self.url = url
        self.app = App(url)
        self.queue = f"chaos.{name}.{uuid.uuid4().hex[:8]}"
        if policy:
            self.app.queue(self.queue).set_policy(**policy)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logs = Path(tempfile.mkdtemp(prefix=f"tenure-{self.queue}-"))

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        for w in self.workers:
            if w.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(w.pid, signal.SIGCONT)
                    os.killpg(w.pid, signal.SIGKILL)
            w.wait()
        try:
            self._remove_queue()
        finally:
            self.app.close()
        if exc_type is None:  # keep the workers' logs of a failed experiment
            shutil.rmtree(self.logs, ignore_errors=True)

    def _remove_queue(self, timeout: float = 10.0) -> None:
        """Delete the lab's queue: its jobs are the experiment's, not the user's.
        A killed worker's jobs stay active until a sweep recovers them."""
        queue = self.app.queue(self.queue)
        deadline = time.monotonic() + timeout
        while True:
            try:
                queue.delete()
                return
            except InvalidTransition:
                if time.monotonic() > deadline:
                    raise
            self.app.call(self._sweep())
            time.sleep(0.01)

    async def _sweep(self) -> None:
        await (await self.app.abackend()).rescue()

    def worker(self, *args: str) -> subprocess.Popen[bytes]:
        """Start ``tenure worker`` for the chaos tasks on this lab's queue."""
        env = {**os.environ, "TENURE_URL": self.url}
        command = [sys.executable, "-m", "tenure.cli", "worker", APP_PATH,
                   "--queue", self.queue, "--log-level", "error", *args]  # fmt: skip
        log = (self.logs / f"worker-{len(self.workers)}.log").open("wb")
        with log:
            proc = subprocess.Popen(command, env=env, start_new_session=True,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=log)  # fmt: skip
        self.workers.append(proc)
        return proc

    def enqueue(self, task: str, **args: Any) -> Job:
        return self.app.enqueue(task, args, queue=self.queue)

    def job(self, job_id: str) -> Job:
        return self.app.get_job(job_id)

    def wait(self, what: str, predicate: Callable[[], T | None], timeout: float = 60.0) -> T:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value is not None and value is not False:
                return value
            time.sleep(0.005)
        raise ExperimentFailed(
            f"timed out after {timeout:.0f} s waiting for {what} (worker logs: {self.logs})"
        )

    def attempt(self, job_id: str, n: int, *, ended: bool = False) -> Attempt | None:
        """The job's ``n``-th attempt (from 1) once it exists (and has ended)."""
        history = self.job(job_id).history
        if len(history) < n or (ended and history[n - 1].outcome is None):
            return None
        return history[n - 1]

    def ready(self, worker: subprocess.Popen[bytes]) -> bool:
        """Whether ``worker`` has registered with storage (it claims from then on)."""
        known = self.app.call(self.app.backend.workers())
        return any(f".{worker.pid}." in w.id for w in known)

    def running_on(self, job_id: str) -> tuple[subprocess.Popen[bytes], int] | None:
        """The worker running the job, and its executor's pid, once the handler started."""
        job = self.job(job_id)
        if not (job.worker and isinstance(job.progress, dict) and "pid" in job.progress):
            return None
        for w in self.workers:
            if f".{w.pid}." in job.worker:
                return w, int(job.progress["pid"])
        return None

    def outcomes(self, job_id: str) -> list[Outcome | None]:
        return [a.outcome for a in self.job(job_id).history]


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
