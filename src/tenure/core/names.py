"""Validation of queue names, task names, idempotency keys and job ids."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from tenure.errors import InvalidInput

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
# Path segments of their own in a URL (RFC 3986): a page of a queue named so is unreachable.
DOT_SEGMENTS = frozenset({".", ".."})
KEY_MAX_LENGTH = 200
CONCURRENCY_KEY_MAX_LENGTH = 128
JOB_ID_MAX_LENGTH = 100
SHOWN_LENGTH = 60


# Names found valid, so that a worker's every cycle does not match them again.
_VALID: set[str] = set()
_VALID_MAX = 4096


def shown(value: object) -> str:
    """``repr(value)`` cut short for an error message: a bad value may be a
    megabyte, or an int too long for ``repr`` to write at all."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= SHOWN_LENGTH else text[: SHOWN_LENGTH - 4] + "…" + text[-3:]


def check_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid queue or task name, else raise InvalidInput."""
    if type(value) is str and value in _VALID:
        return value
    if not isinstance(value, str) or NAME_PATTERN.fullmatch(value) is None or value in DOT_SEGMENTS:
        raise InvalidInput(
            f"invalid {kind} name {shown(value)}: use 1 to 100 characters from "
            "letters, digits, '_', '.', ':' and '-', other than '.' and '..'"
        )
    if len(_VALID) < _VALID_MAX and type(value) is str:
        _VALID.add(value)
    return value


def is_text(value: str) -> bool:
    """Whether ``value`` can be stored as text: UTF-8 without NUL. A lone
    surrogate (how Python reads invalid UTF-8 off a command line) cannot."""
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def as_text(value: str) -> str:
    """``value`` as text any storage takes: a lone surrogate (a file name read
    with surrogateescape, say) written as its escape, ``\\udcff``, and a NUL
    (which PostgreSQL's text refuses) as ``\\x00``."""
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    if value.isascii():
        return value
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def check_key(value: object) -> str | None:
    """Return a valid idempotency key (or None)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > KEY_MAX_LENGTH or not is_text(value):
        raise InvalidInput(
            f"invalid key {shown(value)}: a key is a non-empty string of at most "
            f"{KEY_MAX_LENGTH} characters of valid UTF-8, without NUL"
        )
    return value


def check_concurrency_key(value: object) -> str | None:
    """Return a valid concurrency key (or None): printable text (no control
    characters), 1 to 128 characters, as a customer's or tenant's id is."""
    if value is None:
        return None
    if not (
        isinstance(value, str)
        and 0 < len(value) <= CONCURRENCY_KEY_MAX_LENGTH
        and value.isprintable()
        and is_text(value)
    ):
        raise InvalidInput(
            f"invalid concurrency_key {shown(value)}: a concurrency key is 1 to "
            f"{CONCURRENCY_KEY_MAX_LENGTH} printable characters of valid UTF-8 "
            "(no control characters)"
        )
    return value


def check_job_id(value: object) -> str:
    """Return ``value`` if it can be a job's id (one that does not exist is
    JobNotFound, later), else raise InvalidInput."""
    if not isinstance(value, str) or not 1 <= len(value) <= JOB_ID_MAX_LENGTH or not is_text(value):
        raise InvalidInput(
            f"invalid job id {shown(value)}: a job id is a string of 1 to "
            f"{JOB_ID_MAX_LENGTH} characters of valid UTF-8, without NUL"
        )
    return value


def check_job_ids(values: object) -> list[str] | None:
    """A list of valid job ids from an iterable of them (None stays None).
    A lone string is refused: it would be taken for its characters; so is a
    mapping, which would be taken for its keys."""
    if values is None:
        return None
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise InvalidInput(f"job ids must be a list of ids, got {shown(values)}")
    return [check_job_id(v) for v in values]
