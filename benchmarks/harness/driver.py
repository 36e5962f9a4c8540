"""A library's producer, in a process of its own.

The harness never imports a library under test: for each run it starts
``python -m harness.driver peers.<library>`` with the run's environment
(``BENCH_URL``, ``BENCH_QUEUE``, ``BENCH_RECORDS``...) and sends it one JSON
command per line; the driver answers one JSON line each. So every library
runs isolated from the others, with its own configuration read at import,
exactly as its workers read it.

A peer module provides ``Client`` (``enqueue``, ``enqueue_bulk`` or
``BULK = None``, ``enqueue_sleep``, ``close``, optionally ``verify``) and
``worker_command(concurrency)`` (``None``: the library's defaults), and
``DEFAULTS``, how its worker runs at them (:mod:`peers`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]  # benchmarks/


class DriverError(Exception):
    pass


class Driver:
    """The harness's end: a running driver process."""

    def __init__(self, module: str, env: dict[str, str], log: Path) -> None:
        self.module = module
        with log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.driver", module],
                env=env,
                cwd=HERE,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self.log = log
        self.call("hello")

    def call(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = self.proc.stdout.readline()
        if not line:
            raise DriverError(f"{self.module} driver died (see {self.log})")
        reply = json.loads(line)
        if "error" in reply:
            raise DriverError(f"{self.module}: {op}: {reply['error']} (see {self.log})")
        return reply["value"]

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(DriverError):
                self.call("close")
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- the driver process ----------------------------------------------------


def _serve(module_name: str) -> None:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever a library prints goes to the log, not into the protocol
    module = importlib.import_module(module_name)
    client: Any = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        try:
            if op == "close":
                if client is not None:
                    client.close()
                out.write(json.dumps({"value": None}) + "\n")
                out.flush()
                return
            if client is None and op not in ("hello", "command", "defaults"):
                client = module.Client()
            value = _do(module, client, op, request)
            out.write(json.dumps({"value": value}) + "\n")
        except Exception as exc:
            import traceback

            traceback.print_exc()
            out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()


def _timed(fn: Any, indices: range) -> float:
    started = time.perf_counter()
    fn(indices)
    return time.perf_counter() - started


def _bulk(client: Any, start: int, stop: int, batch: int) -> None:
    for lo in range(start, stop, batch):
        client.enqueue_bulk(list(range(lo, min(lo + batch, stop))))


def _at(fn: Any, *args: Any) -> float:
    t = time.time()
    fn(*args)
    return t


def _do(module: Any, client: Any, op: str, a: dict[str, Any]) -> Any:
    ops: dict[str, Any] = {
        "hello": lambda: None,
        "command": lambda: module.worker_command(a["concurrency"]),
        "defaults": lambda: module.DEFAULTS,
        "bulk_api": lambda: module.Client.BULK,
        "enqueue": lambda: _timed(
            lambda r: [client.enqueue(i) for i in r], range(a["start"], a["stop"])
        ),
        "bulk": lambda: _timed(
            lambda r: _bulk(client, r.start, r.stop, a["batch"]), range(a["start"], a["stop"])
        ),
        "one": lambda: _at(client.enqueue, a["i"]),
        "sleep": lambda: _at(client.enqueue_sleep, a["i"], a["seconds"]),
        "paced": lambda: _paced(client, a["start"], a["n"], a["rate"]),
        "verify": lambda: client.verify(a["expected"]) if hasattr(client, "verify") else None,
    }
    if op not in ops:
        raise ValueError(f"unknown op {op}")
    return ops[op]()


def _paced(client: Any, start: int, n: int, rate: float) -> list[float]:
    """Enqueue ``n`` jobs at ``rate`` per second; the time each was sent."""
    sent: list[float] = []
    t0 = time.time()
    for k in range(n):
        due = t0 + k / rate
        pause = due - time.time()
        if pause > 0:
            time.sleep(pause)
        sent.append(time.time())
        client.enqueue(start + k)
    return sent


if __name__ == "__main__":
    _serve(sys.argv[1])
