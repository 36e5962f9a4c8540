"""The worker's identity as storage knows it: its id, and whether it is registered.

One object holds the id. Registering again (storage lost sight of the worker,
or a failed first try may have left the id half-held) takes a new one here,
and every part that speaks for the worker (the lease keeper's heartbeats,
the cycle's claims, the hooks and logs) reads it from here.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid


def new_worker_id() -> str:
    host = "".join(c if c.isalnum() or c in "-." else "-" for c in socket.gethostname())[:40]
    return f"{host or 'host'}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


class Identity:
    """The worker's current id; ``registered`` is clear while it registers again
    (nothing is claimed under an identity storage saw die)."""

    def __init__(self, worker_id: str | None = None) -> None:
        self.id = worker_id or new_worker_id()
        self.registered = asyncio.Event()

    def renew(self) -> str:
        """Become a new worker: a new id, not registered yet."""
        self.registered.clear()
        self.id = new_worker_id()
        return self.id
