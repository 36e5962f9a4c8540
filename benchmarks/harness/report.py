"""The machine, the table, the targets: printed, and written as JSON and markdown."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

LIBRARIES = (
    "tenure",
    "arq",
    "saq",
    "rq",
    "dramatiq",
    "celery",
    "huey",
    "procrastinate",
    "pgqueuer",
    "redis",
    "psycopg",
    "asyncpg",
    "kombu",
)
COLUMNS = (
    "library",
    "backend",
    "procs (1w/2w)",
    "enqueue 1-by-1 /s",
    "enqueue bulk /s",
    "drain 1w /s",
    "drain 2w /s",
    "idle pickup p50 (max) ms",
    "e2e p50 / p99 ms",
    "idle worker: CPU % / calls/s",
    "CPU s/1k jobs worker / server",
    "kill -9: runs again after",
    "lost",
)


def machine(work: Path, server_versions: dict[str, str]) -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    release = {
        k: v.strip('"')
        for k, _, v in (
            line.partition("=") for line in Path("/etc/os-release").read_text().splitlines()
        )
    }
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "os": f"{release.get('PRETTY_NAME', platform.system())}, Linux {platform.release()}",
        "python": platform.python_version(),
        "servers": server_versions,
        "filesystem": _filesystem(work),
        "load_at_start": os.getloadavg(),
        "libraries": {name: _version(name) for name in LIBRARIES},
    }


def tenure_source(root: Path) -> dict[str, Any]:
    """Which tenure was measured: the commit, the uncommitted files under src/tenure,
    and a digest of its source (compared at the end: others may edit the tree)."""
    import hashlib
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    digest = hashlib.sha256()
    for path in sorted((root / "src" / "tenure").rglob("*")):
        if path.is_file() and path.suffix in (".py", ".sql", ".lua"):
            digest.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": git("status", "--porcelain", "--", "src/tenure").splitlines(),
        "digest": digest.hexdigest()[:16],
    }


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _filesystem(path: Path) -> str:
    best = ("", "?")
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, kind, *_ = line.split()
        if str(path.resolve()).startswith(mount) and len(mount) > len(best[0]):
            best = (mount, kind)
    return best[1]


# -- cells -----------------------------------------------------------------


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else (f"{x * 1000:.1f}" if x < 0.1 else f"{x * 1000:,.0f}")


def _drain_cell(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    if "error" in d and "drain" not in d:
        return "error"
    cell = _rate(d.get("drain"))
    return f"{cell} (timeout: {d['ran']:,} ran)" if d.get("timeout") else cell


def row(subject: dict[str, Any], result: dict[str, Any]) -> list[str]:
    d1, d2 = result.get("drain1") or {}, result.get("drain2") or {}
    lat, k9 = result.get("latency") or {}, result.get("kill9")
    library = subject["library"] + (f" ({subject['variant']})" if subject["variant"] else "")
    procs = "/".join(str(d.get("processes", "-")) for d in (d1, d2)) if d1 or d2 else "-"
    best = [d for d in (d1, d2) if d]
    one = max((d["enqueue_one"] for d in best if "enqueue_one" in d), default=None)
    bulk = max((d["enqueue_bulk"] for d in best if "enqueue_bulk" in d), default=None)
    bulk_cell = "n/a (no bulk API)" if best and bulk is None else _rate(bulk)
    if subject["variant"]:
        one, bulk_cell = None, "-"
    idle = "error" if "error" in lat else "-"
    if "idle_p50" in lat:
        idle = f"{_ms(lat['idle_p50'])} ({_ms(lat['idle_max'])})"
    e2e = f"{_ms(lat['e2e_p50'])} / {_ms(lat['e2e_p99'])}" if lat.get("e2e_p50") else "-"
    idle_cost = "-"
    if "idle_cpu" in lat:
        calls = f"{lat['idle_calls']:.1f}" if "idle_calls" in lat else "(no server)"
        idle_cost = f"{lat['idle_cpu'] * 100:.1f} / {calls}"
    cpu = "-"
    if "cpu_worker" in d1:
        server = f"{d1['cpu_server']:.2f}" if "cpu_server" in d1 else "(no server)"
        cpu = f"{d1['cpu_worker']:.2f} / {server}"
    return [
        library,
        subject["backend"],
        procs,
        _rate(one),
        bulk_cell,
        _drain_cell(d1),
        _drain_cell(d2),
        idle,
        e2e,
        idle_cost,
        cpu,
        _kill9_cell(k9),
        _lost_cell(result),
    ]


def _kill9_cell(k9: dict[str, Any] | None) -> str:
    if not k9:
        return "-"
    if "error" in k9:
        return "error"
    if not k9["recovered"]:
        return f"LOST: not run again within {k9['cap']:.0f} s"
    tail = "" if k9.get("completed") else ", did not complete"
    if len(k9.get("restarts", ())) > 1:
        n = len(k9["restarts"])
        return f"{k9['restart']:.2f} s (max {k9['restart_max']:.2f}, {n} kills){tail}"
    return f"{k9['restart']:.2f} s{tail}"


def _lost_cell(result: dict[str, Any]) -> str:
    """Jobs that never ran (side channel), ran twice, or ran but were not
    completed in the library's own storage (where the adapter can tell)."""
    runs = [result.get(k) or {} for k in ("drain1", "drain2", "latency")]
    if not any(runs):
        return "-"
    lost = sum(r.get("lost", 0) for r in runs)
    dupes = sum(r.get("duplicates", 0) for r in runs)
    unsettled = sum(r.get("unsettled", 0) for r in runs)  # drains only (bench.median_run)
    cell = f"{lost} lost" + (f", {dupes} twice" if dupes else "") if lost or dupes else "0"
    return cell + (f" ({unsettled} not completed in storage)" if unsettled else "")


# -- targets ---------------------------------------------------------------


def best_drain(result: dict[str, Any]) -> float | None:
    rates = [(result.get(k) or {}).get("drain") for k in ("drain1", "drain2")]
    return max((r for r in rates if r), default=None)


def drain_ratio(results: dict[str, Any], backend: str) -> tuple[float | None, str]:
    """tenure's best drain on ``backend`` over its best peer's there, and that peer."""
    peers = [
        v
        for v in results.values()
        if v["subject"]["backend"] == backend and v["subject"]["library"] != "tenure"
    ]
    best = max(
        ((best_drain(p["result"]) or 0, p["subject"]["library"]) for p in peers),
        default=(0.0, "-"),
    )
    mine = best_drain(results.get(f"tenure/{backend}", {}).get("result", {}))
    return (mine / best[0] if mine and best[0] else None), best[1]


def targets(results: dict[str, Any], ceiling: float | None) -> list[dict[str, Any]]:
    """Each target of the issue, as a ratio measured in this run."""
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, limit: float, *, above: bool, unit: str) -> None:
        if value is None:
            out.append({"target": name, "value": None, "met": None, "detail": "not measured"})
            return
        met = value >= limit if above else value < limit
        by = value / limit if above else limit / value if value else float("inf")
        out.append(
            {
                "target": name,
                "value": value,
                "limit": limit,
                "met": met,
                "unit": unit,
                "ratio_to_target": by,
            }
        )

    def get(sid: str) -> dict[str, Any]:
        return results.get(sid, {}).get("result", {})

    for backend in ("redis", "postgres"):
        ratio, peer = drain_ratio(results, backend)
        add(
            f"{backend}: tenure drain >= 2x the best peer ({peer})",
            ratio,
            2.0,
            above=True,
            unit="x",
        )
    for backend in ("sqlite", "postgres", "redis"):
        alo, amo = (
            best_drain(get(f"tenure/{backend}")),
            best_drain(get(f"tenure/{backend}/at-most-once")),
        )
        add(
            f"{backend}: at-least-once drain >= 80% of at-most-once",
            alo / amo if alo and amo else None,
            0.8,
            above=True,
            unit="x",
        )
    for backend in ("redis", "postgres"):
        r = get(f"tenure/{backend}")
        bulk = (
            max(
                ((r.get(k) or {}).get("enqueue_bulk") or 0 for k in ("drain1", "drain2")), default=0
            )
            or None
        )
        add(f"{backend}: bulk enqueue >= 50,000 jobs/s", bulk, 50_000, above=True, unit="/s")
        idle = (r.get("latency") or {}).get("idle_p50")
        add(
            f"{backend}: idle pickup p50 < 5 ms",
            idle * 1000 if idle else None,
            5.0,
            above=False,
            unit="ms",
        )
    sqlite = best_drain(get("tenure/sqlite"))
    add(
        "sqlite: drain >= half of SQLite's own claim+complete rate"
        + (f" ({ceiling:,.0f}/s)" if ceiling else ""),
        sqlite / ceiling if sqlite and ceiling else None,
        0.5,
        above=True,
        unit="x",
    )
    return out


def target_rows(items: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for t in items:
        if t["value"] is None:
            rows.append([t["target"], "-", "not measured"])
            continue
        value = {
            "x": f"{t['value']:.2f}x",
            "/s": f"{t['value']:,.0f} jobs/s",
            "ms": f"{t['value']:.1f} ms",
        }[t["unit"]]
        verdict = "met" if t["met"] else "MISSED"
        rows.append([t["target"], value, f"{verdict} ({t['ratio_to_target']:.2f} of the target)"])
    return rows


def markdown_table(header: list[str] | tuple[str, ...], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


# -- lifecycle events: the same drains with the queue's events on and off ----

EVENTS_OFF = "events off"
EVENTS_LIMIT = 0.9  # issue 22: events cut no drain by more than 10%
EVENTS_COLUMNS = (
    "subject",
    "workers",
    "drain /s, events on",
    "events off",
    "on/off: median (range) of rounds",
    "rounds",
    "CPU µs/job (worker + server), on / off",
)


def events_ab(results: dict[str, Any], twins: dict[str, Any]) -> list[dict[str, Any]]:
    """For each subject measured with its events-off twin, and each number of
    workers: the median drains, and the ratio on/off of each round (the runs of
    a round are the same index in both lists)."""
    out: list[dict[str, Any]] = []
    for sid, twin in twins.items():
        on_result = results.get(sid, {}).get("result", {})
        off_result = results.get(twin.id, {}).get("result", {})
        for w in (1, 2):
            on, off = on_result.get(f"drain{w}") or {}, off_result.get(f"drain{w}") or {}
            runs = zip(on.get("runs", []), off.get("runs", []), strict=True)
            pairs = [(a, b) for a, b in runs if a and b]
            if not pairs:
                continue
            ratios = sorted(a / b for a, b in pairs)
            out.append(
                {
                    "subject": sid,
                    "backend": results[sid]["subject"]["backend"],
                    "workers": w,
                    "on": on.get("drain"),
                    "off": off.get("drain"),
                    "ratios": ratios,
                    "ratio": ratios[(len(ratios) - 1) // 2],
                    "loads": [x for x in on.get("loads", []) + off.get("loads", []) if x],
                    "cpu_on": _median(on.get("cpus")),
                    "cpu_off": _median(off.get("cpus")),
                }
            )
    return out


def events_rows(items: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            e["subject"],
            str(e["workers"]),
            _rate(e["on"]),
            _rate(e["off"]),
            f"{e['ratio']:.2f} ({e['ratios'][0]:.2f}-{e['ratios'][-1]:.2f})",
            str(len(e["ratios"])),
            f"{_us(e.get('cpu_on'))} / {_us(e.get('cpu_off'))}",
        ]
        for e in items
    ]


def _median(xs: list[float] | None) -> float | None:
    return sorted(xs)[(len(xs) - 1) // 2] if xs else None


def _us(x: float | None) -> str:
    """CPU s per 1,000 jobs (as the drains count it) in µs per job."""
    return "-" if x is None else f"{x * 1000:,.0f}"


def events_targets(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per backend, its worst drain (the lowest median ratio of rounds) with events."""
    out: list[dict[str, Any]] = []
    for backend in ("sqlite", "postgres", "redis"):
        mine = [e for e in items if e["backend"] == backend]
        if not mine:
            continue
        worst = min(mine, key=lambda e: e["ratio"])
        out.append(
            {
                "target": f"{backend}: events cut no drain by more than 10% "
                f"(worst: {worst['subject']}, {worst['workers']}w)",
                "value": worst["ratio"],
                "limit": EVENTS_LIMIT,
                "met": worst["ratio"] >= EVENTS_LIMIT,
                "unit": "x",
                "ratio_to_target": worst["ratio"] / EVENTS_LIMIT,
            }
        )
    return out
