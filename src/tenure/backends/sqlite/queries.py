"""The SQLite backend's named queries, composed once from ``queries.sql``
(``backends/sqlfile.py``); ``{queues}``, ``{each}`` and ``{where}`` are
filled in per call, from fixed fragments."""

from tenure.backends.sqlfile import compose, load_queries

Q = compose(load_queries("tenure.backends.sqlite"), left={"queues", "each", "where"})
