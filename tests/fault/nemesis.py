"""The nemesis: real ``tenure worker`` processes, and the faults done to them
and to the storage server, each written to ``faults.jsonl`` for the history
checker.

- A :class:`Fleet` keeps a few workers running, one per slot. A slot fixes the
  pool and where the worker runs: in a network namespace of its own, behind a
  veth pair (so that it can be partitioned), or under libfaketime (its clock
  minutes off; leases run on storage's clock, so nothing may change).
- :class:`Nemesis` does one fault at a time: SIGKILL a worker (and start
  another), SIGKILL one executor, SIGSTOP shorter and longer than the lease,
  SIGTERM, partition, kill -9 and restart the server.
- The servers are ``tests/servers.py``'s, started for the run alone (the run
  kills them) and listening on the veth's address as well.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tenure.app import App
from tests.servers import (
    PostgresServer,
    RedisServer,
    ServerUnavailable,
    children,
    postgres_bin,
)

REPO = Path(__file__).resolve().parents[2]
APP_PATH = "tests.fault.soak_tasks:app"
FAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), "")


def can_skew() -> str | None:
    """Why clocks cannot be skewed here, or None."""
    if FAKETIME:
        return None
    return "libfaketime not found (/usr/lib/*/faketime/libfaketime.so.1; make system-deps)"


class Netns:
    """A network namespace joined to the host by a veth pair: host side
    ``10.213.N.1``, namespace side ``.2``. Setting the host side down cuts the
    cable: packets vanish, connections stay half-open."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.name, self.host_if, self.ns_if = f"tsoak-{tag}", f"ts{tag}h", f"ts{tag}w"
        self.host_ip = f"10.213.{random.randrange(256)}.1"
        self.ns_ip = ns_ip = self.host_ip[:-1] + "2"
        self.created = False
        self._ip("netns", "add", self.name)
        self.created = True
        self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if,
                 "netns", self.name)  # fmt: skip
        self._ip("addr", "add", f"{self.host_ip}/24", "dev", self.host_if)
        self._ip("link", "set", self.host_if, "up")
        self._ip("-n", self.name, "addr", "add", f"{ns_ip}/24", "dev", self.ns_if)
        self._ip("-n", self.name, "link", "set", self.ns_if, "up")
        self._ip("-n", self.name, "link", "set", "lo", "up")

    @staticmethod
    def unavailable() -> str | None:
        """Why namespaces cannot be made here, or None."""
        try:
            Netns().close()
        except (OSError, subprocess.CalledProcessError) as exc:
            return f"cannot create a network namespace: {exc}"
        return None

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    def cut(self, cut: bool) -> None:
        self._ip("link", "set", self.host_if, "down" if cut else "up")

    def vanish(self) -> None:
        """Take the namespace's end of the cable down, as a host that lost its
        power: the host side keeps its route, so what it sends there vanishes."""
        self._ip("-n", self.name, "link", "set", self.ns_if, "down")

    def close(self) -> None:
        if self.created:
            with contextlib.suppress(subprocess.CalledProcessError):
                self._ip("netns", "del", self.name)
            with contextlib.suppress(subprocess.CalledProcessError):
                self._ip("link", "del", self.host_if)


class SoakPostgres(PostgresServer):
    """A cluster of the run's own, listening on ``extra`` addresses too."""

    def __init__(self, extra: str | None) -> None:
        self.extra = extra
        super().__init__(listen=("127.0.0.1", *([extra] if extra else [])))

    def start(self) -> None:
        if self.extra:  # its clients come from the namespace's subnet
            hba = self.data / "pg_hba.conf"
            subnet = self.extra.rsplit(".", 1)[0] + ".0/24"
            line = f"host all all {subnet} trust\n"
            if line not in hba.read_text():
                with hba.open("a") as f:
                    f.write(line)
        super().start()


class SoakRedis(RedisServer):
    """A Redis of the run's own with an append-only file, bound to ``extra`` too."""

    def __init__(self, extra: str | None, appendfsync: str) -> None:
        listen = ("127.0.0.1", *([extra] if extra else []))
        super().__init__(appendonly=True, appendfsync=appendfsync, listen=listen)

    def kill9(self) -> None:
        self.kill()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@dataclass(frozen=True)
class Slot:
    pool: str
    netns: Netns | None = None
    skew: bool = False


class Fleet:
    """One live worker per slot, replaced when a fault ends it."""

    def __init__(self, directory: Path, url: str, queues: list[str], *, process_only: list[str],
                 slots: list[Slot],
                 concurrency: int, record: Callable[..., None]) -> None:  # fmt: skip
        self.directory, self.url, self.queues = directory, url, queues
        self.process_only = process_only
        self.slots, self.concurrency, self.record = slots, concurrency, record
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0
        self.skew_sign = 1
        self.app = App(url)
        self.live = [self.spawn(slot) for slot in slots]
        for proc in self.live:
            self.wait_registered(proc)

    def spawn(self, slot: Slot) -> subprocess.Popen[bytes]:
        url = self.url
        path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "TENURE_SOAK_EVENTS": str(self.directory), "PYTHONPATH": path}
        prefix: list[str] = []
        if slot.netns is not None:
            url = url.replace("127.0.0.1", slot.netns.host_ip)
            prefix = ["ip", "netns", "exec", slot.netns.name]
        if slot.skew:
            self.skew_sign = -self.skew_sign
            env.update(LD_PRELOAD=FAKETIME, FAKETIME=f"{self.skew_sign * 300:+d}",
                       FAKETIME_DONT_FAKE_MONOTONIC="1")  # fmt: skip
        env["TENURE_URL"] = url
        served = [q for q in self.queues if slot.pool == "process" or q not in self.process_only]
        queues = [arg for q in served for arg in ("--queue", q)]
        command = [*prefix, sys.executable, "-m", "tenure.cli", "--url", url, "worker", APP_PATH,
                   *queues, "--pool", slot.pool, "--concurrency", str(self.concurrency),
                   "--drain-timeout", "1", "--log-level", "warning"]  # fmt: skip
        self.started += 1
        with (self.directory / f"worker-{self.started}.log").open("wb") as log:
            proc = subprocess.Popen(command, env=env, start_new_session=True, cwd=REPO,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log)  # fmt: skip
        self.procs.append(proc)
        if slot.skew:
            now = time.time()
            self.record("skew", now, now, worker_pid=proc.pid, pids=[proc.pid])
        return proc

    def replace(self, index: int) -> None:
        self.live[index] = self.spawn(self.slots[index])
        self.wait_registered(self.live[index])

    def wait_registered(self, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
        """Wait until ``proc`` is registered (or gone), so that the next fault does
        not find it still starting: a worker that cannot reach storage at start exits."""

        def registered() -> bool:
            if proc.poll() is not None:
                return True
            with contextlib.suppress(Exception):  # storage may be restarting
                return any(w.pid == proc.pid for w in self.app.call(self.app.backend.workers()))
            return False

        wait_until(registered, timeout, f"worker {proc.pid} to register")

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait(30)
        self.app.close()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every live worker and wait for it to drain and exit."""
        for p in self.live:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout)


class Nemesis:
    """Does one fault at a time to the fleet or the server, and writes it down."""

    def __init__(self, directory: Path, rng: random.Random, *, lease_ttl: float,
                 sweep: float, server: SoakPostgres | SoakRedis | None) -> None:  # fmt: skip
        self.faults_file = (directory / "faults.jsonl").open("ab")
        self.rng, self.lease_ttl, self.sweep, self.server = rng, lease_ttl, sweep, server
        self.fleet: Fleet | None = None
        self.done: list[str] = []
        self.server_down = False

    def record(self, kind: str, started: float, ended: float, *, worker_pid: int | None = None,
               pids: list[int] | None = None) -> None:  # fmt: skip
        line = {"kind": kind, "started": started, "ended": ended, "worker_pid": worker_pid,
                "pids": pids or []}  # fmt: skip
        self.faults_file.write(orjson.dumps(line) + b"\n")
        self.faults_file.flush()
        self.done.append(kind)

    def kinds(self) -> list[str]:
        """The faults this run can do."""
        assert self.fleet is not None
        kinds = ["kill-worker", "stop-short", "stop-long", "term"]
        if any(s.pool == "process" for s in self.fleet.slots):
            kinds.append("kill-executor")
        if any(s.netns for s in self.fleet.slots):
            kinds.append("partition")
        return kinds

    def do(self, kind: str) -> None:
        getattr(self, kind.replace("-", "_"))()

    def _pick(self, where: Callable[[Slot], bool] = lambda s: True) -> int | None:
        assert self.fleet is not None
        fleet = self.fleet
        found = [i for i, s in enumerate(fleet.slots) if where(s) and fleet.live[i].poll() is None]
        return self.rng.choice(found) if found else None

    def _group(self, pid: int) -> list[int]:
        """The worker and its descendants: its zygote, and the executors it forked."""
        group = [pid]
        for parent in group:
            group += children(parent)
        return group

    def kill_worker(self) -> None:
        assert self.fleet is not None
        i = self._pick()
        if i is None:
            return
        proc = self.fleet.live[i]
        pids, now = self._group(proc.pid), time.time()
        os.kill(proc.pid, signal.SIGKILL)  # the supervisor only: its executors must follow
        proc.wait(30)
        self.record("kill-worker", now, now, worker_pid=proc.pid, pids=pids)
        self.fleet.replace(i)

    def kill_executor(self) -> None:
        assert self.fleet is not None
        i = self._pick(lambda s: s.pool == "process")
        if i is None:
            return
        sup = self.fleet.live[i].pid
        executors = [e for zygote in children(sup) for e in children(zygote)]
        if not executors:
            return
        pid, now = self.rng.choice(executors), time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.record("kill-executor", now, now, worker_pid=sup, pids=[pid])

    def _stop(self, kind: str, seconds: float) -> None:
        assert self.fleet is not None
        i = self._pick()
        if i is None:
            return
        pid = self.fleet.live[i].pid
        pids, started = self._group(pid), time.time()
        os.killpg(pid, signal.SIGSTOP)
        time.sleep(seconds)  # the fault itself: a freeze this long
        os.killpg(pid, signal.SIGCONT)
        self.record(kind, started, time.time(), worker_pid=pid, pids=pids)

    def stop_short(self) -> None:
        self._stop("stop-short", self.lease_ttl * 0.25)

    def stop_long(self) -> None:
        self._stop("stop-long", self.lease_ttl * 1.5 + self.sweep)

    def term(self) -> None:
        assert self.fleet is not None
        i = self._pick()
        if i is None:
            return
        proc = self.fleet.live[i]
        pids, started = self._group(proc.pid), time.time()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()  # a drain that never ends is for the checker's rows to show
            proc.wait(30)
        self.record("term", started, time.time(), worker_pid=proc.pid, pids=pids)
        self.fleet.replace(i)

    def partition(self) -> None:
        assert self.fleet is not None
        i = self._pick(lambda s: s.netns is not None)
        if i is None:
            return
        netns = self.fleet.slots[i].netns
        assert netns is not None
        pid = self.fleet.live[i].pid
        pids, started = self._group(pid), time.time()
        netns.cut(True)
        time.sleep(self.lease_ttl * 2)  # the fault itself: a cable cut this long
        netns.cut(False)
        self.record("partition", started, time.time(), worker_pid=pid, pids=pids)

    def kill_server(self) -> None:
        assert self.server is not None
        started = time.time()
        self.server_down = True
        self.server.kill9()
        time.sleep(self.rng.uniform(0.0, 0.5))  # the fault itself: down this long
        try:
            self.server.start()
        except ServerUnavailable as exc:  # the run's failure, not a missing server
            log = self.server.root / "server.log"
            tail = log.read_text()[-3000:] if log.exists() else ""
            raise AssertionError(f"the server would not start again: {exc}\n{tail}") from None
        self.server_down = False
        self.record("kill-server", started, time.time())

    def close(self) -> None:
        self.faults_file.close()


def server_for(kind: str, extra: str | None, appendfsync: str) -> SoakPostgres | SoakRedis | None:
    if kind == "postgres":
        if postgres_bin("initdb") is None:
            raise ServerUnavailable("PostgreSQL binaries not found")
        return SoakPostgres(extra)
    if kind == "redis":
        return SoakRedis(extra, appendfsync)
    return None
