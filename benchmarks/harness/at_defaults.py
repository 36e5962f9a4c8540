"""The table "At their own defaults": every library run by one worker started
as its quick start shows it (no concurrency or pool flags), on jobs that each
make one Redis round trip (``INCR``); tenure's ratio to the best peer on Redis
and on PostgreSQL, and on SQLite the fraction of SQLite's own claim+complete
rate (:mod:`harness.ceiling`) it reaches."""

from __future__ import annotations

from typing import Any

from harness.report import _rate

COLUMNS = (
    "library",
    "backend",
    "pool at its defaults",
    "jobs at once",
    "prefetch",
    "procs",
    "jobs/s: median (rounds' range)",
    "ratio",
    "first job after launch s",
    "CPU ms/job worker / server",
    "INCRs counted",
)
# What the table keeps of each round (bench._defaults_rounds).
ROUND_KEYS = (
    "drain",
    "first_start",
    "ran",
    "duplicates",
    "counter",
    "timeout",
    "load",
    "ceiling",
    "error",
)
# Issue 26: tenure's default worker against the best peer at its defaults, and
# SQLite against its own ceiling.
PEER_TARGET = 2.0
CEILING_TARGET = 0.6


def _result(v: dict[str, Any]) -> dict[str, Any]:
    return v["result"].get("defaults") or {}


def sqlite_ceiling(d: dict[str, Any], ceiling: float | None) -> float | None:
    """The median of the ceilings measured beside the SQLite rounds, else the
    run's (measured at its start)."""
    beside = sorted(r["ceiling"] for r in d.get("rounds", []) if r.get("ceiling"))
    return beside[(len(beside) - 1) // 2] if beside else ceiling


def best_peers(results: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """Per backend, the best peer's median rate and its name."""
    best: dict[str, tuple[float, str]] = {}
    for v in results.values():
        s, rate = v["subject"], _result(v).get("drain")
        if s["library"] != "tenure" and rate and rate > best.get(s["backend"], (0.0, ""))[0]:
            best[s["backend"]] = (rate, s["library"])
    return best


def rows(results: dict[str, Any], ceiling: float | None, jobs: int) -> list[list[str]]:
    best = best_peers(results)
    out = []
    for v in results.values():
        d = _result(v)
        if not d:
            continue
        s, described = v["subject"], d.get("defaults") or {}
        out.append(
            [
                s["library"],
                s["backend"],
                described.get("pool", "-"),
                described.get("concurrency", "-"),
                described.get("prefetch", "-"),
                str(d.get("processes", "-")),
                _rates_cell(d),
                _ratio_cell(s, d.get("drain"), best, sqlite_ceiling(d, ceiling)),
                _start_cell(d),
                _cpu_cell(d),
                _counted_cell(d, jobs),
            ]
        )
    return out


def _rates_cell(d: dict[str, Any]) -> str:
    if "drain" not in d:
        return f"error: {d['error']}" if "error" in d else "-"
    rounds = d.get("rounds", [])
    rates = sorted(r["drain"] for r in rounds if r["drain"])
    cell = _rate(d["drain"]) + (
        f" ({_rate(rates[0])}-{_rate(rates[-1])})" if len(rates) > 1 else ""
    )
    capped = [r["ran"] for r in rounds if r["timeout"]]
    if capped:
        cell += f"; {len(capped)} round(s) hit the cap, {min(capped):,} to {max(capped):,} ran"
    failed = len(rounds) - len(rates)
    return cell + (f"; {failed} round(s) failed: {d.get('error', '?')}" if failed else "")


def _ratio_cell(
    s: dict[str, Any], rate: float | None, best: dict[str, tuple[float, str]], ceiling: float | None
) -> str:
    if not rate:
        return "-"
    if s["backend"] == "sqlite":
        return f"{rate / ceiling:.2f} of SQLite's {ceiling:,.0f}/s" if ceiling else "-"
    top, name = best.get(s["backend"], (0.0, ""))
    if not top:
        return "-"
    if s["library"] == name:
        return "1.00x (best peer)"
    return f"{rate / top:.2f}x {name}"


def _start_cell(d: dict[str, Any]) -> str:
    starts = sorted(r["first_start"] for r in d.get("rounds", []) if r["first_start"])
    if not starts:
        return "-"
    cell = f"{starts[(len(starts) - 1) // 2]:.2f}"
    return f"{cell} ({starts[0]:.2f}-{starts[-1]:.2f})" if len(starts) > 1 else cell


def _cpu_cell(d: dict[str, Any]) -> str:
    if "cpu_worker" not in d:
        return "-"
    server = f"{d['cpu_server']:.2f}" if "cpu_server" in d else "(no server)"
    return f"{d['cpu_worker']:.2f} / {server}"


def _counted_cell(d: dict[str, Any], jobs: int) -> str:
    """The counter after each round against the handler starts (every job
    once, and again for each that ran twice; but where a round hit the cap:
    the worker ran on while the counter was read); then jobs lost (not run, in
    a round that did not hit the cap) or run twice, over all rounds."""
    rounds = [r for r in d.get("rounds", []) if r["counter"] is not None]
    if not rounds:
        return "-"
    if all(r["counter"] == r["ran"] + r["duplicates"] and r["ran"] == jobs for r in rounds):
        cell = f"all {jobs:,} in each of {len(rounds)} rounds"
    else:
        cell = ", ".join(
            f"{r['counter']:,} for {r['ran'] + r['duplicates']:,} starts"
            + (" (cap)" if r["timeout"] else "")
            for r in rounds
        )
    lost = sum(jobs - r["ran"] for r in rounds if not r["timeout"])
    if lost or d.get("duplicates"):
        cell += f"; {lost} lost, {d.get('duplicates', 0)} run (and counted) twice"
    return cell + (f" ({d['unsettled']} not completed in storage)" if d.get("unsettled") else "")


def targets(results: dict[str, Any], ceiling: float | None) -> list[dict[str, Any]]:
    """Issue 26's targets at defaults, as measured in this run (the shape of
    :func:`harness.report.targets`)."""
    best = best_peers(results)
    out: list[dict[str, Any]] = []

    def tenure(backend: str) -> float | None:
        return _result(results.get(f"tenure/{backend}", {"result": {}})).get("drain")

    def add(name: str, value: float | None, limit: float) -> None:
        if value is None:
            out.append({"target": name, "value": None, "met": None})
        else:
            out.append({"target": name, "value": value, "limit": limit, "met": value >= limit,
                        "unit": "x", "ratio_to_target": value / limit})  # fmt: skip

    for backend in ("redis", "postgres"):
        top, name = best.get(backend, (0.0, "-"))
        mine = tenure(backend)
        add(
            f"{backend} at defaults: tenure >= {PEER_TARGET:g}x the best peer ({name})",
            mine / top if mine and top else None,
            PEER_TARGET,
        )
    sqlite = tenure("sqlite")
    ceiling = sqlite_ceiling(_result(results.get("tenure/sqlite", {"result": {}})), ceiling)
    add(
        f"sqlite at defaults: tenure >= {CEILING_TARGET:g} of SQLite's ceiling"
        + (f" ({ceiling:,.0f}/s)" if ceiling else ""),
        sqlite / ceiling if sqlite and ceiling else None,
        CEILING_TARGET,
    )
    return out
