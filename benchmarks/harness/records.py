"""The side channel every library's handler writes to, so that completions are
counted the same way for all of them, outside the library under test.

A handler appends one fixed-size record per event to a file of its own process
(``$BENCH_RECORDS/<pid>.bin``): the job's index, the event (started, ended),
the wall-clock time and the pid. One ``write(2)`` on an ``O_APPEND`` descriptor:
a few microseconds, the same for every library, no load on the server under
test. The harness counts records by file size and reads them to find lost and
duplicated jobs and the handler's start time of each (latency).
"""

from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

RECORD = struct.Struct("<iidi")  # index, event, time, pid
STARTED, ENDED = 0, 1

_fd: int | None = None
_pid = 0


def record(index: int, event: int = STARTED) -> None:
    """Called by the handlers, in the worker processes."""
    global _fd, _pid
    pid = os.getpid()
    if _fd is None or _pid != pid:  # first call, or a forked child
        path = os.path.join(os.environ["BENCH_RECORDS"], f"{pid}.bin")
        _fd, _pid = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), pid
    os.write(_fd, RECORD.pack(index, event, time.time(), pid))


@dataclass(frozen=True, slots=True)
class Record:
    index: int
    event: int
    t: float
    pid: int


def count(directory: Path) -> int:
    """How many records there are (cheap: file sizes only)."""
    total = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            total += entry.stat().st_size // RECORD.size
    return total


def read(directory: Path) -> list[Record]:
    out: list[Record] = []
    for path in directory.glob("*.bin"):
        data = path.read_bytes()
        whole = len(data) - len(data) % RECORD.size  # a record being written
        out.extend(Record(*fields) for fields in RECORD.iter_unpack(data[:whole]))
    return out


def starts(directory: Path) -> dict[int, list[Record]]:
    """Every start of every job, by index, earliest first."""
    by_index: dict[int, list[Record]] = {}
    for r in sorted(read(directory), key=lambda r: r.t):
        if r.event == STARTED:
            by_index.setdefault(r.index, []).append(r)
    return by_index
