"""What a public server must survive: clients that claim another address
(``X-Forwarded-For``) or scheme, event streams opened all at once, and
connections that never finish their request's headers."""

from __future__ import annotations

import asyncio
import contextlib
import re
import select
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tenure import App
from tenure.web import guard, sse
from tests.web.conftest import Served

TOKEN = "t0ken-of-the-tests-0123456789"
WRONG = "wrong-token-0123456789"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "serve.md"


@pytest.fixture
def sqlite_app(tmp_path: Path) -> Iterator[App]:
    app = App(f"sqlite:///{tmp_path / 'tenure.db'}")
    yield app
    app.close()


def forwarded(address: str, token: str = WRONG) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "x-forwarded-for": address}


def test_x_forwarded_for__from_an_untrusted_client_is_ignored_by_the_throttle(
    serve: Callable[..., Served], sqlite_app: App
) -> None:
    client = serve(sqlite_app, token=TOKEN).client()
    for i in range(guard.LOGIN_FAILURES):  # each "from" another address
        assert client.get("/api/queues", headers=forwarded(f"203.0.113.{i}")).status_code == 401
    # All counted against the one real address: a new claimed one changes nothing.
    refused = client.get("/api/queues", headers=forwarded("198.51.100.1", TOKEN))
    assert refused.status_code == 429


def test_x_forwarded_for__from_a_named_proxy_is_the_throttled_address(
    serve: Callable[..., Served], sqlite_app: App
) -> None:
    behind = serve(sqlite_app, token=TOKEN, server={"forwarded_allow_ips": "127.0.0.1"})
    proxy = behind.client()
    for _ in range(guard.LOGIN_FAILURES):
        assert proxy.get("/api/queues", headers=forwarded("203.0.113.1")).status_code == 401
    assert proxy.get("/api/queues", headers=forwarded("203.0.113.1", TOKEN)).status_code == 429
    assert proxy.get("/api/queues", headers=forwarded("203.0.113.2", TOKEN)).status_code == 200


def nginx_blocks() -> list[str]:
    return re.findall(r"```nginx\n(.*?)```", DOCS.read_text(), re.DOTALL)


def test_behind_the_docs_proxy__the_session_cookie_is_secure(
    serve: Callable[..., Served], sqlite_app: App
) -> None:
    """The docs' proxy snippets and flags, as nginx would apply them to an
    https request of 203.0.113.7 for ops.example.com."""
    text = DOCS.read_text()
    [proxies] = set(re.findall(r"--forwarded-allow-ips ([0-9.:,/]+)", text))
    hosts = set(re.findall(r"--allow-host ([a-z0-9.-]+)", text))
    assert hosts == {"ops.example.com"}
    server = serve(sqlite_app, token=TOKEN, hosts=hosts,
                   server={"forwarded_allow_ips": proxies})  # fmt: skip
    nginx = {"$host": "ops.example.com", "$scheme": "https", "$remote_addr": "203.0.113.7",
             "$proxy_add_x_forwarded_for": "203.0.113.7"}  # fmt: skip
    blocks = nginx_blocks()
    assert blocks
    for block in blocks:
        sent = dict(re.findall(r"proxy_set_header\s+(\S+)\s+(\S+);", block))
        headers = {name: nginx[value] for name, value in sent.items()}
        headers |= {"origin": "https://ops.example.com", "sec-fetch-site": "same-origin"}
        login = server.client(**headers).post("/login", data={"token": TOKEN})
        assert login.status_code == 303, block
        assert "; Secure" in login.headers["set-cookie"], block
    untrusting = serve(sqlite_app, token=TOKEN).client(**{"x-forwarded-proto": "https"})
    claimed = untrusting.post("/login", data={"token": TOKEN})
    assert "Secure" not in claimed.headers["set-cookie"]  # no proxy named: plain http


async def open_streams(url: str, count: int, path: str) -> list[int]:
    """``count`` streams opened at once: their statuses, once all answered."""
    limits = httpx.Limits(max_connections=count)
    async with (
        httpx.AsyncClient(base_url=url, timeout=20, limits=limits) as client,
        contextlib.AsyncExitStack() as streams,
    ):
        opened = await asyncio.gather(
            *(streams.enter_async_context(client.stream("GET", path)) for _ in range(count))
        )
        return [r.status_code for r in opened]


def test_streams_opened_at_once__are_held_to_the_limit_and_given_back(
    serve: Callable[..., Served], web_app: App
) -> None:
    url = serve(web_app).url
    bad = asyncio.run(open_streams(url, 40, "/api/events?queue=a%20b"))
    assert set(bad) <= {400, 503} and bad.count(400) >= sse.MAX_STREAMS
    # Their slots given back: 16 streams open now.
    codes = asyncio.run(open_streams(url, 40, "/api/events"))
    assert codes.count(200) == sse.MAX_STREAMS
    assert codes.count(503) == 40 - sse.MAX_STREAMS
    deadline = time.monotonic() + 10
    while (again := asyncio.run(open_streams(url, sse.MAX_STREAMS, "/api/events"))) != [
        200
    ] * sse.MAX_STREAMS:
        assert time.monotonic() < deadline, f"slots not given back: {again}"


def closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (without blocking)."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


def test_connections_slow_to_send_their_headers__are_closed(
    serve: Callable[..., Served], sqlite_app: App
) -> None:
    server = serve(sqlite_app, server={"header_timeout": 0.5})
    idle = socket.create_connection(("127.0.0.1", server.port))
    trickling = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
    kept_alive = socket.create_connection(("127.0.0.1", server.port))
    request = b"GET /api/queues HTTP/1.1\r\nHost: localhost\r\n\r\n"
    kept_alive.sendall(request)
    assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")  # then sends no more
    for sock in trickling:
        sock.sendall(b"GET /api/queues HTTP/1.1\r\nHost: localhost\r\n")
    open_ = [idle, *trickling, kept_alive]
    deadline = time.monotonic() + 10
    try:
        while not all(closed(s) for s in open_):
            assert time.monotonic() < deadline, "slow connections still open after 10 s"
            for sock in trickling:
                with contextlib.suppress(OSError):  # closed meanwhile
                    sock.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.1)
    finally:
        for sock in open_:
            sock.close()
    assert server.client().get("/api/queues").status_code == 200  # others still served
