"""One small adapter per library. Each module defines, from the run's
environment, the library's no-op and sleep handlers (writing to the side
channel, :mod:`harness.records`), a ``Client`` for the producer side, and
``worker_command(concurrency)``: the library's own worker command line, with
``concurrency`` jobs at once per process, or the library's defaults for None.

For the defaults workload each also defines an ``incr`` handler (the job is
one Redis ``INCR``, :mod:`harness.counter`), which its ``Client`` enqueues
when ``$BENCH_TASK`` is ``incr``, and ``DEFAULTS``: how its worker runs when
started with no concurrency or pool flags, as read from its code at the pinned
version (shown in the table).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

URL = os.environ.get("BENCH_URL", "")
QUEUE = os.environ.get("BENCH_QUEUE", "bench")
TASK = os.environ.get("BENCH_TASK", "noop")  # what the Client enqueues: noop, or incr


def script(name: str) -> str:
    """A console script of the benchmark's venv (the one running us)."""
    return str(Path(sys.executable).parent / name)
