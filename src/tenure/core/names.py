"""Validation of queue names, task names and idempotency keys."""

from __future__ import annotations

import re

from tenure.errors import InvalidInput

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
KEY_MAX_LENGTH = 200


# Names found valid, so that a worker's every cycle does not match them again.
_VALID: set[str] = set()
_VALID_MAX = 4096


def check_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid queue or task name, else raise InvalidInput."""
    if type(value) is str and value in _VALID:
        return value
    if not isinstance(value, str) or NAME_PATTERN.fullmatch(value) is None:
        raise InvalidInput(
            f"invalid {kind} name {value!r}: use 1 to 100 characters from "
            "letters, digits, '_', '.', ':' and '-'"
        )
    if len(_VALID) < _VALID_MAX and type(value) is str:
        _VALID.add(value)
    return value


def check_key(value: object) -> str | None:
    """Return a valid idempotency key (or None)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > KEY_MAX_LENGTH or "\x00" in value:
        raise InvalidInput(
            f"invalid key {value!r}: a key is a non-empty string of at most "
            f"{KEY_MAX_LENGTH} characters, without NUL"
        )
    return value
