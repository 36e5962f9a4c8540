"""Worker processes: start them, find their trees, read their CPU time from
``/proc/<pid>/stat``, kill them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Stat:
    ppid: int
    ticks: int  # utime + stime + cutime + cstime: its own CPU and its reaped children's


def stats() -> dict[int, Stat]:
    out: dict[int, Stat] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command: state ppid pgrp ... utime(11) stime(12) cutime(13) cstime(14)
        ticks = sum(int(x) for x in fields[11:15])
        out[int(entry.name)] = Stat(int(fields[1]), ticks)
    return out


def tree(roots: Iterable[int], table: dict[int, Stat] | None = None) -> set[int]:
    """The roots and all their living descendants."""
    table = stats() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, st in table.items():
        children.setdefault(st.ppid, []).append(pid)
    found: set[int] = set()
    todo = [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def cpu_seconds(roots: Iterable[int]) -> float:
    """CPU time of the trees under ``roots`` (a reaped child counts in its parent)."""
    table = stats()
    return sum(table[p].ticks for p in tree(roots, table)) / TICK


class Workers:
    """The worker processes of one run, each in its own session."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.max_processes = 0

    def start(self, argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
        log = (self.logs / f"worker-{len(self.procs)}.log").open("ab")
        with log:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def sample(self) -> int:
        """Count the processes the workers have now; remember the most seen."""
        n = len(tree(self.pids))
        self.max_processes = max(self.max_processes, n)
        return n

    def cpu(self) -> float:
        return cpu_seconds(self.pids)

    def holder(self, pid: int) -> subprocess.Popen[bytes] | None:
        """The worker whose tree ``pid`` belongs to."""
        table = stats()
        for proc in self.procs:
            if pid in tree([proc.pid], table):
                return proc
        return None

    def died(self) -> list[int]:
        return [p.returncode for p in self.procs if p.poll() is not None]

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker's whole tree at once, as when its container dies."""
        members = tree([proc.pid])
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)
            proc.wait()
