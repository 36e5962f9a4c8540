"""The floor under an idle pickup on this machine: one bare round trip to Redis
(PING) and to PostgreSQL (SELECT 1), right after the last one and after a gap
of idleness, no queue involved.

    benchmarks/.venv/bin/python benchmarks/idle_floor.py [--rounds 8]

On a virtual machine whose idle vCPUs are descheduled, waking them costs
milliseconds: the first round trip after a second of idleness pays it twice
(the server's CPU, then the client's), and so does every library's idle
pickup, whose jobs are enqueued one second apart. Starts throwaway servers from
the machine's binaries (``tests/servers.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import PostgresServer, RedisServer

GAPS = (0.0, 0.01, 0.1, 1.0)


def floor(name: str, round_trip: Callable[[], object], rounds: int) -> None:
    round_trip()
    for gap in GAPS:
        times = []
        for _ in range(rounds):
            time.sleep(gap)
            started = time.perf_counter()
            round_trip()
            times.append((time.perf_counter() - started) * 1000)
        print(f"{name:10} after {gap:5.2f} s idle: p50 {statistics.median(times):6.2f} ms,"
              f" max {max(times):6.2f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    rounds = parser.parse_args().rounds

    import psycopg
    import redis

    servers: list[RedisServer | PostgresServer] = []
    try:
        servers.append(r := RedisServer())
        with redis.Redis(port=r.port) as client:
            floor("redis", client.ping, rounds)
        servers.append(p := PostgresServer())
        with psycopg.connect(p.url(), autocommit=True) as conn:
            floor("postgresql", lambda: conn.execute("SELECT 1").fetchone(), rounds)
    finally:
        for server in servers:
            server.close()


if __name__ == "__main__":
    main()
