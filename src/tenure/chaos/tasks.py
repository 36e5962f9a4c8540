"""The handlers the chaos experiments run, in real worker processes.

Workers import this module as ``tenure.chaos.tasks:app``; its App reads
``$TENURE_URL`` like any other.
"""

from __future__ import annotations

import os
import time

import tenure
from tenure.chaos.gil import SLOW_PATTERN

app = tenure.App()


@app.task(name="chaos.sleep")
def sleep(seconds: float) -> dict[str, int]:
    """A healthy slow handler: it tells where it runs, then sleeps."""
    tenure.current_job().progress({"pid": os.getpid()})
    time.sleep(seconds)
    return {"pid": os.getpid()}


@app.task(name="chaos.regex")
def regex(seconds: float, size: int) -> dict[str, int]:
    """A healthy handler that holds the GIL: catastrophic regex backtracking, in
    calls that each hold it for a long while, until ``seconds`` have passed."""
    tenure.current_job().progress({"pid": os.getpid()})
    deadline = time.monotonic() + seconds
    calls = 0
    while time.monotonic() < deadline:
        SLOW_PATTERN.match("a" * size + "b")
        calls += 1
    return {"pid": os.getpid(), "calls": calls}
