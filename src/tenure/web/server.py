"""How ``tenure serve`` runs its ASGI app under uvicorn: with limits a public
address survives, and forwarded headers trusted only from named proxies.

- ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are read only from the
  addresses ``forwarded_allow_ips`` names (none by default): from anyone
  else, a client would pick the address the login throttle counts against,
  and the scheme that makes the session cookie ``Secure``.
- A connection must send each request's headers within ``header_timeout``
  seconds of opening, or of its previous response: uvicorn's own keep-alive
  timeout starts only after a response, and its h11 protocol has no timeout
  for headers, so a client trickling a header line now and then would hold
  its socket forever.
- At most ``MAX_CONCURRENCY`` connections and tasks at once: past it, a new
  request gets 503 at once rather than exhausting the process's files.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from tenure.core.names import shown
from tenure.errors import InvalidInput

HEADER_TIMEOUT = 10.0  # seconds a connection has to send a request's headers
KEEP_ALIVE = 5  # seconds an idle connection stays open after a response
MAX_CONCURRENCY = 512  # connections and tasks at once; beyond: 503
# Seconds open event streams get to end when the server stops: they never end by themselves.
SHUTDOWN_GRACE = 2


def check_proxies(value: str | None) -> str | None:
    """``--forwarded-allow-ips``: addresses or networks, comma-separated (None: trust none)."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise InvalidInput(
                f"--forwarded-allow-ips: {shown(item)} is not an address; name the proxies "
                "that connect to this server, such as 127.0.0.1 or 10.0.0.0/8, comma-separated"
            ) from None
    return ",".join(items)


def uvicorn_config(
    asgi: Any,
    *,
    host: str,
    port: int,
    forwarded_allow_ips: str | None = None,
    header_timeout: float = HEADER_TIMEOUT,
    **options: Any,
) -> uvicorn.Config:
    """uvicorn's Config for ``asgi`` on ``host:port``, with the limits of the
    module's doc; ``options`` are uvicorn's (``root_path``, ``log_level``...)."""
    proxies = check_proxies(forwarded_allow_ips)
    settings: dict[str, Any] = {
        "limit_concurrency": MAX_CONCURRENCY,
        "timeout_keep_alive": KEEP_ALIVE,
        "server_header": False,
        "timeout_graceful_shutdown": SHUTDOWN_GRACE,
        **options,
    }
    return uvicorn.Config(
        asgi,
        host=host,
        port=port,
        http=header_deadline(AutoHTTPProtocol, header_timeout),
        proxy_headers=proxies is not None,
        forwarded_allow_ips=proxies,
        **settings,
    )


def header_deadline(base: type[asyncio.Protocol], seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol ``base`` (h11's or httptools'), closing a
    connection that has not sent a whole request's headers ``seconds`` after
    it opened or after its previous response. Both protocols make a new
    ``cycle`` when a request's headers are complete: the deadline is met when
    the cycle it was armed under has been replaced."""

    class Protocol(base):  # type: ignore[valid-type, misc]
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            # Armed first: a pipelined request may start (a new cycle) within.
            self._arm()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
            self.deadline = self.loop.call_later(seconds, self._expire, self.cycle)

        def _expire(self, cycle: object) -> None:
            if self.cycle is cycle and not self.transport.is_closing():
                self.transport.close()  # no request came in time: nothing to answer

    Protocol.__name__ = Protocol.__qualname__ = f"HeaderDeadline{base.__name__}"
    return Protocol
