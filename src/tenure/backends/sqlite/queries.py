"""The SQLite backend's named queries, loaded once from ``queries.sql``."""

from tenure.backends.sqlfile import load_queries

_RAW = load_queries("tenure.backends.sqlite")
# Parts of statements, written into them (without their comment lines).
_PARTS = {
    "{" + name + "}": "\n".join(ln for ln in _RAW.pop(name).splitlines() if not ln.startswith("--"))
    for name in ("job_columns", "proven")
}


def _rendered(sql: str) -> str:
    for mark, part in _PARTS.items():
        sql = sql.replace(mark, part)
    return sql


Q = {name: _rendered(sql) for name, sql in _RAW.items()}
