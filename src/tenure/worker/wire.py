"""Frames between the supervisor and its executor processes: length-prefixed JSON.

JSON only: nothing that crosses a process boundary is ever unpickled.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import orjson

HEADER = struct.Struct("!I")
MAX_FRAME = 512 * 1024 * 1024

Message = dict[str, Any]


class WireError(Exception):
    """A frame that cannot be read: the other side is broken or not ours."""


def frame(message: Message) -> bytes:
    data = orjson.dumps(message)
    if len(data) > MAX_FRAME:
        raise WireError(f"frame of {len(data)} bytes exceeds {MAX_FRAME}")
    return HEADER.pack(len(data)) + data


def parse(data: bytes) -> Message:
    message = orjson.loads(data)
    if not isinstance(message, dict):
        raise WireError("a frame must hold a JSON object")
    return message


def size_of(header: bytes) -> int:
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise WireError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    return int(size)


def read_exactly(fd: int, n: int) -> bytes | None:
    """Read ``n`` bytes from a blocking fd; None at end of file."""
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> Message | None:
    """The next message from a blocking fd; None when the writer is gone."""
    header = read_exactly(fd, HEADER.size)
    if header is None:
        return None
    body = read_exactly(fd, size_of(header))
    if body is None:
        return None
    return parse(body)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
