"""Run, many times, a script that enqueues from ``asyncio.run`` and never closes
its App; say how many runs failed to exit within a bound (issue #36, item 10).

    python unclosed_app.py URL RUNS AT_ONCE BOUND

Each run is a process forked from this one once tenure and the backend are
imported (so that a run costs its own work, not an interpreter's start): it
runs ``main()`` with ``asyncio.run``, collects garbage with ResourceWarnings
shown, and exits. A run whose ``asyncio.run`` still closes its loop BOUND
seconds after ``main()`` returned dumps its threads' stacks to stderr and exits
1 (faulthandler's watchdog). Prints one JSON line: runs, failed, and the
longest exit (from ``main()``'s return to ``asyncio.run``'s).
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import json
import os
import select
import sys
import time
import warnings

import tenure

BACKSTOP = 60.0  # seconds a batch may take in all, should a watchdog fail


async def main(url: str, bound: float) -> float:
    app = tenure.App(url)
    await app.aenqueue("t", {"i": 0})
    # A few at once: more connections than the first, made while others wait.
    await asyncio.gather(*(app.aenqueue("t", {"i": i}) for i in range(1, 5)))
    faulthandler.dump_traceback_later(bound, exit=True)
    return time.monotonic()


def run(url: str, bound: float, report: int) -> None:
    """One run, in a forked child: never returns."""
    code = 1
    try:
        warnings.simplefilter("always", ResourceWarning)
        returned = asyncio.run(main(url, bound))
        exited = time.monotonic()
        faulthandler.cancel_dump_traceback_later()
        os.write(report, f"{exited - returned:.3f}\n".encode())
        gc.collect()  # what outlived its loop warns now
        code = 0
    finally:
        sys.stderr.flush()
        os._exit(code)


def wait(pids: list[int]) -> int:
    """Wait for the children (each ends itself); how many failed."""
    failed = 0
    poll = select.poll()
    fds = {os.pidfd_open(pid): pid for pid in pids}
    for fd in fds:
        poll.register(fd, select.POLLIN)
    deadline = time.monotonic() + BACKSTOP
    while fds and time.monotonic() < deadline:
        for fd, _ in poll.poll(1000 * max(0.0, deadline - time.monotonic())):
            poll.unregister(fd)
            os.close(fd)
            _, status = os.waitpid(fds.pop(fd), 0)
            failed += os.waitstatus_to_exitcode(status) != 0
    for fd, pid in fds.items():
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)
    return failed + len(fds)


def main_loop(url: str, runs: int, at_once: int, bound: float) -> None:
    tenure.App(url)  # imports the backend's modules here, once
    reading, report = os.pipe()
    failed = 0
    for start in range(0, runs, at_once):
        pids = []
        for _ in range(min(at_once, runs - start)):
            pid = os.fork()
            if pid == 0:
                os.close(reading)
                run(url, bound, report)
            pids.append(pid)
        failed += wait(pids)
    os.close(report)
    with os.fdopen(reading) as exits:
        slowest = max((float(line) for line in exits), default=0.0)
    print(json.dumps({"runs": runs, "failed": failed, "slowest_exit": slowest}))


if __name__ == "__main__":
    main_loop(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
