"""PostgreSQL connections, counted by the server: what one worker holds idle
and busy, and a fleet larger than the server admits (issue 40, parts 1 and 6).

Real `tenure worker` processes; each of the server's sessions is matched to
the worker process whose socket is its client end (``/proc``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.chaos.lab import Lab
from tenure.core import waiting
from tests.conftest import server_or_skip
from tests.servers import PostgresServer


def local_ports(pid: int) -> set[int]:
    """The local TCP ports of ``pid``'s sockets."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if match := re.fullmatch(r"socket:\[(\d+)\]", target):
            inodes.add(match.group(1))
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def held_by(server: PostgresServer, worker: subprocess.Popen[bytes]) -> int:
    """The server's sessions whose client is ``worker``'s process."""
    rows = server.psql("SELECT client_port FROM pg_stat_activity WHERE client_port > 0")
    ports = {int(p) for p in rows.split()}
    return len(ports & local_ports(worker.pid))


def test_one_default_worker_holds_2_connections_idle_and_3_busy(postgres_server):
    url = postgres_server.new_database()
    with Lab(url, "budget") as lab:
        worker = lab.worker("--pool", "thread")
        lab.wait("the worker to register", lambda: lab.ready(worker))
        lab.wait("2 connections at most, idle", lambda: held_by(postgres_server, worker) <= 2)
        jobs = [lab.enqueue("chaos.sleep", seconds=0.02) for _ in range(200)]
        busy = []
        while lab.job(jobs[-1].id).state.value != "completed":
            busy.append(held_by(postgres_server, worker))
        print("connections while busy", max(busy), "idle", held_by(postgres_server, worker))
        assert max(busy) <= 3, busy
        lab.wait("back to 2 at most", lambda: held_by(postgres_server, worker) <= 2, 30)


@pytest.fixture(scope="module")
def small_server() -> Iterator[PostgresServer]:
    server = server_or_skip("postgres", lambda: PostgresServer(max_connections=10))
    yield server
    server.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_more_workers_than_the_server_admits__they_run_in_turn_none_exits(small_server):
    """10 connections, 6 workers of 2 each and the lab's own: some wait,
    saying so once, holding nothing, and start as the others stop."""
    url = small_server.new_database()
    with Lab(url, "crowd") as lab:
        jobs = [lab.enqueue("chaos.sleep", seconds=0.01) for _ in range(60)]
        workers = [lab.worker("--pool", "thread", "--log-level", "warning") for _ in range(6)]
        lab.wait("every job done", lambda: all(
            lab.job(j.id).state.value == "completed" for j in jobs), 90)  # fmt: skip
        logs = lab.logs.glob
        refused = lab.wait("a worker to say it was refused", lambda: [
            p for p in logs("worker-*.log")
            if "too many clients" in p.read_text()] or None)  # fmt: skip
        said = [line for p in refused for line in p.read_text().splitlines() if "clients" in line]
        assert all(len(p.read_text().splitlines()) < 10 for p in refused), said  # said once
        pids = {w.pid for w in workers}
        found = lab.wait("tenure health to see a waiting worker", lambda: [
            r for pid, r in waiting.waiting().items() if pid in pids] or None)  # fmt: skip
        assert "too many clients" in found[0]
        probe = [sys.executable, "-m", "tenure.cli", "--url", url, "health", "--host", "none"]
        health = subprocess.run(probe, check=False, capture_output=True, text=True)
        assert "wait for a connection" in health.stderr or "too many" in health.stderr, health
        started = set()
        while len(started) < len(workers):  # stop those that run: the others start
            running = lab.wait("a worker running", lambda: [
                w for w in workers if w.poll() is None and lab.ready(w)] or None)  # fmt: skip
            started.update(w.pid for w in running)
            assert all(w.poll() in (None, 0) for w in workers), "a worker exited on its own"
            running[0].send_signal(signal.SIGTERM)
            assert running[0].wait(30) == 0
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
            assert w.wait(30) == 0
