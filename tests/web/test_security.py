"""Who may use the server: the token, its session cookie, CSRF, hosts, headers,
secrets and escaping. The rules are the server's, not a backend's: SQLite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result
from starlette.applications import Starlette
from starlette.routing import Mount

from tenure import App
from tenure.cli import cli
from tenure.errors import InvalidInput
from tenure.web import asgi_app, guard
from tenure.web.sessions import cookie_name
from tests.conftest import PostgresServer
from tests.servers import free_port, wait_port
from tests.web.conftest import Served

TOKEN = "t0ken-of-the-tests-0123456789"
SECRET = "hunter2-in-the-url"
XSS = "<script>alert('x')</script>"


@pytest.fixture
def sqlite_app(tmp_path: Path) -> Iterator[App]:
    app = App(f"sqlite:///{tmp_path / 'tenure.db'}")
    yield app
    app.close()


@pytest.fixture
def guarded(serve: Callable[..., Served], sqlite_app: App) -> Served:
    return serve(sqlite_app, token=TOKEN)


def security_headers_in(response: httpx.Response) -> None:
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"


def test_without_the_token__every_request_gets_401(guarded: Served, sqlite_app: App) -> None:
    anonymous = guarded.client()
    for method, path in [("GET", "/api/queues"), ("GET", "/api/openapi.json"),
                         ("GET", "/api/events"), ("POST", "/api/jobs"),
                         ("POST", "/api/workflows"), ("GET", "/metrics")]:  # fmt: skip
        response = anonymous.request(method, path, json={"task": "t"})
        assert response.status_code == 401, path
        assert response.headers["www-authenticate"].startswith("Bearer")
        security_headers_in(response)
    wrong = guarded.client(authorization=f"Bearer {TOKEN}x").get("/api/queues")
    assert wrong.status_code == 401
    page = anonymous.get("/", headers={"accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert sqlite_app.jobs().jobs == []
    ok = guarded.client(authorization=f"Bearer {TOKEN}").get("/api/queues")
    assert ok.status_code == 200


def test_login_form__sets_an_httponly_strict_session_cookie(guarded: Served) -> None:
    browser = guarded.client()
    form = browser.get("/login")
    assert form.status_code == 200 and 'name="token"' in form.text and "<script" not in form.text
    assert browser.post("/login", data={"token": "wrong-token-0123456789"}).status_code == 401
    assert browser.post("/login").status_code == 401
    assert browser.post("/login", data={"token": "x" * 5000}).status_code == 413
    login = browser.post("/login", data={"token": TOKEN})
    assert login.status_code == 303
    cookie = login.headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(guarded.port)}=") and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert browser.get("/api/queues").status_code == 200  # the cookie, now
    same_site = {"sec-fetch-site": "same-origin", "origin": guarded.url}
    created = browser.post("/api/jobs", json={"task": "t"}, headers=same_site)
    assert created.status_code == 201


def test_logout__clears_the_session_from_a_same_site_post_only(guarded: Served) -> None:
    browser = guarded.client()
    browser.post("/login", data={"token": TOKEN})
    page = browser.get("/", headers={"accept": "text/html"})
    assert 'action="/logout"' in page.text
    assert browser.get("/logout").status_code == 405
    forged = browser.post("/logout", headers={"sec-fetch-site": "cross-site"})
    assert forged.status_code == 403
    assert browser.get("/api/queues").status_code == 200  # still logged in
    same_site = {"sec-fetch-site": "same-origin", "origin": guarded.url}
    out = browser.post("/logout", headers=same_site)
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert out.headers["set-cookie"].startswith(f'{cookie_name(guarded.port)}="";')
    assert "Path=/;" in out.headers["set-cookie"]
    assert browser.get("/api/queues").status_code == 401


def test_wrong_tokens__past_the_limit_get_429_even_with_the_right_one(guarded: Served) -> None:
    browser = guarded.client()
    for _ in range(guard.LOGIN_FAILURES - 1):
        assert browser.post("/login", data={"token": "wrong-token-0123456789"}).status_code == 401
    wrong_bearer = guarded.client(authorization="Bearer wrong-token-0123456789")
    assert wrong_bearer.get("/api/queues").status_code == 401  # the last failure allowed
    throttled = browser.post("/login", data={"token": TOKEN})
    assert throttled.status_code == 429 and "try again in" in throttled.text
    assert 0 < int(throttled.headers["retry-after"]) <= guard.LOGIN_WINDOW
    right_bearer = guarded.client(authorization=f"Bearer {TOKEN}").get("/api/queues")
    assert right_bearer.status_code == 429 and right_bearer.json()["error"] == "TooManyAttempts"
    security_headers_in(right_bearer)


def test_login_throttle__counts_per_address_and_forgets_old_failures() -> None:
    now = [0.0]
    throttle = guard.LoginThrottle(limit=2, window=10.0, clock=lambda: now[0])
    throttle.failed("10.0.0.1")
    now[0] = 4.0
    throttle.failed("10.0.0.1")
    assert throttle.wait("10.0.0.1") == 6.0  # until the first failure is 10 s old
    assert throttle.wait("10.0.0.2") == 0.0
    now[0] = 10.0
    assert throttle.wait("10.0.0.1") == 0.0
    now[0] = 14.0
    assert throttle.wait("10.0.0.1") == 0.0 and throttle.failures == {}


def test_a_cross_site_post__gets_403_and_changes_nothing(
    guarded: Served, serve: Callable[..., Served], sqlite_app: App
) -> None:
    browser = guarded.client()
    browser.post("/login", data={"token": TOKEN})
    open_server = serve(sqlite_app)  # no token, on loopback
    for client in (browser, open_server.client()):
        for headers in ({"origin": "https://evil.example"}, {"sec-fetch-site": "cross-site"},
                        {"origin": "null"}, {"sec-fetch-site": "same-site"}):  # fmt: skip
            response = client.post("/api/jobs", json={"task": "t"}, headers=headers)
            assert response.status_code == 403, headers
            assert response.json()["error"] == "Forbidden"
            security_headers_in(response)
            flow = {"flow": {"task": "t"}}
            assert client.post("/api/workflows", json=flow, headers=headers).status_code == 403
    # Another site can make a browser send a form to /login, but never a token.
    forged = browser.post("/login", data={"token": TOKEN}, headers={"origin": "https://e.x"})
    assert forged.status_code == 403
    assert sqlite_app.jobs().jobs == []
    # A bearer token is no browser's ambient credential: no origin check.
    bearer = guarded.client(authorization=f"Bearer {TOKEN}", origin="https://evil.example")
    assert bearer.post("/api/jobs", json={"task": "t"}).status_code == 201


def test_without_a_token__only_requests_to_localhost_are_answered(
    serve: Callable[..., Served], sqlite_app: App
) -> None:
    server = serve(sqlite_app)
    for host in ("localhost:8787", "127.0.0.1", "[::1]:1"):
        assert server.client(host=host).get("/api/queues").status_code == 200, host
    rebound = server.client(host="attacker.example").get("/api/queues")  # DNS rebinding
    assert rebound.status_code == 403
    assert "localhost" in rebound.json()["message"]
    behind_its_owners_login = serve(sqlite_app, any_host=True)
    assert behind_its_owners_login.client(host="ops.example").get("/api/queues").status_code == 200


def test_mounted_under_a_prefix__links_redirects_and_cookie_follow_it(
    serve: Callable[..., Served], sqlite_app: App
) -> None:
    outer = Starlette(routes=[Mount("/ops/tenure", app=asgi_app(sqlite_app, token=TOKEN))])
    browser = serve(sqlite_app, outer).client()
    to_login = browser.get("/ops/tenure/", headers={"accept": "text/html"})
    assert to_login.status_code == 303 and to_login.headers["location"] == "/ops/tenure/login"
    login = browser.post("/ops/tenure/login", data={"token": TOKEN})
    assert login.headers["location"] == "/ops/tenure/"
    assert "Path=/ops/tenure/" in login.headers["set-cookie"]
    page = browser.get("/ops/tenure/", headers={"accept": "text/html"}).text
    assert 'src="/ops/tenure/static/dashboard.js"' in page
    assert browser.get("/ops/tenure/static/dashboard.js").status_code == 200
    assert browser.get("/ops/tenure/api/queues").json()["queues"] == []


def test_security_headers__on_every_response(serve: Callable[..., Served], sqlite_app: App) -> None:
    client = serve(sqlite_app).client()
    for path in ("/", "/api/queues", "/api/jobs/nope", "/api/nothing", "/api/openapi.json"):
        response = client.get(path)
        security_headers_in(response)
        assert response.headers["cache-control"] == "no-store"
    with client.stream("GET", "/api/events") as events:
        security_headers_in(events)


def test_values__come_back_as_escaped_json_data(
    serve: Callable[..., Served], sqlite_app: App
) -> None:
    client = serve(sqlite_app).client()
    created = client.post("/api/jobs", json={"task": "t", "args": {XSS: XSS}, "key": XSS})
    job_id = created.json()["id"]
    for response in (created, client.get(f"/api/jobs/{job_id}"), client.get("/api/jobs")):
        assert response.headers["content-type"] == "application/json"
        assert b"<" not in response.content and b"\\u003cscript\\u003e" in response.content
    assert client.get(f"/api/jobs/{job_id}").json()["args"] == {XSS: XSS}
    with client.stream("GET", "/api/events") as events:
        for line in events.iter_lines():
            if line.startswith("data:"):
                assert "<" not in line and job_id in line
                break


def test_a_url_password__never_reaches_a_response(
    serve: Callable[..., Served], postgres_server: PostgresServer
) -> None:
    url = postgres_server.new_database().replace("postgres@", f"postgres:{SECRET}@")
    with_password = App(url)
    closed = App(url.replace(f":{postgres_server.port}/", f":{free_port()}/"))
    try:
        reached = serve(with_password).client().get("/api/queues")
        assert reached.status_code == 200 and "***" in reached.json()["storage"]
        assert SECRET not in reached.text
        down = serve(closed).client()
        for path in ("/api/queues", "/api/jobs", "/api/events", "/api/workers"):
            response = down.get(path)
            assert response.status_code == 503 and response.json()["error"] == "BackendUnavailable"
            assert SECRET not in response.text
    finally:
        with_password.close()
        closed.close()


def serve_command(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tenure.cli", "--url", f"sqlite:///{tmp_path / 't.db'}",
         "serve", *args],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_tenure_serve__refuses_other_addresses_without_a_token(tmp_path: Path) -> None:
    def serve(*args: str) -> Result:
        url = f"sqlite:///{tmp_path / 't.db'}"
        return CliRunner().invoke(cli, ["--url", url, "serve", *args], env={"TENURE_TOKEN": ""})

    refused = serve("--host", "0.0.0.0")
    assert refused.exit_code == 1 and "without a token" in refused.output
    short = tmp_path / "short"
    short.write_text("abc\n")
    refused = serve("--host", "::", "--token-file", str(short))
    assert refused.exit_code == 1 and "at least 16" in refused.output
    refused = serve("--root-path", "tenure")
    assert refused.exit_code == 1 and "--root-path 'tenure'" in refused.output
    refused = serve("--allow-host", "ops.example.com")
    assert refused.exit_code == 1 and "--allow-host needs a token" in refused.output
    for flag, value in (("--allow-host", "https://ops.example.com"),
                        ("--forwarded-allow-ips", "proxy.local")):  # fmt: skip
        refused = serve("--token-file", str(short), flag, value)
        assert refused.exit_code == 1, refused.output
    refused = serve("--session-hours", "0")
    assert refused.exit_code == 2 and "--session-hours" in refused.output
    assert list(tmp_path.iterdir()) == [short]  # no storage opened


def test_tenure_serve__refuses_an_empty_token_file_even_with_tenure_token_set(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    server = serve_command(tmp_path, "--port", str(free_port()), "--token-file", str(empty),
                           env={"TENURE_TOKEN": TOKEN})  # fmt: skip
    try:
        _, err = server.communicate(timeout=20)
    finally:
        server.kill()
    assert server.returncode == 1
    assert err.splitlines() == [
        f"error: {empty}: the token file is empty; make a token with: {guard.NEW_TOKEN_HINT}"
    ]


def test_tenure_serve__with_a_token_file_needs_it_under_its_root_path(tmp_path: Path) -> None:
    App(f"sqlite:///{tmp_path / 't.db'}").close()
    (tmp_path / "t.db").touch()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    server = serve_command(tmp_path, "--port", str(port), "--token-file", str(token_file),
                           "--root-path", "/ops/tenure/",
                           env={"TENURE_TOKEN": "x" * 20})  # fmt: skip
    try:
        wait_port(port)
        # As a proxy passes requests on: the prefix stripped.
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/api/queues").status_code == 401
        not_the_file_s = {"authorization": "Bearer " + "x" * 20}
        assert httpx.get(url + "/api/queues", headers=not_the_file_s).status_code == 401
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert httpx.get(url + "/api/queues", headers=bearer).status_code == 200
        to_login = httpx.get(url + "/", headers={"accept": "text/html"})
        assert to_login.headers["location"] == "/ops/tenure/login"
        page = httpx.get(url + "/", headers={"accept": "text/html", **bearer}).text
        assert 'src="/ops/tenure/static/dashboard.js"' in page
        assert httpx.get(url + "/static/dashboard.js", headers=bearer).status_code == 200
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert f"token: required ({token_file}); hosts: any (--allow-host names them); " in out
    assert "forwarded headers: ignored" in out


# -- sessions -------------------------------------------------------------------------


def logged_in(server: Served) -> tuple[httpx.Client, str]:
    """A client of ``server`` with a session, and the session's id."""
    browser = server.client()
    login = browser.post("/login", data={"token": TOKEN})
    assert login.status_code == 303
    return browser, browser.cookies[cookie_name(server.port)]


def with_session(server: Served, session_id: str) -> httpx.Client:
    """Another client that presents a copy of ``session_id``."""
    return server.client(cookie=f"{cookie_name(server.port)}={session_id}")


def test_a_session__is_a_random_id_that_logout_ends_on_the_server(guarded: Served) -> None:
    browser, session_id = logged_in(guarded)
    _, other_id = logged_in(guarded)
    assert session_id != other_id  # not a digest of the token
    copied = with_session(guarded, session_id)
    assert copied.get("/api/queues").status_code == 200
    same_site = {"sec-fetch-site": "same-origin", "origin": guarded.url}
    assert browser.post("/logout", headers=same_site).status_code == 303
    assert copied.get("/api/queues").status_code == 401  # the copy is worth nothing now
    assert with_session(guarded, other_id).get("/api/queues").status_code == 200


def test_a_session__expires_after_its_hours(serve: Callable[..., Served], sqlite_app: App) -> None:
    server = serve(sqlite_app, token=TOKEN, session_hours=2 / 3600)  # two seconds
    browser, _ = logged_in(server)
    assert "Max-Age=2;" in browser.post("/login", data={"token": TOKEN}).headers["set-cookie"]
    assert browser.get("/api/queues").status_code == 200
    deadline = time.monotonic() + 10
    while browser.get("/api/queues").status_code == 200:
        assert time.monotonic() < deadline, "the session outlived its hour"
        time.sleep(0.1)
    assert browser.get("/api/queues").status_code == 401


def test_servers_on_one_host__keep_apart_sessions_and_a_restart_ends_them(
    serve: Callable[..., Served], sqlite_app: App, tmp_path: Path
) -> None:
    first = serve(sqlite_app, token=TOKEN)
    other_app = App(f"sqlite:///{tmp_path / 'other.db'}")
    second = serve(other_app, token=TOKEN)
    browser = first.client()  # one cookie jar for both, as a browser's for the host
    assert browser.post("/login", data={"token": TOKEN}).status_code == 303
    assert browser.post(second.url + "/login", data={"token": TOKEN}).status_code == 303
    same_site = {"sec-fetch-site": "same-origin", "origin": first.url}
    assert browser.post("/logout", headers=same_site).status_code == 303
    assert browser.get(second.url + "/api/queues").status_code == 200  # still logged in there
    assert browser.get("/api/queues").status_code == 401
    _, session_id = logged_in(first)
    # The same token, another server process: it never started that session.
    assert with_session(second, session_id).get("/api/queues").status_code == 401


def test_allowed_hosts__refuse_others_before_counting_their_tokens(
    serve: Callable[..., Served], sqlite_app: App
) -> None:
    server = serve(sqlite_app, token=TOKEN, hosts=["ops.example.com"])
    rebound = server.client(host="attacker.example", authorization="Bearer " + "x" * 20)
    for _ in range(guard.LOGIN_FAILURES + 1):  # a DNS-rebinding page guessing
        refused = rebound.get("/api/queues")
        assert refused.status_code == 403 and "ops.example.com" in refused.json()["message"]
    for host in ("ops.example.com", "OPS.example.com:443", "localhost:8787", "127.0.0.1"):
        client = server.client(host=host, authorization=f"Bearer {TOKEN}")
        assert client.get("/api/queues").status_code == 200, host
    with pytest.raises(InvalidInput, match="need a token"):
        asgi_app(sqlite_app, hosts=["ops.example.com"])
