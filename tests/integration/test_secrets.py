"""A password in a backend URL never reaches a log line, an error or a table.

Real commands (subprocesses) on real servers: PostgreSQL's test server trusts
everyone, so it accepts and ignores a password; on Redis, an ACL user has one.
Every byte the commands print is searched for the secret.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from tests.servers import PostgresServer, RedisServer, free_port

TENURE = Path(sys.executable).with_name("tenure")
SECRET = "S3cretPassw0rd"

APP_MODULE = """
    import tenure

    app = tenure.App({url!r})


    @app.task
    def add(a: int, b: int) -> int:
        return a + b
"""


class Run:
    """Runs ``tenure`` commands in one directory; keeps everything they print."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.printed: list[str] = []

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "TENURE_URL"}
        done = subprocess.run([str(TENURE), *args], cwd=self.cwd, env=env, check=False,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        self.printed.append(done.stdout + done.stderr)
        return done

    def worker(self, app_url: str, *args: str) -> subprocess.CompletedProcess[str]:
        (self.cwd / "secret_mod.py").write_text(textwrap.dedent(APP_MODULE.format(url=app_url)))
        return self(*args, "worker", "secret_mod:app", "--burst", "-c", "1", "--pool", "thread")

    def everything(self) -> str:
        return "\n".join(self.printed)


def a_full_run(run: Run, url: str) -> None:
    """Enqueue, work, look, and fail in the ways that print the URL."""
    assert run("--url", url, "enqueue", "add", "--args", '{"a": 1, "b": 2}').returncode == 0
    worked = run.worker(url)
    assert worked.returncode == 0, worked.stderr
    assert "started on" in worked.stderr and "stopped after 1 jobs" in worked.stderr
    assert run("--url", url, "status").returncode == 0
    assert "completed" in run("--url", url, "jobs").stdout
    mismatch = run.worker(url.replace("127.0.0.1", "localhost"), "--url", url)
    assert "differs from the url of the App" in mismatch.stderr


def test_a_password_in_a_postgres_url__is_never_printed(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    url = postgres_server.new_database().replace("postgres@", f"postgres:{SECRET}@")
    run = Run(tmp_path)
    a_full_run(run, url)
    a_full_run(run, f"{url}?password={SECRET}")
    closed = url.replace(f":{postgres_server.port}/", f":{free_port()}/")
    assert "Connection refused" in run("--url", closed, "status").stderr
    assert "pool_size" in run("--url", f"{url}?pool_size=x", "status").stderr
    assert "unknown backend scheme" in run("--url", f"pg://u:{SECRET}@h/db", "status").stderr
    assert "not shown" in run("--url", f"host=h password={SECRET}", "status").stderr

    assert SECRET not in run.everything(), run.everything()
    assert f"started on {url.replace(SECRET, '***')}" in run.everything()


@pytest.fixture
def redis_user(redis_server: RedisServer) -> Iterator[str]:
    """An ACL user of the test server whose password is SECRET."""
    redis_server.flush()
    admin = redis_sync.Redis.from_url(redis_server.url)
    admin.execute_command("ACL", "SETUSER", "tenure_secret", "on", f">{SECRET}", "~*", "&*",
                          "+@all")  # fmt: skip
    yield "tenure_secret"
    admin.execute_command("ACL", "DELUSER", "tenure_secret")
    admin.close()


def test_a_password_in_a_redis_url__is_never_printed(
    tmp_path: Path, redis_server: RedisServer, redis_user: str
) -> None:
    host = f"127.0.0.1:{redis_server.port}"
    run = Run(tmp_path)
    a_full_run(run, f"redis://{redis_user}:{SECRET}@{host}/0")
    a_full_run(run, f"redis://{host}/0?username={redis_user}&password={SECRET}")
    wrong = run("--url", f"redis://{redis_user}:{SECRET}x@{host}/0", "status")
    assert "error: " in wrong.stderr and wrong.returncode == 1
    wrong = run("--url", f"redis://{host}/0?username={redis_user}&password={SECRET}x", "status")
    assert "error: " in wrong.stderr and wrong.returncode == 1

    assert SECRET not in run.everything(), run.everything()
    assert "appendonly no" in run.everything()  # the warning that quotes the URL was printed
