"""What SQLite itself reaches on this machine for a claim and a completion:
the ceiling of any SQLite job queue.

A minimal loop, in one process: ``BEGIN IMMEDIATE``; select the oldest queued
row and mark it active; ``COMMIT``; ``BEGIN IMMEDIATE``; mark it done;
``COMMIT``. WAL and ``synchronous=NORMAL``, as tenure's default, in a file on
the same file system as tenure's benchmark databases. The harness keeps the
best of three.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def claim_and_complete_rate(directory: Path, jobs: int) -> float:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "ceiling.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(
            "CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL, args TEXT NOT NULL)"
        )
        db.execute("CREATE INDEX jobs_state ON jobs (state, id)")
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO jobs (state, args) VALUES ('queued', ?)",
            [(f'{{"i": {i}}}',) for i in range(jobs)],
        )
        db.execute("COMMIT")
        started = time.perf_counter()
        for _ in range(jobs):
            db.execute("BEGIN IMMEDIATE")
            (job_id,) = db.execute(
                "SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1"
            ).fetchone()
            db.execute("UPDATE jobs SET state = 'active' WHERE id = ?", (job_id,))
            db.execute("COMMIT")
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (job_id,))
            db.execute("COMMIT")
        return jobs / (time.perf_counter() - started)
    finally:
        db.close()
