"""``tenure serve``: the HTTP API and live events, under uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tenure.cli.common import CliError, open_app
from tenure.core.hosts import check_host_name, is_loopback
from tenure.core.urls import redacted
from tenure.errors import InvalidInput

ROOT_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file holding the token every request must present (default: TENURE_TOKEN). "
    "Needed to listen on any address but loopback.",
)
@click.option(
    "--allow-host",
    "hosts",
    multiple=True,
    metavar="NAME",
    help="With a token: a host name requests may be addressed to (besides localhost); "
    "repeat for more. Default: any.",
)
@click.option(
    "--forwarded-allow-ips",
    metavar="IPS",
    help="The proxies (addresses or networks, comma-separated) whose X-Forwarded-For and "
    "X-Forwarded-Proto are trusted. Default: none's.",
)
@click.option(
    "--session-hours",
    type=click.FloatRange(0, 24 * 366, min_open=True),
    default=12.0,
    show_default=True,
    help="How long a login at /login lasts.",
)
@click.option(
    "--root-path",
    default="",
    metavar="PREFIX",
    help="The path prefix a reverse proxy serves this under and strips, e.g. /tenure: "
    "links, redirects and the session cookie carry it.",
)
def serve(
    *,
    host: str,
    port: int,
    token_file: Path | None,
    hosts: tuple[str, ...],
    forwarded_allow_ips: str | None,
    session_hours: float,
    root_path: str,
) -> None:
    """Serve the JSON API and live events (see docs/serve.md).

    On loopback (the default) no token is needed. On any other address, a token
    (TENURE_TOKEN or --token-file) is, and every request must present it:
    ``Authorization: Bearer <token>``, or the session the login form at /login sets.
    """
    try:
        import uvicorn

        from tenure.web import asgi_app
        from tenure.web.server import check_proxies, uvicorn_config
    except ImportError as exc:
        raise CliError(
            f"tenure serve needs the web extra: pip install 'tenure[web]' ({exc})"
        ) from None
    token, source = _token(token_file)
    if token is None and not is_loopback(host):
        raise CliError(
            f"refusing to serve on {host} without a token: anyone who reaches it could "
            "change and delete jobs. Set TENURE_TOKEN or pass --token-file, or listen on "
            "127.0.0.1 (behind a reverse proxy, say)."
        )
    if hosts and token is None:
        raise CliError("--allow-host needs a token: without one, only localhost is answered")
    try:
        hosts = tuple(check_host_name(h) for h in hosts)
        proxies = check_proxies(forwarded_allow_ips)
    except InvalidInput as exc:
        raise CliError(str(exc)) from None
    root_path = _root_path(root_path)
    app = open_app(write=True)
    guard = asgi_app(app, token=token, hosts=hosts, session_hours=session_hours)
    config = uvicorn_config(guard, host=host, port=port, root_path=root_path,
                            forwarded_allow_ips=proxies, log_level="info")  # fmt: skip
    server = _quiet_exit(uvicorn.Server)(config)
    forwarded = f"trusted from {proxies}" if proxies else "ignored"
    click.echo(
        f"storage: {redacted(app.url)}; {guard.protection(source)}; forwarded headers: {forwarded}"
    )

    async def run() -> None:
        try:
            await server.serve()
        finally:
            await app.aclose()

    asyncio.run(run())


def _token(token_file: Path | None) -> tuple[str | None, str]:
    """The token in force and where it came from: the file when given (an
    empty one is refused, not taken for none), else TENURE_TOKEN, if set."""
    from tenure.web.guard import NEW_TOKEN_HINT, check_token

    token: str | None
    if token_file is not None:
        token, source = token_file.read_text(errors="surrogateescape").strip(), str(token_file)
        if not token:
            raise CliError(f"{source}: the token file is empty; make a token with: "
                           f"{NEW_TOKEN_HINT}")  # fmt: skip
    else:
        token, source = os.environ.get("TENURE_TOKEN") or None, "TENURE_TOKEN"
    if token is None:
        return None, ""
    try:
        return check_token(token), source
    except InvalidInput as exc:
        raise CliError(f"{source}: {exc}") from None


def _root_path(given: str) -> str:
    """``--root-path``: '' or '/' and path segments, without a trailing '/'."""
    root = given.rstrip("/")
    if root and not ROOT_PATH.fullmatch(root):
        raise CliError(
            f"--root-path {given!r}: give the prefix the proxy serves under, such as "
            "/tenure (a '/', then letters, digits, '-', '_', '.', '~' and more '/')"
        )
    return root


def _quiet_exit(server_class: type[Any]) -> type[Any]:
    """uvicorn's server, except that SIGINT or SIGTERM ends it with exit code 0
    once it stopped and storage is closed: uvicorn raises the signal again
    when it stopped, which would kill the process before storage is closed."""

    class Server(server_class):  # type: ignore[misc]
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            stops = (signal.SIGINT, signal.SIGTERM)
            originals = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
            try:
                yield
            finally:
                for sig, handler in originals.items():
                    signal.signal(sig, handler)

    return Server
