"""The ``TENURE`` setting: where tenure's storage is, which of Django's
databases it shares, and the queues' policies; and its system checks.

Without ``TENURE["URL"]`` (nor ``$TENURE_URL``), the URL is made from the
Django database ``TENURE["DATABASE"]`` names (``"default"``): tenure keeps its tables in
that database (SQLite: the same file; PostgreSQL: the same database, in
tenure's own schema), through connections of its own.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from tenure.config import QueuePolicy
from tenure.core.names import check_name
from tenure.core.urls import redacted
from tenure.errors import InvalidInput

KEYS = {"URL": "a storage URL", "DATABASE": "a Django database alias",
        "QUEUES": "a dict of queues' policies"}  # fmt: skip
# libpq's settings a Django PostgreSQL database's OPTIONS may hold, passed on to tenure's
LIBPQ = ("sslmode", "sslcert", "sslkey", "sslrootcert", "sslpassword", "options", "service",
         "application_name", "target_session_attrs", "connect_timeout", "passfile")  # fmt: skip
POLICY_FIELDS = {f.name for f in dataclasses.fields(QueuePolicy)}
_scratch: dict[str, str] = {}  # a test database's stand-in, by the in-memory name


def tenure_settings() -> Mapping[str, Any]:
    """``settings.TENURE`` (``{}`` when absent); InvalidInput unless a dict."""
    from django.conf import settings

    value = getattr(settings, "TENURE", {})
    if not isinstance(value, Mapping):
        raise InvalidInput(f"settings.TENURE must be a dict, got {type(value).__name__}")
    return value


def alias() -> str:
    """The Django database tenure shares (when it has no URL of its own)."""
    return str(tenure_settings().get("DATABASE", "default"))


def storage_url() -> str:
    """tenure's URL: ``TENURE["URL"]``, else ``$TENURE_URL``, else the one of
    the shared Django database as its connection has it now (a test run's
    database, in a test)."""
    url = tenure_settings().get("URL") or os.environ.get("TENURE_URL")
    if url:
        return str(url)
    from django.db import connections

    return url_of_database(connections[alias()].settings_dict, alias())


def url_of_database(database: Mapping[str, Any], name: str = "default") -> str:
    """The tenure URL of a Django database's settings; InvalidInput for an
    engine tenure cannot share (set ``TENURE["URL"]`` then)."""
    engine = str(database.get("ENGINE", ""))
    if engine.endswith(".sqlite3"):
        path = str(database.get("NAME") or "")
        if _in_memory(path):
            # A test run's in-memory database, which no other connection can
            # open: tenure gets a file of its own for the run, as throwaway.
            path = _scratch.get(path) or _scratch_file(path)
        return f"sqlite:///{quote(os.path.abspath(path))}?adopt=1"
    if engine.endswith(".postgresql"):
        return _postgres_url(database)
    raise InvalidInput(
        f"tenure cannot share Django's database {name!r} (ENGINE {engine or 'unset'}): "
        "it shares PostgreSQL and SQLite; set TENURE = {'URL': 'postgresql://…' or "
        "'redis://…' or 'sqlite:///…'} in the settings"
    )


def _in_memory(name: str) -> bool:
    return not name or name == ":memory:" or "mode=memory" in name


def _scratch_file(name: str) -> str:
    folder = tempfile.mkdtemp(prefix="tenure-django-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    _scratch[name] = os.path.join(folder, "tenure.db")
    return _scratch[name]


def _postgres_url(database: Mapping[str, Any]) -> str:
    user, password = str(database.get("USER") or ""), str(database.get("PASSWORD") or "")
    host, port = str(database.get("HOST") or ""), str(database.get("PORT") or "")
    query = {k: str(v) for k, v in (database.get("OPTIONS") or {}).items() if k in LIBPQ}
    credentials = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
    if host.startswith("/"):  # a Unix socket's folder: libpq's host= wins over the URL's
        query["host"], host = host, ""
    netloc = f"{credentials}@" if credentials else ""
    # tenure's URL names a host: Django's default (none) is localhost here
    netloc += (f"[{host}]" if ":" in host else host or "localhost") + (f":{port}" if port else "")
    tail = f"?{urlencode(query, quote_via=quote)}" if query else ""
    return f"postgresql://{netloc}/{quote(str(database.get('NAME') or ''), safe='')}{tail}"


def same_database(url: str, database: Mapping[str, Any]) -> bool:
    """Whether tenure's ``url`` is the Django database ``database``."""
    if str(database.get("ENGINE", "")).endswith(".sqlite3") and _in_memory(
        str(database.get("NAME") or "")
    ):
        return False  # tenure's stand-in for it is another file
    try:
        ours = url_of_database(database)
    except InvalidInput:
        return False
    if ours == url:
        return True
    mine, theirs = urlsplit(url), urlsplit(ours)
    if mine.scheme == "sqlite" == theirs.scheme:
        from tenure.backends.sqlite.url import path_of_url

        try:
            return os.path.samefile(path_of_url(url), path_of_url(ours))
        except (OSError, InvalidInput):
            return False
    if mine.scheme.startswith("postgres") and theirs.scheme.startswith("postgres"):
        return (mine.hostname, mine.port or 5432, mine.path) == (
            theirs.hostname, theirs.port or 5432, theirs.path)  # fmt: skip
    return False


def queue_policies() -> dict[str, dict[str, Any]]:
    """``TENURE["QUEUES"]``: the policy fields each queue is given at a worker's start."""
    queues = tenure_settings().get("QUEUES") or {}
    return {str(name): dict(fields) for name, fields in queues.items()}


def unknown_keys() -> list[str]:
    """A message for each key of ``settings.TENURE`` that tenure does not read (a typo?)."""
    try:
        found = tenure_settings()
    except InvalidInput:
        return []  # problems() says it
    return [f"unknown key {key!r} in settings.TENURE: it takes " +
            ", ".join(f"{k} ({what})" for k, what in KEYS.items())
            for key in found if key not in KEYS]  # fmt: skip


def problems() -> list[str]:
    """What is wrong with ``settings.TENURE``, one message each (none: fine)."""
    try:
        found = tenure_settings()
    except InvalidInput as exc:
        return [str(exc)]
    return _url_problems(found) + _queue_problems(found.get("QUEUES"))


def _url_problems(found: Mapping[str, Any]) -> list[str]:
    from django.conf import settings

    from tenure.backends.factory import from_url

    url, source = found.get("URL"), "TENURE['URL']"
    if not url and os.environ.get("TENURE_URL"):
        url, source = os.environ["TENURE_URL"], "$TENURE_URL"
    try:
        if not url:
            name = str(found.get("DATABASE", "default"))
            if name not in settings.DATABASES:
                return [f"TENURE['DATABASE'] names {name!r}, which is not in DATABASES"]
            url, source = url_of_database(settings.DATABASES[name], name), f"database {name!r}"
        elif not isinstance(url, str):
            return [f"TENURE['URL'] must be a string, got {type(url).__name__}"]
        from_url(url)
    except InvalidInput as exc:
        return [f"{source} {redacted(str(url))}: {exc}" if url else str(exc)]
    return []


def _queue_problems(queues: Any) -> list[str]:
    if queues is None:
        return []
    if not isinstance(queues, Mapping):
        return [f"TENURE['QUEUES'] must be a dict of queue names, got {type(queues).__name__}"]
    said = []
    for name, fields in queues.items():
        where = f"TENURE['QUEUES'][{name!r}]"
        try:
            check_name("queue", name)
        except InvalidInput as exc:
            said.append(f"{where}: {exc}")
            continue
        if not isinstance(fields, Mapping):
            said.append(f"{where} must be a dict of policy fields, got {type(fields).__name__}")
            continue
        unknown = sorted(set(fields) - POLICY_FIELDS)
        if unknown:
            said.append(f"{where}: unknown policy fields {unknown}; the fields are "
                        + ", ".join(sorted(POLICY_FIELDS)))  # fmt: skip
            continue
        try:
            QueuePolicy().replace(**fields)
        except InvalidInput as exc:
            said.append(f"{where}: {exc}")
    return said
