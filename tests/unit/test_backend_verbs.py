"""Every backend's verbs are what the protocol says they are: coroutine
functions where it declares ``async def``. The worker's metrics count a verb's
round trips by wrapping coroutine functions only (``CountedBackend``): a verb
that hands back another's coroutine from a plain ``def`` would go uncounted."""

import inspect

import pytest

from tenure.backends.base import Backend
from tenure.backends.postgres import PostgresBackend
from tenure.backends.redis import RedisBackend
from tenure.backends.sqlite import SQLiteBackend

VERBS = sorted(
    name
    for name, value in vars(Backend).items()
    if not name.startswith("_") and inspect.iscoroutinefunction(value)
)


def test_the_protocol_declares_the_cycle_among_its_async_verbs():
    assert {"complete_and_claim", "claim", "complete_many", "heartbeat", "enqueue"} <= set(VERBS)


@pytest.mark.parametrize("backend", [SQLiteBackend, PostgresBackend, RedisBackend])
def test_each_async_verb_of_the_protocol__is_a_coroutine_function_of_every_backend(backend):
    plain = [name for name in VERBS if not inspect.iscoroutinefunction(getattr(backend, name))]
    assert plain == []
