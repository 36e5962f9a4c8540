"""The drain guard: each backend's drain as a ratio to its best peer in the
same run (SQLite: to SQLite's own claim+complete rate, measured in the run),
held against the last ratio recorded in ``benchmarks/baseline.json``.

A ratio more than TOLERANCE below the recorded one fails the run loudly, so
that a drop is seen at the commit that causes it, not thirty commits later.
Ratios, not rates: the machine's speed drifts from run to run, a ratio to a
peer measured minutes apart on the same servers does not (much). A backend
not measured in the run (``--only``, ``--quick``) is not judged; ``--record``
writes this run's ratios as the new baseline, for a change whose cost is
accepted, or a win.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from harness.report import best_drain, drain_ratio

BASELINE = Path(__file__).resolve().parents[1] / "baseline.json"
TOLERANCE = 0.15


def ratios(results: dict[str, Any], ceiling: float | None) -> dict[str, dict[str, Any]]:
    """Each backend's drain over its best peer's (or SQLite's ceiling), where
    both were measured in this run."""
    out: dict[str, dict[str, Any]] = {}
    for backend in ("postgres", "redis"):
        ratio, peer = drain_ratio(results, backend)
        if ratio is not None:
            out[backend] = {"ratio": ratio, "against": peer}
    sqlite = best_drain(results.get("tenure/sqlite", {}).get("result", {}))
    if sqlite and ceiling:
        out["sqlite"] = {"ratio": sqlite / ceiling, "against": "SQLite claim+complete ceiling"}
    return out


def load() -> dict[str, Any]:
    return json.loads(BASELINE.read_text()) if BASELINE.exists() else {"drain": {}}


def judge(measured: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One verdict per backend measured: its ratio, the recorded one, and
    whether it fell more than TOLERANCE below it."""
    baseline, verdicts = load(), []
    for backend, m in sorted(measured.items()):
        recorded = baseline["drain"].get(backend)
        floor = recorded["ratio"] * (1 - TOLERANCE) if recorded else None
        verdicts.append(
            {
                "backend": backend,
                "ratio": m["ratio"],
                "against": m["against"],
                "recorded": recorded,
                "floor": floor,
                "fell": floor is not None and m["ratio"] < floor,
            }
        )
    return verdicts


def write(measured: dict[str, dict[str, Any]], run: str, tree: str | None) -> None:
    """This run's ratios become the baseline of the backends it measured."""
    baseline = load()
    for backend, m in measured.items():
        baseline["drain"][backend] = {
            "ratio": round(m["ratio"], 3),
            "against": m["against"],
            "run": run,
            "tree": tree,
        }
    BASELINE.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")


def table(verdicts: list[dict[str, Any]]) -> Table:
    out = Table(title="drain guard: ratio to the best peer, against the last recorded")
    for c in ("backend", "this run", "recorded", "floor", "verdict"):
        out.add_column(c)
    for v in verdicts:
        rec = v["recorded"]
        out.add_row(
            v["backend"],
            f"{v['ratio']:.2f}x {v['against']}",
            f"{rec['ratio']:.2f}x ({rec['run']}, {rec['tree']})" if rec else "none recorded",
            f"{v['floor']:.2f}x" if v["floor"] is not None else "-",
            "FELL" if v["fell"] else "ok" if rec else "-",
        )
    return out


def conclude(data: dict[str, Any], run: str, *, record: bool, say: Callable[[Any], None]) -> bool:
    """Show the guard's table; record this run's ratios, or say loudly which
    fell: True if any fell (and none was recorded)."""
    if data["guard"]:
        say(table(data["guard"]))
    if record:
        write({v["backend"]: v for v in data["guard"]}, run, data["tenure_source"]["commit"])
        say(f"baseline: {BASELINE.name} now holds this run's drain ratios")
        return False
    fell = [v for v in data["guard"] if v["fell"]]
    for v in fell:
        rec = v["recorded"]
        say(
            f"[bold red]DRAIN REGRESSION[/] {v['backend']}: {v['ratio']:.2f}x {v['against']}, "
            f"below the floor {v['floor']:.2f}x ({rec['ratio']:.2f}x recorded by {rec['run']} "
            f"at {rec['tree']}, less {TOLERANCE:.0%})"
        )
    return bool(fell)
