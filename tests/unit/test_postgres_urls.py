"""PostgreSQL URLs as libpq reads them: one host or several, a socket
directory, read strictly; the connection string tenure hands to libpq."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from psycopg.conninfo import conninfo_to_dict

from tenure.backends.postgres.url import MULTI_HOST_DEFAULTS, parse
from tenure.core.urls import redacted, scrub
from tenure.errors import InvalidInput


@pytest.mark.parametrize(
    "url",
    [
        "postgresql:///db?host=/run/postgresql",
        "postgresql://u@/db?host=/run/postgresql&port=5433",
        "postgres:///db?host=%2Frun%2Fpostgresql",
    ],
)
def test_a_url_whose_host_is_only_in_its_query__reaches_libpq_as_written(url: str) -> None:
    fields = conninfo_to_dict(parse(url).conninfo)
    assert fields["host"] == "/run/postgresql"
    assert fields["dbname"] == "db"


def test_several_hosts__are_kept_in_order_and_default_to_read_write() -> None:
    conninfo = parse("postgresql://u:pw@a:5432,b:5433/db").conninfo
    fields = conninfo_to_dict(conninfo)
    assert (fields["host"], fields["port"]) == ("a,b", "5432,5433")
    assert fields["target_session_attrs"] == "read-write"
    assert fields["password"] == "pw"


def test_several_hosts__give_up_on_a_silent_connection_in_seconds() -> None:
    fields = conninfo_to_dict(parse("postgresql://a,b/db").conninfo)
    assert fields["tcp_user_timeout"] == "10000"
    assert (fields["keepalives_idle"], fields["keepalives_interval"]) == ("5", "2")
    assert fields["keepalives_count"] == "3"


def test_several_hosts__keep_the_tcp_options_given() -> None:
    conninfo = parse("postgresql://a,b/db?tcp_user_timeout=0&keepalives_idle=60").conninfo
    fields = conninfo_to_dict(conninfo)
    assert (fields["tcp_user_timeout"], fields["keepalives_idle"]) == ("0", "60")


@pytest.mark.parametrize("attrs", ["any", "primary", "prefer-standby"])
def test_several_hosts__keep_the_target_session_attrs_given(attrs: str) -> None:
    conninfo = parse(f"postgresql://a,b/db?target_session_attrs={attrs}").conninfo
    assert conninfo_to_dict(conninfo)["target_session_attrs"] == attrs


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://h/db",
        "postgresql://u@h:5432/db",
        "postgresql:///db?host=/run/postgresql",
    ],
)
def test_one_host__leaves_the_failover_options_to_libpq(url: str) -> None:
    fields = conninfo_to_dict(parse(url).conninfo)
    assert not set(MULTI_HOST_DEFAULTS) & set(fields)


def test_several_hosts_in_the_query__count_as_several() -> None:
    conninfo = parse("postgresql:///db?host=a,b&port=5432").conninfo
    assert conninfo_to_dict(conninfo)["target_session_attrs"] == "read-write"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://a:5432,b:x/db", "port: 'x' is not a port number"),
        ("postgresql://a:5432,b:70000/db", "port: '70000' is not a port number"),
        ("postgresql://a,b,c/db?port=1,2", "port: 2 ports for 3 hosts (give 1 or 3)"),
        ("postgresql://a,b/db?hostaddr=10.0.0.1", "hostaddr: 1 addresses for 2 hosts"),
        ("postgresql://a,b/db?target_session_attrs=writable", "target_session_attrs: must be"),
        ("postgresql://,/db", "names no host"),
        ("postgresql://[::1/db", "malformed PostgreSQL URL"),
    ],
)
def test_a_bad_multi_host_url__is_refused_with_the_reason(url: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse(url)
    assert message in str(caught.value)


def test_a_bad_multi_host_url__is_refused_without_its_password() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse("postgresql://u:S3cret@a:1,b:x/db")
    assert "S3cret" not in str(caught.value)
    assert "postgresql://u:***@a:1,b:x/db" in str(caught.value)


def test_a_multi_host_url__is_printed_with_its_password_masked() -> None:
    url = "postgresql://u:S3cret@a:5432,b:5433/db?target_session_attrs=read-write"
    shown = "postgresql://u:***@a:5432,b:5433/db?target_session_attrs=read-write"
    assert redacted(url) == shown
    assert redacted(parse(url).conninfo).startswith("postgresql://u:***@a:5432,b:5433/db?")


LIVENESS = quote("postgresql://u:L1ve@pg:5432/db?sslmode=require", safe="")


def test_a_liveness_url__sends_the_sessions_to_postgresql_and_the_pool_to_the_pooler() -> None:
    endpoints = parse(f"postgresql://u:pw@bouncer:6432/db?liveness_url={LIVENESS}").endpoints
    assert conninfo_to_dict(endpoints.pool)["host"] == "bouncer"
    session = conninfo_to_dict(endpoints.session)
    assert (session["host"], session["sslmode"], session["connect_timeout"]) == (
        "pg", "require", "5")  # fmt: skip
    assert endpoints.pooled
    assert endpoints.pool_options() == {"prepare_threshold": None}


def test_without_a_liveness_url__every_connection_goes_to_the_url_and_may_prepare() -> None:
    endpoints = parse("postgresql://u@pg/db").endpoints
    assert endpoints.pool == endpoints.session and not endpoints.pooled
    assert endpoints.pool_options() == {}


def test_a_liveness_url_of_several_hosts__gets_the_failover_defaults() -> None:
    url = f"postgresql://u@b1,b2/db?liveness_url={quote('postgresql://u@pg1,pg2/db', safe='')}"
    endpoints = parse(url).endpoints
    assert conninfo_to_dict(endpoints.session)["target_session_attrs"] == "read-write"
    assert conninfo_to_dict(endpoints.pool)["host"] == "b1,b2"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://b/db?pooler=transaction", "pooler: needs liveness_url"),
        ("postgresql://b/db?pooler=session", "pooler: must be one of none, transaction"),
        ("postgresql://b/db?pooler=none&liveness_url=postgresql://pg/db",
         "liveness_url: is for a pooler in transaction mode"),
        ("postgresql://b/db?liveness_url=redis://pg/0", "must be a postgresql:// URL"),
        (f"postgresql://b/db?liveness_url={quote('postgresql://pg/db?schema=x', safe='')}",
         "unknown PostgreSQL liveness_url URL option(s) 'schema'"),
        (f"postgresql://b/db?liveness_url={quote('postgresql://a:1,b:2,c:3/db?port=1,2', safe='')}",
         "port: 2 ports for 3 hosts"),
    ],
)  # fmt: skip
def test_a_bad_pooler_setting__is_refused_saying_why(url: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse(url)
    assert message in str(caught.value)


def test_a_liveness_url__is_printed_and_scrubbed_with_its_password_masked() -> None:
    url = f"postgresql://u:Pw0@bouncer/db?liveness_url={LIVENESS}"
    shown = redacted(url)
    assert "L1ve" not in shown and "Pw0" not in shown
    assert "liveness_url=postgresql://u:***@pg:5432/db" in shown
    assert scrub("failed: password=L1ve or L1ve", url) == "failed: password=*** or ***"
