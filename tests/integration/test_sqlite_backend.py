"""SQLite specifics: URLs, pragmas, migrations, liveness locks."""

import asyncio
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tenure import App, Outcome
from tenure.backends import from_url
from tenure.backends.base import WorkerInfo
from tenure.backends.sqlite import SQLiteBackend, rescue
from tenure.backends.sqlite.claiming import _claimable
from tenure.backends.sqlite.opening import MIGRATIONS
from tenure.backends.sqlite.queries import Q
from tenure.cli import cli
from tenure.core.workflows import Step, chain, compile_flow
from tenure.errors import BackendUnavailable, InvalidInput
from tenure.job import JobSpec

EXPECTED_TABLES = {
    "queues": ["name", "policy", "rate_tokens", "rate_at", "key_cursor", "keyed"],
    "jobs": [
        "seq", "id", "queue", "task", "args", "state", "priority", "run_at", "created_at",
        "key", "attempts", "stalls", "max_attempts", "timeout", "fence", "worker", "lease_ttl",
        "lease_expires_at", "result", "error", "dead_reason", "progress", "finished_at",
        "started_at", "recovered_from", "cancel_requested", "traceparent", "budget_from",
        "workflow", "concurrency_key", "debounce", "unique_for",
    ],
    "attempts": [
        "job_id", "fence", "attempt", "worker", "started_at", "ended_at", "outcome", "error",
    ],
    "workers": ["id", "hostname", "pid", "queues", "started_at", "last_seen"],
    "sweeps": ["id", "last_at"],
    "schema_migrations": ["version", "name", "applied_at"],
    "events": ["id", "n", "queue", "kind", "at", "jobs", "data", "kinds"],
    "schedules": ["queue", "name", "tick", "job_id"],
    "workflows": [
        "id", "key", "state", "created_at", "finished_at", "many", "pending", "blocked",
    ],
    "steps": [
        "job_id", "may_fail", "pending", "blocked", "delay", "cancel_reason", "spawns",
        "spawned_by", "spawn_seq",
    ],
    "edges": ["dependent", "ord", "upstream", "state"],
    "key_buckets": ["queue", "key", "tokens", "at"],
    "workflow_outcomes": ["outcome", "n"],
}  # fmt: skip
EXPECTED_INDEXES = {
    "jobs_key", "jobs_ready", "jobs_scheduled", "jobs_lease", "jobs_worker", "jobs_queue_state",
    "jobs_finished", "jobs_workflow", "workflows_key", "steps_spawned", "edges_upstream",
    "jobs_keyed", "jobs_by_key",
}  # fmt: skip
# Migration 13 (concurrency keys) undone, but for its jobs_key: applied to an
# older database so that this tenure's enqueue may write to it, then taken
# away before the upgrade applies it again.
KEYS_UNDONE = """
    DROP INDEX jobs_keyed; DROP INDEX jobs_by_key; DROP INDEX jobs_key; DROP TABLE key_buckets;
    ALTER TABLE jobs DROP COLUMN key_state;
    ALTER TABLE jobs DROP COLUMN concurrency_key; ALTER TABLE jobs DROP COLUMN debounce;
    ALTER TABLE jobs DROP COLUMN unique_for; ALTER TABLE queues DROP COLUMN key_cursor;
    ALTER TABLE queues DROP COLUMN keyed;
    CREATE UNIQUE INDEX jobs_key ON jobs (queue, key)
        WHERE key IS NOT NULL AND state IN ('scheduled', 'queued', 'active');
"""


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'tenure.db'}"


def test_migrations_produce_the_expected_schema(sqlite_url, open_backend, tmp_path):
    open_backend(sqlite_url)
    db = sqlite3.connect(tmp_path / "tenure.db")
    tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == set(EXPECTED_TABLES)
    for table, columns in EXPECTED_TABLES.items():
        assert [r[1] for r in db.execute(f"PRAGMA table_info({table})")] == columns
    indexes = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert indexes >= EXPECTED_INDEXES
    versions = [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY 1")]
    assert versions == [v for v, _, _ in MIGRATIONS]
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("skip", [(), ('["new"]',)], ids=["every task", "passing over"])
def test_a_claim_across_queues__reads_each_through_its_index(
    sqlite_url, open_backend, tmp_path, skip
):
    """Not a sort of every queued job of the queues: the claim costs the same at
    any backlog (passing over some tasks or not)."""
    backend = open_backend(sqlite_url)
    for queue in ("a", "b", "c"):
        backend.enqueue([JobSpec.create("t", {}, queue=queue) for _ in range(50)])
    db = sqlite3.connect(tmp_path / "tenure.db")
    db.execute("ANALYZE")
    params = [x for q in ("a", "b", "c") for x in (q, *skip, 4)]
    plan = [row[3] for row in db.execute(
        "EXPLAIN QUERY PLAN " + _claimable(3, bool(skip)), (*params, 4)
    )]  # fmt: skip
    reads = [step for step in plan if "jobs" in step.split()]
    assert reads == ["SEARCH jobs USING INDEX jobs_ready (queue=?)"] * 3, plan


WORKFLOW_MOVES = [
    "move_edges", "count_steps", "count_workflows", "release_steps", "cancel_blocked_steps",
    "mark_upstream_failed", "restore_steps", "clear_cancel_reason", "step_fields",
    "step_upstreams", "workflow_jobs", "workflow_sinks", "open_edges_from", "spawned",
]  # fmt: skip


@pytest.mark.parametrize("name", WORKFLOW_MOVES)
def test_a_workflows_move__reads_only_its_rows_through_indexes(
    sqlite_url, open_backend, tmp_path, name
):
    """The fan-in is a counter: no statement that moves a step reads its
    group, or any table, by a scan."""
    open_backend(sqlite_url)
    db = sqlite3.connect(tmp_path / "tenure.db")
    db.execute("ANALYZE")
    sql = Q[name]
    params = ['["x"]'] * (len(set(re.findall(r"\?(\d+)", sql))) or sql.count("?"))
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params)]
    scans = [step for step in plan if step.startswith("SCAN") and "json_each" not in step
             and not step.startswith("SCAN t ")]  # fmt: skip
    assert scans == [], plan


# A keyed claim's statements and the enqueue's by key, each with its index.
KEYED_READS = {
    "keys_after": ["jobs_keyed", "jobs_keyed", "jobs_keyed", "jobs_keyed"],
    "key_jobs": ["jobs_keyed"],
    "active_of_keys": ["jobs_keyed"],
    "keyed_window": ["jobs_ready"],
    "find_unfinished_by_key": ["jobs_by_key"],
    "find_finished_by_key": ["jobs_by_key"],
}


@pytest.mark.parametrize("name", KEYED_READS)
def test_a_keyed_claim_and_a_keyed_enqueue__read_through_their_indexes(
    sqlite_url, open_backend, tmp_path, name
):
    """Seeks, never a scan of a key's or a queue's jobs: claims cost the same
    at any backlog, however many keys."""
    open_backend(sqlite_url)
    db = sqlite3.connect(tmp_path / "tenure.db")
    db.execute("ANALYZE")
    sql = Q[name]
    params = ["[]"] * (len(set(re.findall(r"\?(\d+)", sql))) or sql.count("?"))
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params)]
    used = [m.group(1) for s in plan if (m := re.search(r"USING (?:COVERING )?INDEX (\w+)", s))]
    assert used == KEYED_READS[name], plan
    assert not [s for s in plan if s.startswith("SCAN jobs")], plan


def test_reopening__applies_nothing_twice(sqlite_url, open_backend, tmp_path):
    open_backend(sqlite_url)
    open_backend(sqlite_url)
    db = sqlite3.connect(tmp_path / "tenure.db")
    assert db.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(MIGRATIONS)


def _open_and_close(url):
    import asyncio

    async def go():
        b = from_url(url)
        await b.open()
        await b.close()

    asyncio.run(go())


def test_workers_starting_at_once__migrate_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'race.db'}"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_and_close, args=(url,)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = sqlite3.connect(tmp_path / "race.db")
    assert db.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(MIGRATIONS)


def test_a_schema_newer_than_this_tenure__is_refused(tmp_path, portal):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    b = from_url(url)
    portal.run(b.open())
    portal.run(b.close())
    db = sqlite3.connect(tmp_path / "new.db")
    db.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    db.commit()
    with pytest.raises(BackendUnavailable, match="upgrade tenure"):
        portal.run(from_url(url).open())


@pytest.mark.parametrize(
    ("url", "path", "durable"),
    [
        ("sqlite:///tenure.db", "tenure.db", False),
        ("sqlite:////tmp/x/t.db", "/tmp/x/t.db", False),
        ("sqlite:///t.db?durable=1", "t.db", True),
        ("sqlite:///:memory:", ":memory:", False),
    ],
)
def test_sqlite_urls(url, path, durable):
    b = SQLiteBackend.from_url(url)
    assert (b.path, b.durable) == (path, durable)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://", "names no file"),
        ("sqlite://host/x.db", "malformed SQLite URL"),
        ("sqlite:///x.db?fast=1", "unknown SQLite URL option"),
        ("sqlite:///x.db?busy_timeout=abc", "bad SQLite URL option"),
        ("mysql://x", "accepted schemes: sqlite"),
        ("tenure.db", "malformed backend URL"),
    ],
)
def test_bad_urls__are_refused_with_what_is_accepted(url, message):
    with pytest.raises(InvalidInput, match=message):
        from_url(url)


def test_durable_mode__syncs_fully(tmp_path, portal):
    b = from_url(f"sqlite:///{tmp_path / 'd.db'}?durable=1")
    portal.run(b.open())
    try:
        assert b.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        portal.run(b.close())


def test_a_missing_directory__is_backend_unavailable(portal):
    with pytest.raises(BackendUnavailable, match="does not exist"):
        portal.run(from_url("sqlite:////nonexistent/dir/x.db").open())


def test_an_unwritable_database__is_backend_unavailable(tmp_path, portal):
    path = tmp_path / "ro.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(BackendUnavailable):
        portal.run(from_url(f"sqlite:///{path}").open())


def test_the_workers_cycle__never_waits_on_the_event_loop_for_a_lock(tmp_path, portal):
    """complete_and_claim runs on the event loop's thread only when the write lock
    is free; while another process writes, it waits on the backend's thread, and
    the loop stays free (here: a timer keeps firing)."""
    path = tmp_path / "t.db"
    b = SQLiteBackend(str(path), busy_timeout=10.0)
    portal.run(b.open())
    try:
        [job] = portal.run(b.enqueue([JobSpec.create("t", {})]))
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock

        async def cycle_while_ticking():
            ticks = 0

            async def tick():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.ensure_future(tick())
            cycle = asyncio.ensure_future(b.complete_and_claim([], "w", ["default"], 5))
            await asyncio.sleep(0.3)
            assert not cycle.done()  # waiting for the lock...
            other.execute("COMMIT")  # ...until it is free
            _, claimed = await cycle
            ticker.cancel()
            return ticks, claimed

        ticks, claimed = portal.run(cycle_while_ticking())
        assert ticks >= 10  # the loop ran while the cycle waited
        assert [j.id for j in claimed] == [job.id]
        # with the lock free, the cycle runs on the loop's own connection
        lost, none = portal.run(b.complete_and_claim([(job.id, job.fence + 1, b"1")], "w", [], 0))
        assert (lost, none) == (set(), [])
        assert portal.run(b.get(job.id)).result == 1
    finally:
        portal.run(b.close())


def test_upgrading_with_attempts_running__keeps_their_history_and_they_end_once(
    sqlite_url, open_backend, tmp_path, monkeypatch
):
    """Migration 2 (an attempt's row written when it ends) on a database of
    version 1 with an attempt running: its open row moves into its job; an open
    row that a worker not yet upgraded writes later is closed, not doubled."""
    import tenure.backends.sqlite.opening as module

    monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS[:1])
    old = open_backend(sqlite_url)
    written = ("events", "job_trace_context", "event_kinds", "concurrency_keys")
    newer = [text for _, name, text in MIGRATIONS if name in written]
    with sqlite3.connect(tmp_path / "tenure.db") as db:  # what this tenure's enqueue writes to
        db.executescript("".join(newer))
    first, second = old.enqueue([JobSpec.create("t"), JobSpec.create("t")])
    with sqlite3.connect(tmp_path / "tenure.db") as db:
        db.executescript("DROP TABLE events; ALTER TABLE queues DROP COLUMN events;"
                         " ALTER TABLE jobs DROP COLUMN traceparent;" + KEYS_UNDONE)  # fmt: skip
    claimed = (
        "UPDATE jobs SET state = 'active', fence = 1, attempts = 1, worker = 'w',"
        " lease_ttl = 30, lease_expires_at = 1e10 WHERE id = '{id}';"
        " INSERT INTO attempts (job_id, fence, attempt, worker, started_at)"
        " VALUES ('{id}', 1, 1, 'w', {start})"
    )
    with sqlite3.connect(tmp_path / "tenure.db") as db:
        db.executescript(claimed.format(id=first.id, start=11.5))
    monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS)
    new = open_backend(sqlite_url)
    db = sqlite3.connect(tmp_path / "tenure.db", isolation_level=None)
    assert db.execute("SELECT count(*) FROM attempts").fetchone() == (0,)
    [running] = new.get(first.id).history
    assert (running.worker, running.started_at, running.outcome) == ("w", 11.5, None)
    db.executescript(claimed.format(id=second.id, start=12.5))  # as version 1 claimed
    assert len(new.get(second.id).history) == 1
    new.complete(first.id, 1, "one")
    new.complete(second.id, 1, "two")
    for job, start in ((first, 11.5), (second, 12.5)):
        [a] = new.get(job.id).history
        assert (a.worker, a.started_at, a.outcome) == ("w", start, "completed")
        assert a.ended_at is not None


def test_upgrading_to_workflows__keeps_every_job_and_its_history(
    sqlite_url, open_backend, tmp_path, monkeypatch
):
    """Migration 12 copies jobs into a table that admits 'waiting': every row,
    its number and its attempts are kept, and attempts still go with their job."""
    import tenure.backends.sqlite.opening as module

    before = [m for m in MIGRATIONS if m[0] < 12]
    monkeypatch.setattr(module, "MIGRATIONS", before)
    old = open_backend(sqlite_url)
    [keys] = [text for _, name, text in MIGRATIONS if name == "concurrency_keys"]
    with sqlite3.connect(tmp_path / "tenure.db") as db:  # what this tenure's enqueue writes to
        db.executescript(keys)
    done, running, queued = old.enqueue([JobSpec.create("t", {"n": n}) for n in range(3)])
    columns = ", ".join(EXPECTED_TABLES["jobs"][: EXPECTED_TABLES["jobs"].index("workflow")])
    with sqlite3.connect(tmp_path / "tenure.db") as db:
        db.executescript(KEYS_UNDONE)
        db.executescript(f"""
            UPDATE jobs SET state = 'completed', fence = 1, attempts = 1, result = '1',
                            finished_at = 5 WHERE id = '{done.id}';
            INSERT INTO attempts (job_id, fence, attempt, worker, started_at, ended_at, outcome)
            VALUES ('{done.id}', 1, 1, 'w', 4, 5, 'completed');
            UPDATE jobs SET state = 'active', fence = 1, attempts = 1, worker = 'w',
                            lease_ttl = 30, lease_expires_at = 1e10, started_at = 6
            WHERE id = '{running.id}';
        """)
        jobs = db.execute(f"SELECT {columns} FROM jobs ORDER BY seq").fetchall()
        attempts = db.execute("SELECT * FROM attempts").fetchall()
    monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS)
    new = open_backend(sqlite_url)
    db = sqlite3.connect(tmp_path / "tenure.db", isolation_level=None)
    assert db.execute(f"SELECT {columns} FROM jobs ORDER BY seq").fetchall() == jobs
    assert db.execute("SELECT * FROM attempts").fetchall() == attempts
    assert [j.id for j in new.list(limit=10).jobs] == [queued.id, running.id, done.id]
    new.complete(running.id, 1, "two")
    assert [a.outcome for a in new.get(running.id).history] == ["completed"]
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("DELETE FROM jobs WHERE id = ?", (done.id,))
    assert db.execute("SELECT count(*) FROM attempts WHERE job_id = ?", (done.id,)).fetchone() == (
        0,
    )
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []


# -- who may use the file: readers, other programs, other users -------------


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other users may enter (pytest's own are private to root)."""
    where = Path(tempfile.mkdtemp(prefix="tenure-shared-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where)


# Runs as root, imports what it needs, then becomes nobody: the interpreter
# itself may sit where nobody may not read (pyenv under /root).
AS_NOBODY = """
import fcntl, os, pwd, socket, sys, time
import tenure.cli, tenure.cli.output, tenure.backends.sqlite
nobody = pwd.getpwnam("nobody")
os.setgroups([])
os.setgid(nobody.pw_gid)
os.setuid(nobody.pw_uid)
"""


def as_nobody(code: str, **popen: Any) -> subprocess.Popen[str]:
    if os.geteuid() != 0:
        pytest.skip("becoming another user needs root")
    return subprocess.Popen(
        [sys.executable, "-c", AS_NOBODY + textwrap.dedent(code)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen,
    )  # fmt: skip


def foreign_db(path: Path) -> None:
    """Another program's database, in its own journal mode."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    db.execute("INSERT INTO notes (body) VALUES ('keep me')")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    "command",
    [["status"], ["jobs"], ["enqueue", "t", "--args", "{}"], ["policy", "set", "lease_ttl=30"]],
    ids=["status", "jobs", "enqueue", "policy-set"],
)
def test_another_programs_database__is_refused_by_every_command_and_left_unchanged(
    tmp_path, command
):
    path = tmp_path / "notes.db"
    foreign_db(path)
    before, files = digest(path), sorted(os.listdir(tmp_path))
    result = CliRunner().invoke(cli, ["--url", f"sqlite:///{path}", *command])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and f"{path} is not tenure's (tables notes)" in line
    assert digest(path) == before and sorted(os.listdir(tmp_path)) == files


def test_another_programs_database__is_adopted_only_when_the_url_says_so(tmp_path, open_backend):
    path = tmp_path / "app.db"
    foreign_db(path)
    open_backend(f"sqlite:///{path}?adopt=1")
    db = sqlite3.connect(path)
    assert db.execute("SELECT body FROM notes").fetchall() == [("keep me",)]
    open_backend(f"sqlite:///{path}")  # tenure's tables are there now: no option needed


def test_events_stored_before_migration_10__read_the_same_after_it(
    sqlite_url, open_backend, tmp_path, monkeypatch
):
    """Rows of one kind each (written before rows held several kinds) keep
    their events and ids; the next events are numbered after them."""
    import tenure.backends.sqlite.opening as module

    monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS[:9])
    open_backend(sqlite_url).close()
    rows = [
        (2, 2, "default", "completed", 1.0, '["a","b"]', None),
        (4, 2, "default", "started", 1.0, '["c","d"]', '[{"attempt":1},{"attempt":2}]'),
    ]
    with sqlite3.connect(tmp_path / "tenure.db") as db:
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS)
    backend = open_backend(sqlite_url)
    found = [(e.id, e.kind, e.job_id, e.data) for e in backend.read_events(None, "1", 10)]
    assert found == [
        ("2", "completed", "b", {}),
        ("3", "started", "c", {"attempt": 1}),
        ("4", "started", "d", {"attempt": 2}),
    ]
    job = backend.enqueue([JobSpec.create("t")])[0]
    assert [(e.id, e.job_id) for e in backend.read_events(None, "4", 10)] == [("5", job.id)]


def test_a_reader__neither_migrates_nor_converts_tenures_database(tmp_path, portal):
    path = tmp_path / "old.db"
    portal.run(from_url(f"sqlite:///{path}").open())  # its thread and connections end with it
    db = sqlite3.connect(path)
    db.execute("DELETE FROM schema_migrations WHERE version = ?", (MIGRATIONS[-1][0],))
    db.execute("PRAGMA journal_mode = DELETE")
    db.commit()
    db.close()
    before = digest(path)
    reader = from_url(f"sqlite:///{path}", read_only=True)
    with pytest.raises(BackendUnavailable, match="a worker migrates it"):
        portal.run(reader.open())
    assert digest(path) == before


def test_a_user_who_may_only_read_the_database__can_run_status(shared_dir):
    path = shared_dir / "t.db"
    with App(f"sqlite:///{path}") as app:
        app.enqueue("t", {}, queue="mail")
    path.chmod(0o444)  # root's, read-only; nobody may not write beside it either
    before = digest(path)
    argv = ["tenure", "--url", f"sqlite:///{path}", "status"]
    status = as_nobody(f"sys.argv = {argv!r}\ntenure.cli.main()")
    out, err = status.communicate(timeout=60)
    assert status.returncode == 0, err
    assert "mail" in out
    assert digest(path) == before


HOLDER = """
import sys
from tenure.backends import from_url
from tenure.backends.base import WorkerInfo
from tenure.portal import Portal

portal = Portal()
backend = from_url(sys.argv[1])
portal.run(backend.open())
portal.run(backend.register_worker(WorkerInfo("w1", "host", 1, ("default",))))
print(len(portal.run(backend.claim("w1", ["default"], 1))), flush=True)
sys.stdin.read()
"""


def test_another_user__cannot_make_a_dead_worker_look_alive(shared_dir, open_backend):
    """Holding a shared flock on a dead worker's lock file would make it look
    alive to every sweeper; its attempts would wait for their lease to expire."""
    url = f"sqlite:///{shared_dir / 't.db'}"
    backend = open_backend(url)
    backend.enqueue([JobSpec.create("t", {})])
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "1"
    lock = shared_dir / "t.db.workers" / "w1.lock"
    squatter = as_nobody(
        f"""
        try:
            fd = os.open({str(lock)!r}, os.O_RDONLY)
        except OSError as exc:
            print("refused", exc, flush=True)
            sys.exit()
        print("opened", flush=True)
        fcntl.flock(fd, fcntl.LOCK_SH)  # as soon as the worker dies
        sys.stdin.read()
        """,
        stdin=subprocess.PIPE,
    )
    try:
        assert squatter.stdout is not None
        said = squatter.stdout.readline()
        holder.kill()
        holder.communicate()
        report = backend.rescue()
        assert [r.outcome for r in report.rescued] == [Outcome.CRASHED], said
        assert said.startswith("refused"), said
    finally:
        for process in (squatter, holder):
            process.kill()
            process.communicate()


def test_another_user__cannot_ring_a_workers_bell(shared_dir, open_backend):
    """What another user can find of a worker's wake-up socket (/proc/net/unix),
    it cannot send to; the database's owner still wakes it at once."""
    backend = open_backend(f"sqlite:///{shared_dir / 't.db'}")
    worker_id = f"w-{uuid.uuid4().hex}"
    backend.register_worker(WorkerInfo(worker_id, "host", 1, ("default",)))
    flood = as_nobody(
        f"""
        found = sent = 0
        refused = set()
        ringer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ringer.setblocking(False)
        for line in open("/proc/net/unix").read().splitlines()[1:]:
            name = line.split()[-1]
            if {worker_id!r} not in name:
                continue
            found += 1
            address = "\\0" + name[1:] if name.startswith("@") else name
            for _ in range(1000):
                try:
                    ringer.sendto(b"!", address)
                    sent += 1
                except OSError as exc:
                    refused.add(type(exc).__name__)
        print(found, sent, sorted(refused))
        """
    )
    out, err = flood.communicate(timeout=60)
    found, sent, refused = out.split(maxsplit=2)
    assert (found, sent) == ("1", "0"), (out, err)
    assert "PermissionError" in refused
    began = time.monotonic()
    backend.enqueue([JobSpec.create("t", {})])  # rings every registered worker
    backend.wait_for_jobs(["default"], 30.0)
    assert time.monotonic() - began < 10.0  # woken, not timed out


def test_a_released_job__wakes_the_idle_workers_of_its_queue(sqlite_url, open_backend):
    worker, idle = open_backend(sqlite_url), open_backend(sqlite_url)
    idle.register_worker(WorkerInfo("w-idle", "host", 1, ("default",)))  # its bell
    worker.register_worker(WorkerInfo("w-1", "host", 1, ("default",)))
    [job] = worker.enqueue([JobSpec.create("t", {})])
    started = time.monotonic()
    idle.wait_for_jobs(["default"], 10.0)  # the enqueue's wake-up, spent here
    assert time.monotonic() - started < 5.0
    [claimed] = worker.claim("w-1", ["default"], 1)
    worker.release(job.id, claimed.fence)
    started = time.monotonic()
    idle.wait_for_jobs(["default"], 10.0)
    assert time.monotonic() - started < 5.0  # woken by the release, not timed out at 10 s


def test_a_released_step__wakes_the_idle_workers_from_the_cycle_too(sqlite_url, open_backend):
    """The worker's cycle runs on the loop's own connection (its fast path): the
    step its completion releases rings the bells once it commits."""
    worker, idle = open_backend(sqlite_url), open_backend(sqlite_url)
    idle.register_worker(WorkerInfo("w-idle", "host", 1, ("default",)))  # its bell
    worker.register_worker(WorkerInfo("w-1", "host", 1, ("default",)))
    flow = compile_flow(chain(*(Step(JobSpec.create(t, {})) for t in ("a", "b", "c"))))
    worker.enqueue_workflow(flow)
    idle.wait_for_jobs(["default"], 10.0)  # the enqueue's wake-up, spent here
    [a] = worker.claim("w-1", ["default"], 1)
    worker.complete(a.id, a.fence, "a")  # on the backend's thread
    started = time.monotonic()
    idle.wait_for_jobs(["default"], 10.0)
    assert time.monotonic() - started < 5.0  # woken by the release, not timed out at 10 s
    [b] = worker.claim("w-1", ["default"], 1)
    assert worker.inner.db.fast is not None
    worker.complete_and_claim([(b.id, b.fence, b'"b"')], "w-1", ["default"], 0)
    started = time.monotonic()
    idle.wait_for_jobs(["default"], 10.0)
    assert time.monotonic() - started < 5.0
    assert worker.get(flow.steps[2].spec.id).state == "queued"


def test_a_prune__goes_in_transactions_of_at_most_prune_tx_jobs(
    sqlite_url, open_backend, monkeypatch
):
    """Each holds the write lock that the workers' cycles wait for."""
    monkeypatch.setattr(rescue, "PRUNE_TX", 4)
    b = open_backend(sqlite_url)
    b.change_policy("default", {"keep_completed": 0})
    b.register_worker(WorkerInfo("w", "h", 1, ("default",)))
    b.enqueue([JobSpec.create("t", {}) for _ in range(10)])
    assert b.complete_many([(j.id, j.fence, b"1") for j in b.claim("w", ["default"], 10)]) == set()
    commits = []
    b.inner.conn.set_trace_callback(lambda s: commits.append(s) if s == "COMMIT" else None)
    assert (b.prune(7), b.prune(7)) == (7, 3)
    assert len(commits) == 3  # 4 + 3, then 3 of 4: none is left


def test_a_user_who_may_only_read_the_database__can_list_the_workers(shared_dir):
    """Such a user may not open the liveness locks: a worker is listed, taken
    as alive (its heartbeat's age tells tenure health the rest)."""
    url = f"sqlite:///{shared_dir / 't.db'}"
    with App(url) as app:
        app.enqueue("t", {})
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"
        argv = ["tenure", "--url", url, "workers", "--json"]
        listing = as_nobody(f"import tenure.cli.operators\nsys.argv = {argv!r}\ntenure.cli.main()")
        out, err = listing.communicate(timeout=60)
        assert listing.returncode == 0, err
        [worker] = json.loads(out)
        assert (worker["id"], worker["alive"]) == ("w1", True)
    finally:
        holder.kill()
        holder.communicate()


def test_a_sweep_that_waited_for_the_write_lock__stamps_when_it_acted(
    tmp_path: Path, open_backend: Any
) -> None:
    """A sweep read its clock before it had the write lock: after waiting for
    a writer (a frozen worker), it stamped a recovery seconds before it acted."""
    import threading

    path = tmp_path / "t.db"
    backend = open_backend(f"sqlite:///{path}")
    [job] = backend.enqueue([JobSpec.create("t", {})])
    [claimed] = backend.claim("gone-worker", ["default"], 1)  # no such worker: crashed
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    released = threading.Timer(1.0, holder.commit)
    released.start()
    began = time.time()
    try:
        report = backend.rescue()
    finally:
        released.join()
        holder.close()
    [rescued] = report.rescued
    assert rescued.job_id == job.id == claimed.id
    assert rescued.at >= began + 0.9  # after the lock came free, not when it was asked for
