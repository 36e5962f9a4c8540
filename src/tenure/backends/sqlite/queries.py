"""The SQLite backend's named queries, loaded once from ``queries.sql``."""

from tenure.backends.sqlfile import load_queries

_RAW = load_queries("tenure.backends.sqlite")
Q = {name: sql.replace("{job_columns}", _RAW["job_columns"]) for name, sql in _RAW.items()}
