"""Workers of this host that wait for a storage connection, as ``tenure
health`` finds them.

A worker refused by a full server (``ServerFull``) holds no connection, so
storage cannot show it: while it waits it keeps a file in the system's
temporary directory, ``tenure-waiting-<pid>``, saying why, and removes it
once it gets one. A file whose process is gone (killed while waiting) is
not counted.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

PREFIX = "tenure-waiting-"


def _path(pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"{PREFIX}{pid}"


def mark(reason: str) -> None:
    """This process waits for a connection, for ``reason`` (one line)."""
    with contextlib.suppress(OSError):  # a probe's help, never a worker's failure
        _path(os.getpid()).write_text(reason)


def clear() -> None:
    """This process no longer waits."""
    _path(os.getpid()).unlink(missing_ok=True)


def waiting() -> dict[int, str]:
    """The processes of this host that wait, with their reason."""
    found = {}
    for path in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        pid = path.name.removeprefix(PREFIX)
        if _alive(pid):
            with contextlib.suppress(OSError):
                found[int(pid)] = path.read_text()
    return found


def _alive(pid: str) -> bool:
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True
