"""The PostgreSQL backend: many worker hosts, one durable store."""

from tenure.backends.postgres.backend import PostgresBackend

__all__ = ["PostgresBackend"]
