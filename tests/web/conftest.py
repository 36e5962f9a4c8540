"""A real server for the web tests: ``tenure.web.asgi_app`` under uvicorn, on a
random loopback port, in a thread of the test process, over real storage."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from tenure import App
from tenure.web import asgi_app
from tenure.web.server import uvicorn_config


class Served:
    """One running server; ``client`` talks to it (the headers given, as a browser would)."""

    def __init__(
        self, app: App, asgi: Any = None, server: dict[str, Any] | None = None, **options: Any
    ) -> None:
        self.app = app
        # tenure serve's own settings (uvicorn_config), with ``server``'s changes.
        config = uvicorn_config(
            asgi or asgi_app(app, **options), host="127.0.0.1", port=0, log_level="warning",
            **{"timeout_graceful_shutdown": 1, **(server or {})},
        )  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            self.thread.join(0.005)
        self.port: int = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.clients: list[httpx.Client] = []

    async def _serve(self) -> None:
        try:
            await self.server.serve()
        finally:
            await self.app.aclose()

    def client(self, **headers: str) -> httpx.Client:
        c = httpx.Client(base_url=self.url, headers=headers, timeout=10)
        self.clients.append(c)
        return c

    def close(self) -> None:
        for c in self.clients:
            c.close()
        self.server.should_exit = True
        self.thread.join(10)
        assert not self.thread.is_alive(), "the test server did not stop"


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Served]]:
    """``serve(app, token=..., any_host=...)``: a server for ``app``, stopped at
    teardown; ``serve(app, asgi)`` serves ``asgi`` (which uses ``app``) instead;
    ``server={...}``: options of ``uvicorn_config`` (``forwarded_allow_ips``...)."""
    monkeypatch.delenv("TENURE_TOKEN", raising=False)
    started: list[Served] = []

    def start(app: App, asgi: Any = None, **options: Any) -> Served:
        served = Served(app, asgi, **options)
        started.append(served)
        return served

    yield start
    for served in reversed(started):
        served.close()


@pytest.fixture
def web_app(backend_url: str) -> Iterator[App]:
    app = App(backend_url)
    yield app
    app.close()


@pytest.fixture
def api(serve: Callable[..., Served], web_app: App) -> httpx.Client:
    """A client of a token-less server on loopback over fresh storage of each backend."""
    return serve(web_app).client()
