"""One small adapter per library. Each module defines, from the run's
environment, the library's no-op and sleep handlers (writing to the side
channel, :mod:`harness.records`), a ``Client`` for the producer side, and
``worker_command(concurrency)``: the library's own worker command line, with
``concurrency`` jobs at once per process, or the library's defaults for None.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

URL = os.environ.get("BENCH_URL", "")
QUEUE = os.environ.get("BENCH_QUEUE", "bench")


def script(name: str) -> str:
    """A console script of the benchmark's venv (the one running us)."""
    return str(Path(sys.executable).parent / name)
