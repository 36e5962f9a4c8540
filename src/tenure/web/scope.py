"""What a request's ASGI scope says: its path within this app, the app's root,
the client's address, and the name of this server's session cookie."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import Scope

from tenure.web.sessions import cookie_name


def route_path(scope: Scope) -> str:
    """The request's path within this app (mounted under ``root_path``, maybe)."""
    path: str = scope["path"]
    root = root_path(scope)
    return path[len(root) :] if root and path.startswith(root) else path


def root_path(scope: Scope) -> str:
    """Where this app is mounted: ``""`` at the server's root."""
    return str(scope.get("root_path", "")).rstrip("/")


def client_address(request: Request) -> str:
    """The client's address: the connection's peer, or behind a proxy the
    server trusts (``--forwarded-allow-ips``), the address it forwards."""
    return request.client.host if request.client else ""


def session_cookie(scope: Scope) -> str:
    """The session cookie's name: this server's own (see ``cookie_name``)."""
    server = scope.get("server")
    return cookie_name(server[1] if server and server[1] is not None else None)
