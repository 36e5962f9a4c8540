"""The SQLite backend: embedded, the default, no server needed."""

from tenure.backends.sqlite.backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
