"""The App of a Django project: its storage comes from the settings, on first
use, and its enqueues follow Django's transactions.

An enqueue made through it (``task.enqueue(...)``, ``app.enqueue(...)``,
``enqueue_many``) inside ``transaction.atomic()`` on the database tenure
shares:

- is written in that transaction, on Django's own connection, when tenure's
  storage is that database (PostgreSQL through psycopg 3, or SQLite): the job
  exists if and only if the transaction commits;
- else (tenure's storage elsewhere, or Django on psycopg2) is stored by
  ``transaction.on_commit``: after the commit, not at all after a rollback;
- in a test's transaction (``TestCase``, pytest-django's ``db``), which never
  commits, is held until ``tenure.testing.drain(app)`` stores it (``flush``),
  or dropped with the test's rollback.

Outside an atomic block (Django's autocommit), it is stored at once. An
explicit ``conn=`` is used as given; ``aenqueue`` is never in a transaction
(Django's transactions are synchronous).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tenure.app import App
from tenure.contrib.django import conf
from tenure.core.workflows import Workflow, WorkflowSpec
from tenure.errors import InvalidInput
from tenure.job import Job, JobSpec, stored_workflow

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from tenure.context import JobContext

# The attributes App._bind sets: read before binding, they bind.
BOUND = frozenset({"url", "_connections", "_described"})

_project: list[DjangoApp] = []
T = TypeVar("T")
_making = threading.RLock()  # making it imports the tasks modules, which ask for it


def project_app() -> DjangoApp:
    """The project's App (``tenure.contrib.django.app``), made at the first
    call; Django is set up first, if this process has not (a worker's
    executor, started afresh, imports the App by its path), from its
    DJANGO_SETTINGS_MODULE, which imports the apps' tasks modules too."""
    with _making:
        if not _project:
            from django.apps import apps

            if not apps.ready and not apps.loading:
                import django

                django.setup()
        if not _project:  # django.setup() may have made it, through a tasks module
            _project.append(DjangoApp())
    return _project[0]


class DjangoApp(App):
    """An App whose URL is read from the settings at first use (so importing
    a tasks module needs no configured database, and a test run's database
    is the one used), whose enqueues follow Django's transactions (see the
    module's docstring), whose attempts close Django's stale connections, and
    whose workers set the policies of ``TENURE["QUEUES"]`` at their start."""

    def __init__(self) -> None:
        self._binding = threading.Lock()
        self._lending = threading.Lock()  # one drain's handler at a time on a test's connection
        self._tests: dict[str, BaseDatabaseWrapper] = {}  # connections in a test's transaction
        super().__init__()
        self.hooks.around_attempt(self._around_attempt)
        self.hooks.on_worker_start(self._set_policies)

    def _bind(self, url: str | None) -> None:
        if url is not None:  # by __getattr__, with the settings' URL
            super()._bind(url)

    def __getattr__(self, name: str) -> Any:
        if name not in BOUND:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        with self._binding:
            if name not in self.__dict__:
                super()._bind(conf.storage_url())
        return self.__dict__[name]

    def store(self, specs: Sequence[JobSpec], conn: Any = None) -> list[Job]:
        if conn is not None or not specs:
            return super().store(specs, conn)
        later = [spec.stored_at(time.time()) for spec in specs]
        return self._within(lambda raw: App.store(self, specs, raw), later)

    def store_workflow(self, spec: WorkflowSpec, conn: Any = None) -> Workflow:
        if conn is not None:
            return super().store_workflow(spec, conn)
        return self._within(
            lambda raw: App.store_workflow(self, spec, raw), stored_workflow(spec, time.time())
        )

    def _within(self, store: Callable[[Any], T], later: T) -> T:
        """``store(conn)`` as Django's transaction has it: at once outside one
        (conn None); on Django's own connection when tenure shares its
        database; else on commit (held for ``flush`` in a test's), returning
        ``later``, what will be stored."""
        from django.db import connections, transaction

        connection = connections[conf.alias()]
        if not connection.in_atomic_block:
            return store(None)
        if _in_test_transaction(connection):
            transaction.on_commit(Held(lambda: store(None)), using=connection.alias)
            return later
        raw = self._shared(connection)
        if raw is not None:
            return store(raw)
        transaction.on_commit(lambda: store(None), using=connection.alias)
        return later

    def _shared(self, connection: BaseDatabaseWrapper) -> Any:
        """Django's raw connection, if tenure's storage is its database and
        tenure can write on it (sqlite3, psycopg 3); else None."""
        if not conf.same_database(self.url, connection.settings_dict):
            return None
        connection.ensure_connection()
        raw = connection.connection
        try:
            self.callers(raw)
        except InvalidInput:  # psycopg2's, say
            return None
        return raw

    def flush(self) -> None:
        """Store the jobs held in this thread's test transactions (see
        ``Held``); lend their connections to the handlers ``drain`` runs."""
        from django.db import connections

        for connection in connections.all(initialized_only=True):
            if _in_test_transaction(connection):
                self._tests[connection.alias] = connection
            pending = connection.run_on_commit
            held = [entry for entry in pending if isinstance(entry[1], Held)]
            connection.run_on_commit = [entry for entry in pending if entry not in held]
            for entry in held:
                entry[1]()

    @contextlib.contextmanager
    def _around_attempt(self, job: JobContext) -> Iterator[None]:
        """Around an attempt, what Django does around a request: close the
        connections that are broken or past CONN_MAX_AGE. In a test, a handler
        that ``drain`` runs uses the test's connection instead, one at a time
        (as LiveServerTestCase's threads do): it sees the test's rows, and
        its writes are rolled back with them."""
        from django.db import close_old_connections, connections

        if any(c.in_atomic_block for c in connections.all(initialized_only=True)):
            yield  # tenure.testing.run, in the test's thread: its connection stays open
            return
        lent = [c for c in self._tests.values() if _in_test_transaction(c)]
        if lent:
            with self._lending, _borrowed(lent):
                yield
            return
        close_old_connections()
        try:
            yield
        finally:
            close_old_connections()

    def _set_policies(self, worker_id: str) -> None:
        for name, fields in conf.queue_policies().items():
            self.queue(name).set_policy(**fields)


class Held:
    """Jobs enqueued in a test's transaction, kept as one of its ``on_commit``
    callbacks: Django drops it with a rolled-back savepoint, as it does those of
    a real transaction; ``flush`` (``tenure.testing.drain``) stores it."""

    def __init__(self, store: Callable[[], object]) -> None:
        self.store = store

    def __call__(self) -> None:
        self.store()


def _in_test_transaction(connection: BaseDatabaseWrapper) -> bool:
    """Whether an atomic block of a test case encloses this point (it rolls back)."""
    blocks = getattr(connection, "atomic_blocks", ())
    return any(getattr(block, "_from_testcase", False) for block in blocks)


@contextlib.contextmanager
def _borrowed(lent: list[BaseDatabaseWrapper]) -> Iterator[None]:
    """This thread uses the ``lent`` connections of another thread (a test's)."""
    from django.db import connections

    for connection in lent:
        connection.inc_thread_sharing()
        connections[connection.alias] = connection
    try:
        yield
    finally:
        for connection in lent:
            del connections[connection.alias]
            connection.dec_thread_sharing()
