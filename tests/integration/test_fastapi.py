"""tenure.contrib.fastapi in a real FastAPI application served by uvicorn in a
process of its own, beside a real worker: an endpoint enqueues through the
dependency and waits for the result; the dashboard and the API mounted under
a prefix, behind the application's own check; shutdown closes everything."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import fresh_storage_url
from tests.servers import PostgresServer, free_port, wait_port

pytest.importorskip("fastapi")

SERVICE = """
import json
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

import tenure
from tenure.contrib.fastapi import TenureApp, lifespan, mount

app = tenure.App(os.environ["SERVICE_URL"])


@app.task
def add(a: int, b: int) -> int:
    return a + b


@asynccontextmanager
async def own_lifespan(api: FastAPI) -> AsyncIterator[dict[str, str]]:
    yield {"greeting": "hello"}


def staff_only(request: Request) -> bool:  # sync here; the how-to's is async
    return request.headers.get("x-staff") == "yes"


@asynccontextmanager
async def observed(api: FastAPI) -> AsyncIterator[dict[str, str]]:
    # The test's own: what tenure's lifespan leaves open once it has ended.
    before = set(threading.enumerate())
    async with lifespan(app, own_lifespan)(api) as state:
        yield state
    ours = [t for t in set(threading.enumerate()) - before if t.name.startswith("tenure")]
    for thread in ours:
        thread.join(timeout=2)  # told to end by the close, it may not have yet
    threads = [t.name for t in ours if t.is_alive()]
    connections = None
    if app.url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(app.url) as conn:
            connections = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()[0]
    with open("left-open.json", "w") as out:
        json.dump({"threads": threads, "connections": connections}, out)


api = FastAPI(lifespan=observed)
mount(api, app, "/ops/tenure", allow=staff_only)


@api.post("/sum")
async def sum_(a: int, b: int, tenure_app: TenureApp, request: Request) -> dict[str, object]:
    job = await tenure_app.aenqueue(add.name, {"a": a, "b": b})
    result = await tenure_app.aresult(job.id, timeout=30)
    return {"id": job.id, "result": result, "greeting": request.state.greeting}
"""
STAFF = {"x-staff": "yes"}


@contextmanager
def running(command: list[str], cwd: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def stopped(process: subprocess.Popen[str]) -> str:
    """Stop ``process`` as a deployment does (SIGTERM); its stderr, once it
    exited cleanly (uvicorn raises the signal again once it has shut down)."""
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode in (0, -signal.SIGTERM), err
    return err


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_fastapi_app__enqueues_waits_mounts_and_closes_all(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = fresh_storage_url(kind, request, tmp_path)
    (tmp_path / "service.py").write_text(SERVICE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    env |= {"SERVICE_URL": url, "PYTHONDEVMODE": "1", "PYTHONPATH": str(tmp_path)}
    port = free_port()
    serve = [sys.executable, "-m", "uvicorn", "service:api", "--port", str(port)]
    work = [sys.executable, "-m", "tenure.cli", "--url", url, "worker", "service:app",
            "--pool", "thread", "-c", "1"]  # fmt: skip
    with running(serve, tmp_path, env) as server, running(work, tmp_path, env) as worker:
        wait_port(port)
        base = f"http://127.0.0.1:{port}"
        done = httpx.post(f"{base}/sum", params={"a": 2, "b": 3}, timeout=60)
        assert done.status_code == 200, done.text
        assert done.json()["result"] == 5 and done.json()["greeting"] == "hello"
        check_the_mount(base, done.json()["id"])
        if kind == "postgres":
            assert connections(request, url) > 0
        stopped(worker)
        err = stopped(server)
    assert "Task was destroyed" not in err and "unclosed" not in err, err
    assert "Traceback" not in err and "Application shutdown complete" in err, err
    left = json.loads((tmp_path / "left-open.json").read_text())
    assert left["threads"] == [], left  # tenure's connection threads ended
    if kind == "postgres":
        assert left["connections"] == 0  # closed by the lifespan, not by the process's exit
        assert connections(request, url) == 0


def check_the_mount(base: str, job_id: str) -> None:
    page, api = f"{base}/ops/tenure/", f"{base}/ops/tenure/api"
    assert httpx.get(page).status_code == 403
    assert httpx.get(f"{api}/jobs", headers={"x-staff": "no"}).status_code == 403
    overview = httpx.get(page, headers={**STAFF, "accept": "text/html"})
    assert overview.status_code == 200 and "content-security-policy" in overview.headers
    links = re.findall(r'(?:href|src)="(/[^"]*)"', overview.text)
    assert links and all(link.startswith("/ops/tenure/") for link in links), links
    assert all(httpx.get(base + link, headers=STAFF).status_code == 200
               for link in links if "/static/" in link)  # fmt: skip
    job = httpx.get(f"{api}/jobs/{job_id}", headers=STAFF)
    assert job.status_code == 200 and job.json()["state"] == "completed", job.text
    # The application let the request in; tenure still refuses a cross-site write.
    cross = {**STAFF, "sec-fetch-site": "cross-site", "origin": "https://evil.example"}
    refused = httpx.post(f"{api}/jobs/{job_id}/cancel", headers=cross)
    assert refused.status_code == 403 and "cross-site" in refused.text
    # From the mounted pages, it goes through (to a job that is done: 409).
    own = {**STAFF, "sec-fetch-site": "same-origin", "origin": base}
    cancel = httpx.post(f"{api}/jobs/{job_id}/cancel", headers=own)
    assert cancel.status_code == 409 and cancel.json()["error"] == "InvalidTransition", cancel.text


def connections(request: pytest.FixtureRequest, url: str) -> int:
    """Connections open to the test's database, but for this query's own."""
    server: PostgresServer = request.getfixturevalue("postgres_server")
    database = url.rsplit("/", 1)[1]
    return int(server.psql(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = "
        f"'{database}' AND pid <> pg_backend_pid()"
    ))  # fmt: skip
