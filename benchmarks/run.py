"""tenure and its peers, on the same servers, with the same job and the same
number of worker processes. Prints a table; writes benchmarks/results/*.json
and, for a full run, the results section of docs/benchmarks.md.

    make bench            # full (about an hour on 2 cores)
    make bench QUICK=1    # small N: a smoke test of every adapter (about 3 min)
    python3 benchmarks/run.py [--quick] [--only ID]... [--workload W]... [--no-docs]
    python3 benchmarks/run.py --workload defaults   # the "at their own defaults" table alone
    python3 benchmarks/run.py --only tenure --workload drain --events both
        # tenure's drains with lifecycle events on and off, in alternating rounds

The peers are installed, pinned (benchmarks/requirements.txt), into
benchmarks/.venv, which this script creates on first use and re-runs itself in.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / ".venv"
REQUIREMENTS = HERE / "requirements.txt"


def bootstrap() -> None:
    """Run in benchmarks/.venv, creating it first if needed (never the main .venv)."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    newest = max(REQUIREMENTS.stat().st_mtime, (ROOT / "pyproject.toml").stat().st_mtime)
    if not stamp.exists() or stamp.stat().st_mtime < newest:
        print(f"creating {VENV} (pinned peers from {REQUIREMENTS.name}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, "-r", str(REQUIREMENTS), "-e", f"{ROOT}[postgres,redis]"], check=True)
        stamp.touch()
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N, short caps")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="run subjects whose id contains this (repeatable), e.g. tenure/redis",
    )
    parser.add_argument(
        "--workload",
        action="append",
        default=[],
        choices=["drain", "latency", "kill9", "defaults"],
        help="run only these workloads (repeatable; drain includes enqueue)",
    )
    parser.add_argument(
        "--events",
        choices=["on", "both"],
        default="on",
        help="both: each tenure drain also with its queue's events off, rounds alternating",
    )
    parser.add_argument(
        "--record-baseline",
        action="store_true",
        help="write this run's drain ratios to benchmarks/baseline.json (the drain guard's floor)",
    )
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/benchmarks.md")
    args = parser.parse_args()
    bootstrap()
    sys.path.insert(0, str(HERE))
    from harness.bench import run_all

    partial = bool(args.only or args.workload)
    return run_all(
        quick=args.quick,
        only=args.only,
        workloads=args.workload,
        events_ab=args.events == "both",
        docs=not (args.quick or args.no_docs or partial),
        # its own section: rewritten by any run of it for every library
        defaults_docs=not (args.quick or args.no_docs or args.only)
        and (not args.workload or "defaults" in args.workload),
        events_docs=not (args.quick or args.no_docs),
        record_baseline=args.record_baseline,
    )


if __name__ == "__main__":
    started = time.time()
    code = main()
    print(f"done in {time.time() - started:.0f} s")
    sys.exit(code)
