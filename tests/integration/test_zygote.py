"""The zygote: executors forked from a process that imported the App once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure import App, State, WorkerConfig
from tenure.job import Job
from tenure.worker import Supervisor
from tenure.worker.executors.base import AttemptResult, Returned, Stopped
from tenure.worker.executors.process import ProcessPool
from tenure.worker.executors.zygote_handle import Zygote

TENURE = Path(sys.executable).with_name("tenure")

MODULE = """
import os, signal, threading, time, tenure

with open({imports!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")

app = tenure.App({url!r})

def parent_of(pid):
    with open(f"/proc/{{pid}}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])

@app.task
def inside() -> dict:
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.append(os.readlink(f"/proc/self/fd/{{fd}}"))
        except OSError:  # the listing's own descriptor, closed since
            pass
    return {{
        "pid": os.getpid(),
        "zygote": os.getppid(),
        "worker": parent_of(os.getppid()),
        "sockets": [fd for fd in fds if fd.startswith("socket:")],
        "threads": sorted(t.name for t in threading.enumerate()),
        "sigterm_ignored": signal.getsignal(signal.SIGTERM) == signal.SIG_IGN,
    }}

@app.task
def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds
"""


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Write the app module (``zygote_app_<test>``) and make it importable; yields
    a function that imports it (counted like any import of it)."""
    name = f"zygote_app_{tmp_path.name.replace('-', '_')}"
    url = f"sqlite:///{tmp_path / 'zygote.db'}"
    code = MODULE.format(imports=str(tmp_path / "imports"), url=url)
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    monkeypatch.syspath_prepend(str(tmp_path))
    imported: list[App] = []

    def load() -> App:
        imported.append(__import__(name).app)
        return imported[-1]

    load.name = name  # type: ignore[attr-defined]
    yield load
    for app in imported:
        app.close()
    sys.modules.pop(name, None)


def imports(tmp_path: Path) -> list[int]:
    return [int(line) for line in (tmp_path / "imports").read_text().split()]


def test_a_cli_worker_runs_the_app_module_once__its_executors_hold_nothing_of_its_supervisor(
    backend_url: str, tmp_path: Path
) -> None:
    name = "cli_zygote_app"
    code = MODULE.format(imports=str(tmp_path / "imports"), url=backend_url)
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    with App(backend_url) as producer:
        jobs = producer.enqueue_many("inside", [{}] * 8)
    env = {k: v for k, v in os.environ.items() if k != "TENURE_URL"}
    done = subprocess.run(
        [str(TENURE), "worker", f"{name}:app", "--burst", "--concurrency", "4"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with App(backend_url) as producer:
        ran = [producer.get_job(j.id) for j in jobs]
    assert all(j.state is State.COMPLETED for j in ran), [j.error for j in ran]
    worker = imports(tmp_path)
    assert len(worker) == 1, "the app module ran more than once"
    for inside in (j.result for j in ran):
        # Forked by the zygote, itself forked by the worker after the import.
        assert inside["worker"] == worker[0] != inside["zygote"]
        assert inside["sockets"] == [], "an executor holds a socket (a storage connection?)"
        assert inside["threads"] == ["MainThread", "tenure-reader"]
        assert inside["sigterm_ignored"]


def test_a_worker_started_from_python__imports_the_app_in_its_zygote_only(
    app_module: Any, tmp_path: Path
) -> None:
    app = app_module()
    jobs = app.enqueue_many("inside", [{}] * 8)
    config = WorkerConfig(burst=True, concurrency=4, idle_poll_max=0.05)
    asyncio.run(Supervisor(app, config).run())
    pids = {app.get_job(j.id).result["pid"] for j in jobs}
    zygotes = {app.get_job(j.id).result["zygote"] for j in jobs}
    assert imports(tmp_path) == [os.getpid(), *zygotes]  # this test's, then the zygote's
    assert len(zygotes) == 1 and not pids & zygotes


def test_a_zygote_killed_9__hands_back_what_its_executors_ran__and_another_forks_new_ones(
    app_module: Any,
) -> None:
    async def main() -> tuple[AttemptResult, int, int, AttemptResult, list[int]]:
        ends: dict[str, AttemptResult] = {}
        pool = ProcessPool(f"{app_module.name}:app", lambda name: False, _NoRequests(),
                           concurrency=2)  # fmt: skip
        await pool.start()
        try:
            first = pool.zygote.pid
            assert first is not None
            pool.begin(_job("napping", "nap", {"seconds": 60.0}), None,
                       lambda r, _: ends.__setitem__("napping", r))  # fmt: skip
            async with asyncio.timeout(20):
                while not any(c.jobs for c in pool.children):
                    await asyncio.sleep(0.01)
                os.kill(first, signal.SIGKILL)
                while "napping" not in ends:
                    await asyncio.sleep(0.01)
                pool.begin(_job("after", "inside", {}), None,
                           lambda r, _: ends.__setitem__("after", r))  # fmt: skip
                while "after" not in ends or len([c for c in pool.children if c.ready.done()]) < 2:
                    await asyncio.sleep(0.01)
            second = pool.zygote.pid
            assert second is not None
            return ends["napping"], first, second, ends["after"], [c.pid for c in pool.children]
        finally:
            await pool.close()

    napping, first, second, after, children = asyncio.run(main())
    assert napping == Stopped(), "the attempt was not handed back as collateral"
    assert second != first
    assert isinstance(after, Returned) and after.value["zygote"] == second
    assert after.value["pid"] in children and len(children) == 2
    for pid in (first, second, *children):  # closing the pool left no process behind
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_fork_cancelled_before_the_zygote_answered__leaves_it_forking_the_next(
    app_module: Any,
) -> None:
    def children_of(pid: int) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if parent_of(int(entry)) == pid:
                        found.append(int(entry))
        return found

    async def main() -> tuple[int, int, list[int]]:
        zygote = Zygote(f"{app_module.name}:app")
        await zygote.start()
        runs, control, out = ([os.pipe() for _ in range(2)] for _ in range(3))
        ends = [(runs[k][0], control[k][0], out[k][1]) for k in range(2)]  # the executor's
        try:
            assert zygote.pid is not None
            asking = asyncio.create_task(zygote.fork(*ends[0]))
            await asyncio.sleep(0)  # the request is sent: it waits for the answer
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)
            async with asyncio.timeout(20):  # never, had the answer ended the zygote's reader
                pid, exited = await zygote.fork(*ends[1])
            for fd in (fd for pair in (*runs, *control) for fd in pair):
                os.close(fd)  # the executors' pipes end: each exits
            code = await asyncio.wait_for(exited, 20)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while (left := children_of(zygote.pid)) and loop.time() < deadline:
                await asyncio.sleep(0.01)
            return pid, code, left
        finally:
            for pair in out:
                for fd in pair:
                    os.close(fd)
            await zygote.close()

    pid, code, left = asyncio.run(main())
    assert pid > 0 and code == 0, "the executor forked after the cancel did not run or exit"
    assert left == [], "the executor forked for the cancelled request is still alive"


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


def _job(job_id: str, task: str, args: dict[str, Any]) -> Job:
    return Job(id=job_id, task=task, queue="default", args=args, state=State.ACTIVE,
               priority=0, run_at=0.0, created_at=0.0, fence=1)  # fmt: skip


class _NoRequests:
    async def progress(self, job: Job, data: Any) -> None:
        raise AssertionError("no handler here asks the supervisor anything")

    async def heartbeat(self, job: Job) -> None:
        raise AssertionError("no handler here asks the supervisor anything")


def test_threads_the_apps_import_started__are_named_in_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"threaded_app_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        import threading, time, tenure
        threading.Thread(target=time.sleep, args=(60,), name="app-poller", daemon=True).start()
        app = tenure.App({f"sqlite:///{tmp_path / 't.db'}"!r})

        @app.task
        def noop() -> None:
            pass
    """))  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))

    async def main() -> None:
        pool = ProcessPool(f"{name}:app", lambda _: False, _NoRequests(), concurrency=1)
        try:
            await pool.start()
        finally:
            await pool.close()

    asyncio.run(main())
    assert "importing the App started threads (app-poller)" in caplog.text
