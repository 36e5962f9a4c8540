"""Backend URLs: options read strictly on every backend, nothing created by a bad
URL, and PostgreSQL connection failures that say why, at once, in one line."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure import App
from tenure.backends import from_url
from tenure.backends.postgres.url import MAX_SCHEMA_LENGTH
from tenure.core.urls import redacted, scrub
from tenure.errors import BackendUnavailable, InvalidInput
from tenure.portal import Portal
from tests.conformance.helpers import enqueue_one, wait_for
from tests.servers import PostgresServer, free_port

# -- options ---------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "TRUE", "True", "yes", "on", "ON"])
def test_a_true_sqlite_durable_option__in_any_case__is_durable(tmp_path: Path, value: str) -> None:
    assert from_url(f"sqlite:///{tmp_path / 'x.db'}?durable={value}").durable  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["0", "FALSE", "no", "Off"])
def test_a_false_sqlite_durable_option__is_not_durable(tmp_path: Path, value: str) -> None:
    assert not from_url(f"sqlite:///{tmp_path / 'x.db'}?durable={value}").durable  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("durable=maybe", "durable: must be one of 1/0, true/false, yes/no, on/off"),
        ("durable=", "durable: no value"),
        ("durable=1&durable=0", "durable: given twice"),
        ("busy_timeout=nan", "busy_timeout: must be a number from 0"),
        ("busy_timeout=inf", "busy_timeout: must be a number from 0"),
        ("busy_timeout=-1", "busy_timeout: must be a number from 0"),
        ("busy_timeout=1e300", "busy_timeout: must be a number from 0"),
        ("max_payload=1.5", "max_payload: must be an integer from 1"),
        ("max_payload=" + "9" * 30, "max_payload: must be an integer from 1"),
        ("fast=1", "unknown SQLite URL option(s) 'fast'"),
    ],
)
def test_a_bad_sqlite_option__is_refused_and_creates_nothing(
    tmp_path: Path, query: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        App(f"sqlite:///{tmp_path / 'x.db'}?{query}")
    assert message in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:1/x", "a database number such as /0, not '/x'"),
        ("redis://127.0.0.1:1/0x", "a database number such as /0, not '/0x'"),
        ("redis://127.0.0.1:1/-1", "a database number such as /0"),
        ("redis://127.0.0.1:1?db=two", "db: must be an integer from 0"),
        ("redis://127.0.0.1:1/0?cluster=maybe", "cluster: must be one of 1/0"),
        ("redis://127.0.0.1:1/0?retry_on_timeout=perhaps", "retry_on_timeout: must be one of"),
        ("redis://127.0.0.1:1/0?socket_timeout=nan", "socket_timeout: must be a number from 0"),
        ("redis://127.0.0.1:1/0?max_connections=many", "max_connections: must be an integer"),
        ("redis://127.0.0.1:1/0?pool_size=1", "pool_size: must be an integer from 2"),
    ],
)
def test_a_bad_redis_url__is_refused_with_the_reason(url: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        from_url(url)
    assert message in str(caught.value)


def test_redis_py_booleans__reach_it_as_they_were_meant() -> None:
    # redis-py reads "off" as true; tenure hands it "false".
    options = from_url("redis://127.0.0.1:1/0?retry_on_timeout=OFF").options  # type: ignore[attr-defined]
    assert options.redis_url.endswith("retry_on_timeout=false")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("schema=" + "s" * (MAX_SCHEMA_LENGTH + 1), "is too long: at most 56 characters"),
        ("schema=" + "s" * 64, "is too long"),
        ("foo=1", "unknown PostgreSQL URL option(s) 'foo'"),
        ("sslmode=require&sslmode=disable", "sslmode: given twice"),
        ("connect_timeout=forever", "connect_timeout: must be an integer from 1"),
        ("pool_size=0", "pool_size: must be an integer from 1"),
    ],
)
def test_a_bad_postgres_url__is_refused_and_creates_no_schema(
    postgres_server: PostgresServer, query: str, message: str
) -> None:
    url = postgres_server.new_database()
    with pytest.raises(InvalidInput) as caught:
        App(f"{url}?{query}")
    assert message in str(caught.value)
    schemas = postgres_server.psql(
        "SELECT string_agg(nspname, ',') FROM pg_namespace WHERE nspname NOT LIKE 'pg_%'",
        url.rsplit("/", 1)[1],
    )
    assert schemas == "public,information_schema"


def test_a_schema_of_the_longest_name__enqueues_and_wakes_workers(
    postgres_server: PostgresServer, open_backend: Callable[[str], Any]
) -> None:
    url = f"{postgres_server.new_database()}?schema={'s' * MAX_SCHEMA_LENGTH}"
    backend = open_backend(url)
    enqueue_one(backend)  # notifies tenure.<schema>: refused if the channel were too long
    assert backend.counts("default")["queued"] == 1


# -- the redactor ----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h/db", "postgresql://u:***@h/db"),
        ("redis://:p%40ss@h:1/0", "redis://:***@h:1/0"),
        ("redis://h/0?password=pw&prefix=x", "redis://h/0?password=***&prefix=x"),
        ("unix:///run/r.sock?db=1&password=pw", "unix:///run/r.sock?db=1&password=***"),
        ("postgresql://h/db?sslpassword=pw", "postgresql://h/db?sslpassword=***"),
        ("sqlite:///x.db", "sqlite:///x.db"),
    ],
)
def test_redacted__masks_every_password_and_keeps_the_rest(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_scrub__masks_a_password_however_it_is_written() -> None:
    url = "postgresql://u:p%40ss@h/db?sslpassword=k3y"
    assert scrub('bad "p@ss", "p%40ss" and k3y', url) == 'bad "***", "***" and ***'


# -- PostgreSQL connection failures -----------------------------------------


def open_fails(portal: Portal, url: str) -> str:
    """Open a backend on ``url``, which must fail; its message, checked for the
    password and one line, within a bound well under the pool's 10 s."""
    backend = from_url(url)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as caught:
        portal.run(backend.open())
    assert time.monotonic() - started < 5.0
    message = str(caught.value)
    assert "\n" not in message
    assert "S3cret" not in message
    assert ":***@127.0.0.1" in message
    return message


@pytest.fixture
def pool_warnings(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    caplog.set_level(logging.WARNING, logger="psycopg")
    return lambda: [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]


def test_a_postgres_server_that_refuses__fails_at_once_saying_so(
    portal: Portal, pool_warnings: Callable[[], list[str]]
) -> None:
    message = open_fails(portal, f"postgresql://postgres:S3cret@127.0.0.1:{free_port()}/db")
    assert "Connection refused" in message
    assert pool_warnings() == []


def test_an_unknown_postgres_database__fails_at_once_saying_so(
    portal: Portal, postgres_server: PostgresServer, pool_warnings: Callable[[], list[str]]
) -> None:
    url = f"postgresql://postgres:S3cret@127.0.0.1:{postgres_server.port}/nosuchdb"
    assert 'database "nosuchdb" does not exist' in open_fails(portal, url)
    assert pool_warnings() == []


def test_a_postgres_option_the_server_refuses__fails_at_once_saying_so(
    portal: Portal, postgres_server: PostgresServer, pool_warnings: Callable[[], list[str]]
) -> None:
    url = f"postgresql://postgres:S3cret@127.0.0.1:{postgres_server.port}/postgres"
    message = open_fails(portal, f"{url}?options=-c%20nosuch%3D1")
    assert 'unrecognized configuration parameter "nosuch"' in message
    assert pool_warnings() == []


def test_a_wrong_postgres_password__fails_at_once_saying_so(
    portal: Portal, postgres_server: PostgresServer, pool_warnings: Callable[[], list[str]]
) -> None:
    """The test server trusts everyone but this role, which must give its password."""
    hba = postgres_server.data / "pg_hba.conf"
    rule = "host all tenure_pw 127.0.0.1/32 scram-sha-256\n"
    if rule not in hba.read_text():
        postgres_server.psql("DROP ROLE IF EXISTS tenure_pw")
        postgres_server.psql("CREATE ROLE tenure_pw LOGIN PASSWORD 'right'")
        hba.write_text(rule + hba.read_text())
        postgres_server.psql("SELECT pg_reload_conf()")
    url = f"postgresql://tenure_pw:S3cret@127.0.0.1:{postgres_server.port}/postgres"
    wait_for(lambda: refused(url), timeout=10)  # the server reads pg_hba.conf again
    message = open_fails(portal, url)
    assert 'password authentication failed for user "tenure_pw"' in message
    assert pool_warnings() == []


def refused(url: str) -> bool:
    try:
        psycopg.connect(url).close()
    except psycopg.OperationalError:
        return True
    return False
