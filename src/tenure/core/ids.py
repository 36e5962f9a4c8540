"""Job ids: time-ordered, globally unique, made without a round trip."""

from __future__ import annotations

import os
import time


def new_job_id() -> str:
    """A time-ordered, globally unique id (UUIDv7 layout: 48-bit ms time, then random)."""
    return new_job_ids(1)[0]


def new_job_ids(n: int) -> list[str]:
    """``n`` ids as :func:`new_job_id` makes them, with one read of randomness."""
    ms = f"{time.time_ns() // 1_000_000:012x}"
    head = f"{ms[:8]}-{ms[8:]}-7"  # 48-bit ms time, then version 7
    h = os.urandom(10 * n).hex()
    # 74 random bits per id: 12, then 2 under the variant (10 in its top bits), then 60
    v = _VARIANT
    return [f"{head}{h[i : i + 3]}-{v[h[i + 3]]}{h[i + 4 : i + 7]}-{h[i + 7 : i + 19]}"
            for i in range(0, 20 * n, 20)]  # fmt: skip


_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}
