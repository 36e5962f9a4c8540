"""How jobs, times and errors are written for people: the same in the CLI's
tables and the dashboard's pages."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import orjson

from tenure.core.workflows import Workflow
from tenure.job import Job

SUMMARY_LENGTH = 80  # an error's one-line summary in a table


def when(ts: float | None) -> str:
    """An epoch time as local ISO time without microseconds; ``-`` for none.
    A time no date can show (stored before times were bounded, or by hand)
    is shown as its number, so that one such job does not break a listing."""
    if ts is None:
        return "-"
    try:
        return datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")
    except (OverflowError, ValueError, OSError, TypeError):
        return f"{ts!r} (epoch s)"


def seconds(duration: float | None) -> str:
    try:
        return "-" if duration is None else f"{duration:.2f} s"
    except (TypeError, ValueError):
        return repr(duration)


def to_json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def summary(error: str | None) -> str:
    """One line of an error: a traceback's last line (the exception), else the first line."""
    if not error:
        return ""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[0]
    if line.startswith("Traceback"):
        line = [x for x in lines if x != "[truncated]"][-1]
    return line if len(line) <= SUMMARY_LENGTH else line[: SUMMARY_LENGTH - 1] + "…"


def job_dict(job: Job) -> dict[str, Any]:
    return dataclasses.asdict(job)


def workflow_dict(workflow: Workflow) -> dict[str, Any]:
    return dataclasses.asdict(workflow)
