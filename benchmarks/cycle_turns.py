"""The server's CPU per job of the PostgreSQL cycle, this tree's statements
against another tree's, in turns (issue 42): one client, two databases of one
throwaway server, each drained by cycles of ``--batch`` jobs (complete the
last claim, claim the next), taken in turns; each database's CPU is the
``/proc`` ticks of its backends.

    python benchmarks/cycle_turns.py --base /tmp/base/src [--jobs 30000]
        [--batch 37] [--rounds 3] [--ddl SQL]

``--base`` is a directory holding another tree's ``tenure`` package (an
export: ``git archive REV src``); only its ``queries.sql`` and its
statements' composition are taken, every other part of the client is this
tree's, so the figure is the statements' alone. ``--ddl`` is run on this
tree's database once its schema is made (``{schema}`` for the schema): a
change of indexes or tables, measured before it is a migration. Cycles in turns see the same
moments of a shared machine: a tree against itself gives 0.98-1.00 at a
load average of 15-25 (a tick of /proc is 10 ms: 1-2% of a round), where
drains one after the other vary by 2x. The default
batch is what a draining ``tenure worker --pool thread --concurrency 4``
carries (rows per call in pg_stat_statements).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import PostgresServer

from tenure.backends import sqlfile
from tenure.backends.base import WorkerInfo
from tenure.backends.postgres import statements
from tenure.backends.postgres.backend import PostgresBackend
from tenure.job import JobSpec
from tenure.worker.identity import new_worker_id

TICK = os.sysconf("SC_CLK_TCK")
WORKER = new_worker_id()  # as long as a real one: events carry it


def base_templates(src: Path) -> dict[str, str]:
    """The statements of the tree at ``src``: its queries.sql composed with its
    own CODE_PARTS and COMPOSED (its statements.py up to its TEMPLATES)."""
    postgres = src / "tenure" / "backends" / "postgres"
    parts = sqlfile._NAME.split((postgres / "queries.sql").read_text())
    blocks = {n: b.strip() for n, b in zip(parts[1::2], parts[2::2], strict=True)}
    module = (postgres / "statements.py").read_text().split("\nTEMPLATES = ")[0]
    names: dict[str, Any] = {}
    exec(module.replace("from __future__ import annotations", ""), names)
    return statements.compose(blocks, names["CODE_PARTS"], names["COMPOSED"])


def ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def filled(
    server: PostgresServer, jobs: int, templates: Any, ddl: str | None = None
) -> tuple[PostgresBackend, str]:
    """A backend on a new database of ``jobs`` queued jobs, and the database's
    name; its cycles run ``templates`` (None: this tree's), on its schema
    changed by ``ddl``."""
    url = server.new_database()
    backend = PostgresBackend.from_url(url)
    if templates is not None:
        identifiers = {"schema": "tenure", "channel": "tenure.tenure"}
        backend.parts.claiming.q = statements.Statements(identifiers, templates)
    await backend.open()
    if ddl:
        server.psql(ddl.replace("{schema}", "tenure"), url.rsplit("/", 1)[1])
    await backend.register_worker(WorkerInfo(WORKER, "host", 0, ()))
    for first in range(0, jobs, 1000):
        batch = range(first, min(first + 1000, jobs))
        await backend.enqueue([JobSpec.create("noop", {"i": i}, queue="bench") for i in batch])
    return backend, url.rsplit("/", 1)[1]


async def one_round(server: PostgresServer, args: Any, templates: Any) -> dict[str, float]:
    made = {"base": await filled(server, args.jobs, templates),
            "this": await filled(server, args.jobs, None, args.ddl)}  # fmt: skip
    sides = {side: backend for side, (backend, _) in made.items()}
    items: dict[str, list[tuple[str, int, bytes]]] = {k: [] for k in sides}
    done = dict.fromkeys(sides, 0)

    async def cycle(side: str) -> bool:
        _, claimed = await sides[side].complete_and_claim(
            items[side], WORKER, ["bench"], args.batch
        )
        done[side] += len(items[side])
        items[side] = [(j.id, j.fence, b"null") for j in claimed]
        return bool(claimed)

    for _ in range(10):  # statements prepared, caches warm
        for side in sides:
            await cycle(side)
    done = dict.fromkeys(sides, 0)
    pids = {}
    for side, (_, database) in made.items():
        listed = server.psql(f"SELECT pid FROM pg_stat_activity WHERE datname = '{database}'")
        pids[side] = [int(p) for p in listed.split()]
    first = {side: sum(map(ticks, pids[side])) for side in sides}
    live = list(sides)
    while live:
        live = [side for side in live if await cycle(side)]
    cpu = {side: (sum(map(ticks, pids[side])) - first[side]) / TICK for side in sides}
    for backend in sides.values():
        await backend.close()
    return {side: cpu[side] * 1e6 / done[side] for side in sides}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="another tree's src")
    parser.add_argument("--jobs", type=int, default=30000)
    parser.add_argument("--batch", type=int, default=37)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ddl", help="SQL run on this tree's database before it fills")
    args = parser.parse_args()
    templates = base_templates(args.base)
    server = PostgresServer()
    ratios = []
    try:
        for k in range(args.rounds):
            got = asyncio.run(one_round(server, args, templates))
            ratios.append(got["this"] / got["base"])
            load = os.getloadavg()[0]
            print(f"round {k + 1} (load {load:.1f}): base {got['base']:.1f} us/job, this "
                  f"{got['this']:.1f} us/job, this / base {ratios[-1]:.3f}")  # fmt: skip
    finally:
        server.close()
    print(f"this / base, server CPU per job, median [range] of {len(ratios)} rounds: "
          f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")  # fmt: skip


if __name__ == "__main__":
    main()
