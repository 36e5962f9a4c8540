"""A regex that holds the GIL: catastrophic backtracking, each extra character
doubling the time of one call (the chaos tasks' and the soak's GIL holder).
Apart from the tasks, so that sizing it builds no App."""

from __future__ import annotations

import re
import time

SLOW_PATTERN = re.compile(r"(a+)+$")


def regex_size_for(seconds: float) -> int:
    """How long a string makes one regex call hold the GIL for about ``seconds``."""
    size = 12
    while True:
        started = time.perf_counter()
        SLOW_PATTERN.match("a" * size + "b")
        if time.perf_counter() - started >= seconds / 2 or size > 40:
            return size + 1  # each extra character doubles the time
        size += 1
