"""The worker's log on stderr, as text or as JSON lines (``--log-format``).

Library code only logs; this is the one place that configures handlers, for as
long as a command runs.
"""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

import click

LOG_FORMATS = click.Choice(["text", "json"], case_sensitive=False)
LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """One line per record, and under it, indented, the handler's traceback
    that a record about a failed attempt carries (``traceback``)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT, datefmt="%Y-%m-%d %H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        traceback = getattr(record, "traceback", None)
        if isinstance(traceback, str) and traceback.strip():
            text += "\n" + textwrap.indent(traceback.rstrip(), "    ")
        return text


def json_formatter() -> logging.Formatter:
    """JSON lines: time (ISO 8601, UTC), level, logger, message, and every
    structured field a record carries (job_id, task, queue, attempt, fence,
    worker, traceback, …)."""
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
    )


@contextmanager
def stderr_logging(level: str, form: str = "text") -> Iterator[None]:
    """``level`` and up to stderr, as ``form`` (text or json), while the command runs."""
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(json_formatter() if form.lower() == "json" else TextFormatter())
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The pool warns at each of its reconnection attempts, several lines each,
    # for as long as the server is down: the worker says the fault once itself.
    pool = logging.getLogger("psycopg.pool")
    old_pool_level = pool.level
    pool.setLevel(max(logging.ERROR, root.level))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        pool.setLevel(old_pool_level)
