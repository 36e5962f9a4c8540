"""What a handler raises to decide its job's fate itself.

They are not errors of tenure's (no :class:`~tenure.errors.TenureError`): a
handler raises them on purpose, and the worker reads them as its decision.
"""

from __future__ import annotations

from tenure.core.values import check_seconds


class Retry(Exception):
    """Raised by a handler to retry its job explicitly, optionally after ``in_`` seconds
    (at most ten years: ``tenure.core.values.MAX_SECONDS``).

    The attempt counts against ``max_attempts``.
    """

    def __init__(self, in_: float | None = None, reason: str = "") -> None:
        if in_ is not None:
            check_seconds("Retry(in_=...)", in_)
        self.in_ = in_
        self.reason = reason
        super().__init__(reason or f"retry requested (in {in_} s)")


class Fail(Exception):
    """Raised by a handler to send its job straight to the dead-letter queue."""
