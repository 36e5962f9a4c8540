from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import server_or_skip
from tests.servers import RedisServer


@pytest.fixture
def aof_redis() -> Iterator[RedisServer]:
    """A Redis of the test's own, with an append-only file (a restart keeps jobs)."""
    server = server_or_skip("redis", lambda: RedisServer(appendonly=True))
    yield server
    server.close()
