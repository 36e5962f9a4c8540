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
from tenure.core.urls import redacted
from tenure.errors import InvalidInput

# Seconds open event streams get to end when the server stops: they never end by themselves.
SHUTDOWN_GRACE = 2
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
    "--root-path",
    default="",
    metavar="PREFIX",
    help="The path prefix a reverse proxy serves this under and strips, e.g. /tenure: "
    "links, redirects and the session cookie carry it.",
)
def serve(host: str, port: int, token_file: Path | None, root_path: str) -> None:
    """Serve the JSON API and live events (see docs/serve.md).

    On loopback (the default) no token is needed. On any other address, a token
    (TENURE_TOKEN or --token-file) is, and every request must present it:
    ``Authorization: Bearer <token>``, or the session the login form at /login sets.
    """
    try:
        import uvicorn

        from tenure.web import asgi_app
        from tenure.web.guard import check_token, is_loopback
    except ImportError as exc:
        raise CliError(
            f"tenure serve needs the web extra: pip install 'tenure[web]' ({exc})"
        ) from None
    token = token_file.read_text().strip() if token_file else os.environ.get("TENURE_TOKEN")
    if token:
        try:
            check_token(token)
        except InvalidInput as exc:
            where = str(token_file) if token_file else "TENURE_TOKEN"
            raise CliError(f"{where}: {exc}") from None
    elif not is_loopback(host):
        raise CliError(
            f"refusing to serve on {host} without a token: anyone who reaches it could "
            "change and delete jobs. Set TENURE_TOKEN or pass --token-file, or listen on "
            "127.0.0.1 (behind a reverse proxy, say)."
        )
    root_path = _root_path(root_path)
    app = open_app(write=True)
    config = uvicorn.Config(
        asgi_app(app, token=token or None),
        host=host,
        port=port,
        root_path=root_path,
        server_header=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE,
        log_level="info",
    )
    server = _quiet_exit(uvicorn.Server)(config)
    click.echo(f"storage: {redacted(app.url)}; token: {'required' if token else 'none'}")

    async def run() -> None:
        try:
            await server.serve()
        finally:
            await app.aclose()

    asyncio.run(run())


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
