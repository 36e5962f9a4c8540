"""The login form's sessions: a random id in the cookie, and the server's
memory of which ids are live and until when.

A session ends at its expiry (``SESSION_HOURS`` after the login by default),
at its logout, or when the server stops; a new token needs a restart, so it
ends them all. The memory is this process's: a server run as several
processes (an app mounted under a multi-process server) needs its clients
to return to the process that logged them in, or the bearer header.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from tenure.core.names import shown
from tenure.errors import InvalidInput

SESSION_HOURS = 12.0  # how long a login lasts, by default
MAX_SESSIONS = 10_000  # live sessions remembered: past it, the oldest ends
COOKIE_PREFIX = "tenure_session"


def check_session_hours(hours: object) -> float:
    """A session's lifetime in hours: a number above 0, at most a year."""
    real = isinstance(hours, int | float) and not isinstance(hours, bool)
    if real and math.isfinite(hours) and 0 < hours <= 24 * 366:  # type: ignore[operator, arg-type]
        return float(hours)  # type: ignore[arg-type]
    raise InvalidInput(f"session hours must be above 0 and at most 8784, got {shown(hours)}")


def cookie_name(port: int | None) -> str:
    """The session cookie's name for a server on ``port``. Browsers send a
    host's cookies to every port of it: two servers on one host must not
    read, overwrite or log out each other's sessions."""
    return COOKIE_PREFIX if port is None else f"{COOKIE_PREFIX}_{port}"


def _key(session_id: str) -> bytes:
    # The ids are kept as digests: a lookup's timing tells nothing of a live id.
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).digest()


class Sessions:
    """Live sessions: their ids' digests, each with its expiry."""

    def __init__(
        self,
        hours: float = SESSION_HOURS,
        clock: Callable[[], float] = time.monotonic,
        limit: int = MAX_SESSIONS,
    ) -> None:
        self.seconds = check_session_hours(hours) * 3600
        self.clock, self.limit = clock, limit
        self.expiry: OrderedDict[bytes, float] = OrderedDict()  # oldest first

    def start(self) -> str:
        """A new session's id, live for ``hours``."""
        session_id = secrets.token_urlsafe(32)
        self.expiry[_key(session_id)] = self.clock() + self.seconds
        while len(self.expiry) > self.limit:  # memory stays bounded
            self.expiry.popitem(last=False)
        return session_id

    def live(self, session_id: str) -> bool:
        """Whether ``session_id`` is a session that has not expired nor ended."""
        key = _key(session_id)
        expiry = self.expiry.get(key)
        if expiry is None:
            return False
        if expiry <= self.clock():
            del self.expiry[key]
            return False
        return True

    def end(self, session_id: str) -> None:
        """Log ``session_id`` out: its cookie is worth nothing from now on."""
        self.expiry.pop(_key(session_id), None)
