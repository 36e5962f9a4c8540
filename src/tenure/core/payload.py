"""JSON encoding of arguments and results: JSON only on the wire, never pickle.

Whatever JSON cannot carry is refused here, the one encoder, rather than
changed on the way: orjson writes NaN and the infinities as ``null`` and a
datetime as a string, so a value would come back other than it went.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import orjson

from tenure.errors import InvalidInput

# Datetimes and dataclasses go to _refuse instead of being written as strings
# and objects; orjson refuses the other non-JSON types itself.
_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _refuse(value: object) -> Any:
    kind, module = type(value), type(value).__module__
    name = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    hint = ""
    if module == "datetime":
        hint = " (pass .isoformat() or .timestamp())"
    elif dataclasses.is_dataclass(value):
        hint = " (pass dataclasses.asdict() of it)"
    raise TypeError(f"a {name} is not JSON{hint}")


def encode(value: Any, *, what: str, limit: int) -> bytes:
    """Encode ``value`` as JSON bytes no longer than ``limit``, or raise InvalidInput."""
    try:
        text = orjson.dumps(value, default=_refuse, option=_STRICT).decode()
    except TypeError as exc:  # orjson's own message, or the one of _refuse
        raise InvalidInput(f"{what} must be JSON: {exc.__cause__ or exc}") from None
    # A NaN or an infinity is written as null: only then may the value differ
    # from what it reads back as, and only then is it searched (slowly).
    if "null" in text and value is not None and orjson.loads(text) != value:
        where = _non_finite(value, "")
        if where is not None:
            path, number = where
            raise InvalidInput(
                f"{what} must be JSON: {number} at {path or 'the top'} is not a JSON number"
            )
    # A copy of the right size: orjson's own bytes object keeps the heap
    # block of its 1 KiB buffer, so a batch of them kept at once grows the
    # heap that glibc gives back after each batch (a page fault every few
    # jobs: 2.6 us a payload kept, against 0.17 us copied).
    data = text.encode()
    if len(data) > limit:
        raise InvalidInput(
            f"{what} is {len(data)} bytes of JSON, more than the limit of {limit} bytes "
            "(max_payload); store large data elsewhere and pass a reference"
        )
    return data


def check(value: Any, *, what: str) -> None:
    """Raise InvalidInput unless ``value`` is JSON, whatever its size."""
    encode(value, what=what, limit=1 << 62)


def _non_finite(value: Any, path: str) -> tuple[str, float] | None:
    """Where the first NaN or infinity in ``value`` is (a path, and the number)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        if isinstance(v, float | dict | list | tuple):
            found = _non_finite(v, f"{path}[{k!r}]")
            if found is not None:
                return found
    return None


def encode_args(args: object, *, limit: int) -> bytes:
    """Encode a job's arguments: a JSON object whose keys are strings."""
    if not isinstance(args, dict):
        raise InvalidInput(
            f"job arguments must be a JSON object (a dict), got {type(args).__name__}"
        )
    for k in args:
        if not isinstance(k, str):
            raise InvalidInput(f"job argument names must be strings, got {k!r}")
    return encode(args, what="job arguments", limit=limit)


def decode(data: bytes | str | None) -> Any:
    return None if data is None else orjson.loads(data)
