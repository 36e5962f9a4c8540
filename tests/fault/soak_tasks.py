"""The soak's handlers, run by real ``tenure worker`` processes
(``tests.fault.soak_tasks:app``), and the side channel they write.

Every handler appends JSON lines to a file of its own process under
``$TENURE_SOAK_EVENTS`` (one ``os.write`` per line on an ``O_APPEND`` file, so
threads of one process never interleave): ``start`` when it begins, ``tick``
while it runs, ``end`` when it returns or raises. The history checker
(``tests/fault/history.py``) reads them beside what storage holds. Times are
``time.monotonic()`` (one clock for every process of the machine; a worker
under libfaketime keeps it, see ``FAKETIME_DONT_FAKE_MONOTONIC``) and
``time.time()``. A workflow's step also writes its workflow's id (``wf``); the
fan-in callback writes what it read of its upstream (``upstream``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import orjson

import tenure
from tenure.chaos.gil import SLOW_PATTERN

app = tenure.App()

TICK = 0.2  # a long handler proves it still runs this often
UPSTREAM_PATIENCE = 30.0  # seconds a fan-in retries reading its upstream (a server restarts)

_files: dict[int, int] = {}
# Under libfaketime with a real monotonic clock, time.sleep() fails with EINVAL
# (its clock_nanosleep is rewritten); waiting on an event never set is not.
_never = threading.Event()


def record(event: str, how: str | None = None, **more: Any) -> None:
    """Append one side-channel line about the running attempt."""
    job = tenure.current_job()
    line = orjson.dumps({
        "ev": event, "job": job.id, "fence": job.fence, "attempt": job.attempt,
        "tag": job.args.get("tag"), "pid": os.getpid(), "mono": time.monotonic(),
        "wall": time.time(), "how": how, "wf": job.workflow, **more,
    })  # fmt: skip
    os.write(_file(), line + b"\n")


def _file() -> int:
    pid = os.getpid()
    fd = _files.get(pid)
    if fd is None:
        path = os.path.join(os.environ["TENURE_SOAK_EVENTS"], f"events.{pid}.jsonl")
        fd = _files[pid] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    return fd


def _done() -> dict[str, Any]:
    record("end", "ok")
    return {"fence": tenure.current_job().fence, "pid": os.getpid()}


@app.task(name="soak.run")
def run(tag: str, kind: str, seconds: float, gil: int = 0) -> dict[str, Any]:
    """A healthy handler: sleeps, or holds the GIL in regex calls of ``gil`` size."""
    record("start")
    deadline = time.monotonic() + seconds
    next_tick = time.monotonic() + TICK
    while (now := time.monotonic()) < deadline:
        if gil:
            SLOW_PATTERN.match("a" * gil + "b")
        else:
            _never.wait(max(0.0, min(deadline, next_tick) - now))
        if (now := time.monotonic()) >= next_tick:
            record("tick")
            next_tick = now + TICK
    return _done()


@app.task(name="soak.fanin")
def fanin(tag: str, kind: str, seconds: float) -> dict[str, Any]:
    """A workflow's fan-in callback: writes down the fence of each upstream
    result it was handed (None for a ``Failed``), then runs as ``soak.run``."""
    record("start")
    fences = [v.get("fence") if isinstance(v, dict) else None for v in _upstream()]
    record("upstream", fences=fences)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        _never.wait(min(left, TICK))
        record("tick")
    return _done()


def _upstream() -> list[Any]:
    """The upstream values; read through the worker, which may have lost its
    server for a while (a kill-server fault): an error here is no handler's."""
    give_up = time.monotonic() + UPSTREAM_PATIENCE
    while True:
        try:
            return tenure.current_job().upstream
        except tenure.LeaseLost:
            raise  # this attempt is over: no use waiting
        except Exception:
            if time.monotonic() > give_up:
                raise
            _never.wait(0.2)


@app.task(name="soak.arun")
async def arun(tag: str, kind: str, seconds: float) -> dict[str, Any]:
    """A healthy async handler."""
    record("start")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(left, TICK))
        record("tick")
    return _done()


@app.task(name="soak.flaky")
def flaky(tag: str, kind: str, raises: int) -> dict[str, Any]:
    """Raises in its first ``raises`` attempts, then succeeds."""
    record("start")
    if tenure.current_job().attempt <= raises:
        record("end", "raised")
        raise ValueError(f"{tag}: attempt {tenure.current_job().attempt} fails on purpose")
    return _done()


@app.task(name="soak.fail")
def fail(tag: str, kind: str) -> None:
    """Gives up for good: the job is dead at once (``dead_reason`` error)."""
    record("start")
    record("end", "fail")
    raise tenure.Fail(f"{tag}: fails for good on purpose")


@app.task(name="soak.settle")
def settle(tag: str, kind: str, seconds: float) -> None:
    """A healthy handler that completes its job in its own transaction, then
    writes down that the completion was acknowledged (``settled``): from then
    on storage must hold it completed, whatever happens to its server."""
    record("start")
    _never.wait(seconds)
    record("end", "ok")
    job = tenure.current_job()
    with job.transaction({"fence": job.fence, "pid": os.getpid()}):
        pass
    record("settled")
