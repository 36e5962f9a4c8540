"""Redis Sentinel URLs and the replica options (``backends/redis/url.py``,
``sentinel.py``): what they mean, what they refuse, how they are printed. No
server: a URL is read before anything is opened."""

from __future__ import annotations

import pytest

from tenure.backends.factory import from_url
from tenure.backends.redis.url import Options, parse
from tenure.core.urls import redacted
from tenure.errors import InvalidInput


def test_a_sentinel_url__names_its_sentinels_service_and_database() -> None:
    o = parse("redis+sentinel://:pw@s1:26380,s2,[::1]:5/mymaster/3?prefix=app&socket_timeout=2")
    assert o.sentinels is not None
    assert o.sentinels.addresses == (("s1", 26380), ("s2", 26379), ("::1", 5))
    assert o.sentinels.service == "mymaster" and not o.sentinels.tls
    # the primary's own URL, as redis-py reads it: its password, database, options
    assert o.redis_url == "redis://:pw@primary/3?socket_timeout=2"
    assert o.keys.prefix == "app"
    assert o.lane_reachable


def test_a_sentinel_url_over_tls__speaks_tls_to_both_and_keeps_the_sentinels_password() -> None:
    o = parse("rediss+sentinel://s1/m?sentinel_password=spw&ssl_cert_reqs=none")
    assert o.sentinels is not None and o.sentinels.tls
    assert o.sentinels.password == "spw"
    assert o.redis_url == "rediss://primary?ssl_cert_reqs=none"
    kwargs = o.sentinels.kwargs({"ssl_cert_reqs": "none", "socket_timeout": 2.0, "db": 3})
    assert kwargs == {"ssl_cert_reqs": "none", "socket_timeout": 2.0, "ssl": True,
                      "username": None, "password": "spw"}  # fmt: skip
    assert not o.lane_reachable


def test_a_sentinel_url__is_a_redis_backend() -> None:
    backend = from_url("redis+sentinel://s1,s2/mymaster")
    options: Options = backend.options  # type: ignore[attr-defined]
    assert options.sentinels is not None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://s1/", "names the service after its sentinels"),
        ("redis+sentinel://s1", "names the service after its sentinels"),
        ("redis+sentinel://s1/m/0/1", "names the service after its sentinels"),
        ("redis+sentinel://s1/m/x", "a database number such as /0, not '/x'"),
        ("redis+sentinel://s1,,s2/m", "a sentinel's address is host[:port], not ''"),
        ("redis+sentinel://::1/m", "a sentinel's address is host[:port], not '::1'"),
        ("redis+sentinel://s1:99999/m", "a sentinel's port is from 1 to 65535"),
        ("redis+sentinel://s1:0/m", "a sentinel's port is from 1 to 65535"),
        ("redis+sentinel://s1/m?cluster=yes", "Sentinel watches one primary"),
        ("redis://h/0?sentinel_password=x", "only a redis+sentinel:// URL takes it"),
        ("redis://h/0?wait_replicas=x", "wait_replicas: must be an integer from 0 to 100"),
        ("redis://h/0?wait_replicas=101", "wait_replicas: must be an integer from 0 to 100"),
        ("redis://h/0?wait_timeout=0", "wait_timeout: must be a number from 0.001"),
        ("redis://h/0?cluster=yes&wait_replicas=1", "not on a Redis Cluster"),
    ],
)
def test_a_bad_sentinel_or_replica_option__is_refused_with_the_reason(
    url: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        from_url(url)
    assert message in str(caught.value)


def test_wait_replicas__defaults_to_none_and_reads_its_timeout() -> None:
    assert parse("redis://h/0").wait_replicas == 0
    o = parse("redis://h/0?wait_replicas=2&wait_timeout=0.25")
    assert (o.wait_replicas, o.wait_timeout) == (2, 0.25)
    assert "wait" not in o.redis_url  # tenure's own: not handed to redis-py


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis+sentinel://u:pw@s1,s2:1/m/0", "redis+sentinel://u:***@s1,s2:1/m/0"),
        ("redis+sentinel://s1/m?sentinel_password=x&prefix=p",
         "redis+sentinel://s1/m?sentinel_password=***&prefix=p"),
    ],
)  # fmt: skip
def test_a_sentinel_url__is_printed_without_its_passwords(url: str, shown: str) -> None:
    assert redacted(url) == shown
    assert parse(url).safe_url == shown
