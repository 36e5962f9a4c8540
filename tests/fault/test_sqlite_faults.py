"""SQLite storage faults: a full disk, a database file deleted, replaced or
overwritten under a running worker.

A full disk is real: a small tmpfs the test mounts (it runs as root; where
mounting is not allowed, those tests skip and say why).
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.backends.base import WorkerInfo
from tenure.errors import BackendUnavailable, StorageLost
from tenure.job import JobSpec
from tests.conftest import SyncBackend


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 2 MB tmpfs of the test's own."""
    where = Path(tempfile.mkdtemp(prefix="tenure-disk-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)
    where.rmdir()


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk``."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass
    return filler


def one_job() -> list[JobSpec]:
    return [JobSpec.create("t", {"pad": "x" * 500})]


def test_a_full_disk__is_backend_unavailable_naming_it__and_writes_pass_once_space_returns(
    small_disk, open_backend
):
    """Once the disk was full, the WAL is kept small: left to its default (a
    checkpoint every 4 MB of it), it fills again whatever space came back, and
    the worker never recovers."""
    backend: SyncBackend = open_backend(f"sqlite:///{small_disk / 't.db'}")
    backend.register_worker(WorkerInfo("w1", "host", 1, ("default",)))
    backend.enqueue([JobSpec.create("t", {}) for _ in range(5)])
    filler = fill(small_disk)
    with pytest.raises(BackendUnavailable) as full:
        for _ in range(1000):  # until the WAL has no room left either
            backend.enqueue(one_job())
    message = str(full.value)
    assert "disk full" in message and str(small_disk) in message and "\n" not in message
    with pytest.raises(BackendUnavailable, match="disk full"):
        backend.claim("w1", ["default"], 1)  # the worker's own cycle, on its fast path
    filler.unlink()
    for _ in range(300):  # several times the disk's size of WAL, without checkpoints
        backend.enqueue(one_job())
        [job] = backend.claim("w1", ["default"], 1)
        backend.complete(job.id, job.fence)
        assert not backend.heartbeat("w1", []).lost


def test_a_deleted_database__is_storage_lost_at_the_next_heartbeat(tmp_path, open_backend):
    path = tmp_path / "t.db"
    backend = open_backend(f"sqlite:///{path}")
    backend.register_worker(WorkerInfo("w1", "host", 1, ("default",)))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(StorageLost, match=f"{path} was deleted"):
        backend.heartbeat("w1", [])
    with pytest.raises(StorageLost, match="deleted"):
        backend.rescue()


def test_a_replaced_database__is_storage_lost(tmp_path, open_backend):
    path = tmp_path / "t.db"
    backend = open_backend(f"sqlite:///{path}")
    backend.register_worker(WorkerInfo("w1", "host", 1, ("default",)))
    other = tmp_path / "other.db"
    open_backend(f"sqlite:///{other}")  # a tenure database too, just not this one
    os.replace(other, path)
    with pytest.raises(StorageLost, match=f"{path} was replaced"):
        backend.heartbeat("w1", [])


def test_a_database_overwritten_with_garbage__is_storage_lost(tmp_path, open_backend):
    path = tmp_path / "t.db"
    backend = open_backend(f"sqlite:///{path}")
    backend.register_worker(WorkerInfo("w1", "host", 1, ("default",)))
    backend.enqueue(one_job())
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    with path.open("r+b") as f:
        f.write(os.urandom(path.stat().st_size))
    with pytest.raises(StorageLost, match="not a database"):
        backend.claim("w1", ["default"], 1)
    with pytest.raises(StorageLost, match="not a database"):
        backend.heartbeat("w1", [])


# -- a real worker ----------------------------------------------------------
#
# These need both halves of the fix: the backend raises StorageLost, and the
# worker stops on it (Supervisor, the lead's part of issue 21).

WORKER_APP = """
import tenure
app = tenure.App({url!r})

@app.task
def noop() -> None:
    pass
"""


def start_worker(tmp_path: Path, url: str) -> tuple[subprocess.Popen[bytes], Path]:
    (tmp_path / "faulty_app.py").write_text(WORKER_APP.format(url=url))
    log = tmp_path / "worker.log"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("TENURE_URL", None)
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tenure.cli", "worker", "faulty_app:app", "--pool", "thread"],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
        )  # fmt: skip
    return worker, log


def wait_for(what: str, predicate, timeout: float = 15.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


FAULTS = {"deleted": "was deleted", "replaced": "was replaced", "overwritten": "not a database"}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_worker_whose_database_is_deleted_replaced_or_overwritten__stops_saying_so(
    tmp_path, open_backend, fault
):
    path = tmp_path / "t.db"
    url = f"sqlite:///{path}"
    backend = open_backend(url)
    backend.set_policy("default", backend.get_policy("default").replace(heartbeat_interval=0.2))
    worker, log = start_worker(tmp_path, url)
    try:
        wait_for("the worker to register", backend.workers)
        if fault == "deleted":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        elif fault == "replaced":
            shutil.copy(path, tmp_path / "copy.db")
            os.replace(tmp_path / "copy.db", path)
        else:
            with path.open("r+b") as f:
                f.write(os.urandom(path.stat().st_size))
        code = wait_for("the worker to stop", worker.poll, timeout=10.0)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert code != 0
    lines = log.read_text().splitlines()
    said = [line for line in lines if str(path) in line and FAULTS[fault] in line]
    assert said, lines
    assert len(lines) < 20, lines  # a clear word, not a flood


def test_a_worker_on_a_full_disk__says_it_once__and_carries_on_when_space_returns(
    tmp_path, small_disk, open_backend
):
    url = f"sqlite:///{small_disk / 't.db'}"
    backend = open_backend(url)
    worker, log = start_worker(tmp_path, url)
    try:
        wait_for("the worker to register", backend.workers)
        filler = fill(small_disk)
        with pytest.raises(BackendUnavailable):  # until the WAL has no room left either
            for _ in range(1000):
                backend.enqueue([JobSpec.create("noop", {"pad": "x" * 500})])
        wait_for("the worker to meet the fault", lambda: "failed" in log.read_text())
        time.sleep(2)  # the fault lasts: the worker's calls keep failing, quietly
        filler.unlink()
        wait_for("an enqueue", lambda: _enqueued(backend))
        wait_for("every job to run", lambda: not backend.counts("default")["queued"])
        worker.terminate()
        code = worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text
    assert len(text.splitlines()) < 25, text  # a clear word, not a flood


def _enqueued(backend: SyncBackend) -> bool:
    try:
        backend.enqueue([JobSpec.create("noop", {})])
    except BackendUnavailable:
        return False
    return True


# -- a worker frozen while it holds the write lock --------------------------

FREEZE_APP = """
import sqlite3, time
from pathlib import Path
import tenure

app = tenure.App({url!r})

@app.task(queue="healthy")
def slow(seconds: float) -> None:
    time.sleep(seconds)

@app.task(queue="holder")
def hold(inside: str) -> None:
    db = sqlite3.connect({path!r}, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")  # the write lock: every writer waits for it
    Path(inside).touch()
    time.sleep(0.5)
    db.execute("COMMIT")
    db.close()
"""


def test_a_worker_frozen_holding_the_write_lock__costs_no_healthy_lease(tmp_path, open_backend):
    """SIGSTOP a worker while it holds SQLite's write lock, longer than a lease:
    every heartbeat waits for the lock meanwhile. Thawed, the frozen worker's
    overdue sweep must not judge the healthy worker's lease, whose renewal is
    still waiting for the lock, as stalled (the 60 s soak caught this); nor
    may a third worker's sweep that waited in line behind its own heartbeat."""
    path = tmp_path / "t.db"
    url = f"sqlite:///{path}"
    backend = open_backend(url)
    queues = ("healthy", "holder", "spare")
    for queue in queues:
        policy = backend.get_policy(queue).replace(
            lease_ttl=2.0, heartbeat_interval=0.5, sweep_interval=0.25
        )
        backend.set_policy(queue, policy)
    (tmp_path / "freeze_app.py").write_text(FREEZE_APP.format(url=url, path=str(path)))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("TENURE_URL", None)
    workers = []
    for queue in queues:
        with (tmp_path / f"{queue}.log").open("wb") as out:
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "tenure.cli", "worker", "freeze_app:app", "--pool",
                 "thread", "--concurrency", "1", "--queue", queue],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                start_new_session=True,
            ))  # fmt: skip
    holder = workers[1]
    inside = tmp_path / "inside"
    try:
        wait_for("the workers", lambda: len(backend.workers()) == 3)
        slow = backend.enqueue([JobSpec.create("slow", {"seconds": 6.0}, queue="healthy")])[0]
        wait_for("the slow job to start", lambda: backend.get(slow.id).state == "active")
        backend.enqueue([JobSpec.create("hold", {"inside": str(inside)}, queue="holder")])
        wait_for("the lock taken", inside.exists)
        os.killpg(holder.pid, signal.SIGSTOP)
        try:
            time.sleep(3.25)  # the fault: 1.5 leases and a sweep, as the soak's stop-long
        finally:
            os.killpg(holder.pid, signal.SIGCONT)
        job = wait_for("the slow job to end", lambda: _ended(backend, slow.id), timeout=30.0)
    finally:
        for w in workers:
            w.kill()
            w.wait()
    assert (job.state, job.attempts, job.stalls) == ("completed", 1, 0), job


def _ended(backend: SyncBackend, job_id: str):  # type: ignore[no-untyped-def]
    job = backend.get(job_id)
    return job if job.state not in ("active", "queued", "scheduled") else None


def test_a_heartbeat_keeps_the_wal_another_process_would_delete(tmp_path, open_backend):
    """The heartbeat's check of the file must not drop this process's locks on
    it (a plain open()/close() does, for every connection of the process):
    another process closing its last connection would then delete the WAL this
    backend still writes to, and every write from then on was lost."""
    path = tmp_path / "t.db"
    backend = open_backend(f"sqlite:///{path}")
    backend.enqueue(one_job())
    backend.heartbeat("w1", [])  # checks the file
    other = (
        f"import sqlite3; c = sqlite3.connect({str(path)!r}); "
        "print(c.execute('SELECT count(*) FROM jobs').fetchone()[0]); c.close()"
    )
    subprocess.run([sys.executable, "-c", other], check=True, capture_output=True)
    assert Path(f"{path}-wal").exists()
    backend.enqueue(one_job())
    seen = subprocess.run([sys.executable, "-c", other], check=True, capture_output=True)
    assert seen.stdout.strip() == b"2"  # the second job is in the WAL the other process reads
