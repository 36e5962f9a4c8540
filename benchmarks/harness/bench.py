"""The run: every subject through its workloads, the defaults workload in
rounds, kill -9 for all at once, then the tables, the targets, the JSON and the
docs."""

from __future__ import annotations

import json
import os
import shutil
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness import at_defaults, guard, report
from harness.ceiling import claim_and_complete_rate
from harness.driver import HERE
from harness.stores import Servers
from harness.workloads import (
    Scale,
    Subject,
    drain_at_defaults,
    enqueue_and_drain,
    kill9,
    latency,
)

ROOT = HERE.parent
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
DEFAULTS_BEGIN, DEFAULTS_END = "<!-- bench:defaults:begin -->", "<!-- bench:defaults:end -->"
EVENTS_BEGIN, EVENTS_END = "<!-- bench:events:begin -->", "<!-- bench:events:end -->"
HEADLINE_POOL = "thread"
# Each drain runs up to DRAIN_RUNS times, while its runs took under DRAIN_RUNS_WITHIN
# seconds together, and counts with its median: a drain of 20,000 jobs that takes half
# a second varied by up to 40% from run to run on 2 shared cores (long ones vary less).
DRAIN_RUNS = 5
DRAIN_RUNS_WITHIN = 60.0
REDIS_PEERS = ("arq", "saq", "rq", "dramatiq", "celery", "huey")
POSTGRES_PEERS = ("procrastinate", "pgqueuer")

console = Console(highlight=False, width=None if os.isatty(1) else 220)


def subjects() -> list[Subject]:
    from tenure.backends.factory import available_kinds

    kinds = available_kinds()
    out: list[Subject] = []
    for backend, peers in (("redis", REDIS_PEERS), ("postgres", POSTGRES_PEERS), ("sqlite", ())):
        if backend in kinds:
            mod = "peers.tenure_peer"
            out.append(Subject("tenure", backend, mod, env={"BENCH_POOL": HEADLINE_POOL}))
            other = "process" if HEADLINE_POOL == "thread" else "thread"
            out.append(
                Subject(
                    "tenure",
                    backend,
                    mod,
                    f"{other} pool",
                    {"BENCH_POOL": other},
                    workloads=("drain",),
                )
            )
            out.append(
                Subject(
                    "tenure",
                    backend,
                    mod,
                    "at-most-once",
                    {"BENCH_POOL": HEADLINE_POOL, "BENCH_DELIVERY": "at-most-once"},
                    workloads=("drain",),
                )
            )
        out += [Subject(p, backend, f"peers.{p}_peer") for p in peers]
    return out


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median drain rate (the lower of the middle two), with every
    run's rate beside it; jobs lost, run twice or not completed in storage, and
    errors, are those of all the runs."""
    timed = sorted((r for r in runs if "drain" in r), key=lambda r: r["drain"])
    out = dict(timed[(len(timed) - 1) // 2] if timed else runs[-1])
    out["runs"] = [r.get("drain") for r in runs]
    out["loads"] = [r.get("load") for r in runs]
    out["cpus"] = [r["cpu_worker"] + r.get("cpu_server", 0.0) for r in runs if "cpu_worker" in r]
    for key in ("lost", "duplicates"):
        out[key] = sum(r.get(key, 0) for r in runs)
    out["unsettled"] = sum(max(0, r["ran"] - r["verify"].get("completed", 0))
                           for r in runs if r.get("verify"))  # fmt: skip
    if errors := [r["error"] for r in runs if "error" in r]:
        out["error"] = errors[0]
    return out


def _guard(what: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except Exception as exc:
        traceback.print_exc()
        return {"error": f"{what}: {type(exc).__name__}: {exc}"}


def events_off(s: Subject) -> Subject:
    """A tenure subject's twin whose queue records no lifecycle events (drains only)."""
    variant = ", ".join(x for x in (s.variant, report.EVENTS_OFF) if x)
    return replace(s, variant=variant, env={**s.env, "BENCH_EVENTS": "off"}, workloads=("drain",))


def run_all(
    *,
    quick: bool,
    only: list[str],
    workloads: list[str],
    docs: bool,
    events_ab: bool = False,
    events_docs: bool = False,
    defaults_docs: bool = False,
    record_baseline: bool = False,
) -> int:
    scale = Scale.quick() if quick else Scale()
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    work = HERE / ".work" / stamp
    work.mkdir(parents=True)
    chosen = [s for s in subjects() if not only or any(o in s.id for o in only)]
    twins = {s.id: events_off(s) for s in chosen if events_ab and s.library == "tenure"}
    freeze_tenure(work)
    servers = Servers(work)
    results: dict[str, Any] = {}
    data: dict[str, Any] = {
        "started": stamp,
        "quick": quick,
        "scale": asdict(scale),
        "headline_pool": HEADLINE_POOL,
    }
    try:
        data["machine"] = report.machine(work, servers.versions())
        data["tenure_source"] = report.tenure_source(ROOT)
        console.print(
            f"machine: {data['machine']['cpu']}, {data['machine']['cores']} cores; work dir {work}"
        )
        data["ceiling"] = max(
            claim_and_complete_rate(work / "ceiling", scale.jobs) for _ in range(3)
        )
        console.print(f"SQLite claim+complete ceiling: {data['ceiling']:,.0f} jobs/s")
        for s in chosen:
            group = [s, twins[s.id]] if s.id in twins else [s]
            for g in group:
                results[g.id] = {"subject": {**asdict(g), "id": g.id}, "result": {}}
            _measure(
                group,
                servers=servers,
                work=work,
                scale=scale,
                outs=[results[g.id]["result"] for g in group],
                only=workloads,
            )
        if not workloads or "defaults" in workloads:
            _defaults_rounds([s for s in chosen if "defaults" in s.workloads], servers, work, scale,
                             results)  # fmt: skip
        if not workloads or "kill9" in workloads:
            _kill9_all([s for s in chosen if "kill9" in s.workloads], servers, work, scale, results)
        data["machine"]["load_at_end"] = os.getloadavg()
        end = report.tenure_source(ROOT)
        changed = end["digest"] != data["tenure_source"]["digest"]
        data["tenure_source"]["tree_changed_during_run"] = changed
        if changed:
            console.print(
                "note: tenure's source in the tree changed during the run; "
                "the run used the copy taken at its start"
            )
    finally:
        servers.close()
    data["results"] = results
    data["targets"] = report.targets(results, data.get("ceiling"))
    data["defaults_targets"] = at_defaults.targets(results, data.get("ceiling"))
    data["events"] = report.events_ab(results, twins)
    data["targets"] += report.events_targets(data["events"])
    data["guard"] = [] if quick else guard.judge(guard.ratios(results, data.get("ceiling")))
    _print(data)
    kind = "quick" if quick else "partial" if only or workloads else "full"
    out = HERE / "results" / f"{kind}-{stamp}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(data, indent=1, default=str) + "\n")
    console.print(f"results: {out.relative_to(ROOT)}")
    _write_sections(data, out, docs=docs, defaults_docs=defaults_docs, events_docs=events_docs)
    if not quick and guard.conclude(data, out.name, record=record_baseline, say=console.print):
        return 1
    if any("error" in r for v in results.values() for r in v["result"].values()):
        console.print(f"some runs failed: their logs are kept in {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _write_sections(
    data: dict[str, Any], out: Path, *, docs: bool, defaults_docs: bool, events_docs: bool
) -> None:
    """The sections of docs/benchmarks.md this run measured."""
    if docs:
        write_docs(data, out)
        console.print(f"docs: {DOCS.relative_to(ROOT)}")
    if defaults_docs and any("defaults" in v["result"] for v in data["results"].values()):
        write_defaults_docs(data, out)
        console.print(f"docs: {DOCS.relative_to(ROOT)} (at their own defaults)")
    if events_docs and data["events"]:
        write_events_docs(data, out)
        console.print(f"docs: {DOCS.relative_to(ROOT)} (lifecycle events)")


def freeze_tenure(work: Path) -> None:
    """Run tenure from a copy of its source taken now: others may edit the tree."""
    from harness import workloads

    shutil.copytree(ROOT / "src" / "tenure", work / "src" / "tenure",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    workloads.SOURCE[:] = [str(work / "src")]


def _measure(
    group: list[Subject],
    *,
    servers: Servers,
    work: Path,
    scale: Scale,
    outs: list[dict[str, Any]],
    only: list[str],
) -> None:
    """The workloads of ``group[0]``; the drains of a group of several (a subject
    and its twin) in alternating rounds, ABBA, so that drift of the machine's
    load meets each alike."""
    s = group[0]
    if "drain" in s.workloads and (not only or "drain" in only):
        named = " / ".join(g.id for g in group)
        for w in (1, 2):
            console.print(f"{named}: enqueue {scale.jobs:,}, drain with {w} worker(s) ...")
            started = time.monotonic()
            runs: list[list[dict[str, Any]]] = [[] for _ in group]
            while len(runs[0]) < DRAIN_RUNS and (
                len(runs[0]) < len(group)  # a pair: one ABBA at least
                or time.monotonic() - started < DRAIN_RUNS_WITHIN * len(group)
            ):
                order = list(range(len(group)))
                for k in order if len(runs[0]) % 2 == 0 else order[::-1]:
                    g = group[k]
                    r = _guard(
                        "drain", lambda g=g, w=w: enqueue_and_drain(g, servers, work, scale, w)
                    )
                    r["load"] = os.getloadavg()[0]
                    runs[k].append(r)
                    label = f"{g.id}: " if len(group) > 1 else ""
                    console.print(f"   {label}{_brief(r)} [{time.monotonic() - started:.0f} s]")
            for out, rs in zip(outs, runs, strict=True):
                out[f"drain{w}"] = median_run(rs)
    out = outs[0]
    if "latency" in s.workloads and (not only or "latency" in only):
        console.print(f"{s.id}: idle pickup x{scale.idle}, e2e at {scale.rate:g}/s ...")
        out["latency"] = r = _guard("latency", lambda: latency(s, servers, work, scale))
        console.print(f"   {_brief(r)}")


def _brief(r: dict[str, Any]) -> str:
    keys = (
        "enqueue_one",
        "enqueue_bulk",
        "drain",
        "first_start",
        "counter",
        "load",
        "processes",
        "lost",
        "duplicates",
        "idle_cpu",
        "idle_calls",
        "idle_p50",
        "e2e_p50",
        "e2e_p99",
        "error",
    )
    parts = []
    for k in keys:
        if k in r:
            v = r[k]
            parts.append(f"{k}={v:,.4g}" if isinstance(v, float) else f"{k}={v}")
    return " ".join(parts)


def _defaults_rounds(
    chosen: list[Subject], servers: Servers, work: Path, scale: Scale, results: dict[str, Any]
) -> None:
    """Every library once per round, in reverse order every other round, so
    that drift of the machine's load meets each alike; each one's median round,
    with a summary of every round. SQLite's ceiling is measured again just
    before each SQLite run, under the same load."""
    runs: dict[str, list[dict[str, Any]]] = {s.id: [] for s in chosen}
    for k in range(scale.rounds):
        for s in chosen if k % 2 == 0 else chosen[::-1]:
            console.print(f"at defaults, round {k + 1}/{scale.rounds}: {s.id} ...")
            ceiling = None
            if s.backend == "sqlite":
                ceiling = claim_and_complete_rate(work / "ceiling", scale.jobs)
            r = _guard("defaults", lambda s=s: drain_at_defaults(s, servers, work, scale))
            r["ceiling"] = ceiling
            runs[s.id].append(r)
            console.print(f"   {_brief(r)}")
    for sid, rs in runs.items():
        out = median_run(rs)
        out["rounds"] = [{k: r.get(k) for k in at_defaults.ROUND_KEYS} for r in rs]
        results[sid]["result"]["defaults"] = out


def _kill9_all(
    chosen: list[Subject], servers: Servers, work: Path, scale: Scale, results: dict[str, Any]
) -> None:
    """All at once (each on its own Redis database or PostgreSQL database): the
    workers are idle but for one sleeping handler, and the caps are long."""
    console.print(
        f"kill -9: {len(chosen)} libraries at once, {scale.kill_handler:g} s handler, "
        f"SIGKILL {scale.kill_after:g} s in, cap {scale.kill_cap:g} s ..."
    )
    with ThreadPoolExecutor(max_workers=len(chosen) or 1) as pool:
        futures = {
            s.id: pool.submit(
                _guard, "kill9", lambda s=s, slot=k + 1: kill9(s, servers, work, scale, slot)
            )
            for k, s in enumerate(chosen)
        }
        for sid, future in futures.items():
            results[sid]["result"]["kill9"] = r = future.result()
            console.print(f"   {sid}: {report._kill9_cell(r)} {r.get('error', '')}")


def _print(data: dict[str, Any]) -> None:
    quick = " (QUICK: small N)" if data["quick"] else ""
    results = data["results"]
    if any(k != "defaults" for v in results.values() for k in v["result"]):
        table = Table(title="tenure and its peers" + quick)
        for c in report.COLUMNS:
            table.add_column(c)
        for v in results.values():
            table.add_row(*report.row(v["subject"], v["result"]))
        console.print(table)
    defaults = at_defaults.rows(results, data.get("ceiling"), data["scale"]["jobs"])
    if defaults:
        table = Table(title="at their own defaults" + quick)
        for c in at_defaults.COLUMNS:
            table.add_column(c)
        for r in defaults:
            table.add_row(*r)
        console.print(table)
    targets = Table(title="targets (ratios measured in this run)")
    for c in ("target", "measured", "verdict"):
        targets.add_column(c)
    measured = [t for t in data["targets"] + data["defaults_targets"] if t["value"] is not None]
    for r in report.target_rows(measured):
        targets.add_row(*r)
    console.print(targets)
    if data.get("events"):
        events = Table(title="lifecycle events: drain rate with events on / off (rounds ABBA)")
        for c in report.EVENTS_COLUMNS:
            events.add_column(c)
        for r in report.events_rows(data["events"]):
            events.add_row(*r)
        console.print(events)


def write_docs(data: dict[str, Any], source: Path) -> None:
    m = data["machine"]
    servers = ", ".join(f"{k} {v}" for k, v in m["servers"].items())
    libs = ", ".join(f"{k} {v}" for k, v in m["libraries"].items() if v != "-")
    s = data["scale"]
    body = [
        f"Run {data['started']} UTC (`{source.relative_to(ROOT)}`), on {m['cpu']}, "
        f"{m['cores']} cores, {m['ram_gib']} GiB RAM; {m['os']}; Python {m['python']}; "
        f"{servers}; SQLite files on {m['filesystem']}. Load average at start "
        f"{m['load_at_start'][0]:.2f}, at end {m.get('load_at_end', ['?'])[0]:.2f} "
        "(other work shared the machine).",
        "",
        f"Libraries: {libs}. tenure: {_source(data['tenure_source'])}.",
        "",
        f"{s['jobs']:,} no-op jobs per drain ({s['one']:,} enqueued one by one, the rest in "
        f"batches of {s['batch']:,}); {s['concurrency']} jobs at once per worker process; "
        f"idle pickup x{s['idle']} after {s['idle_gap']:g} s idle; end-to-end at "
        f"{s['rate']:g} jobs/s for {s['steady']:,} jobs; kill -9: {s['kill_handler']:g} s "
        f"handler, SIGKILL {s['kill_after']:g} s in, cap {s['kill_cap']:g} s. tenure's "
        f"headline rows use `--pool {data['headline_pool']}`.",
        "",
        report.markdown_table(
            report.COLUMNS,
            [report.row(v["subject"], v["result"]) for v in data["results"].values()],
        ),
        "",
        f"SQLite's own claim+complete rate on this machine: {data['ceiling']:,.0f} jobs/s.",
        "",
        report.markdown_table(
            ("target", "measured", "verdict"), report.target_rows(data["targets"])
        ),
    ]
    _replace_section(BEGIN, END, body)


def write_defaults_docs(data: dict[str, Any], source: Path) -> None:
    """The table "At their own defaults", between its own markers in docs/benchmarks.md."""
    m, s = data["machine"], data["scale"]
    runs = [v["result"].get("defaults") or {} for v in data["results"].values()]
    loads = [r["load"] for d in runs for r in d.get("rounds", []) if r["load"] is not None]
    beside = [r["ceiling"] for d in runs for r in d.get("rounds", []) if r.get("ceiling")]
    libs = ", ".join(f"{k} {v}" for k, v in m["libraries"].items() if v != "-")
    body = [
        f"Run {data['started']} UTC (`{source.relative_to(ROOT)}`), on {m['cpu']}, "
        f"{m['cores']} cores; {m['os']}; Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["servers"].items())
        + f". Libraries: {libs}. tenure: {_source(data['tenure_source'])}.",
        "",
        f"{s['jobs']:,} jobs per round, each one Redis `INCR`; one worker at its defaults; "
        f"{s['rounds']} rounds. Load average (1 min) at the start of each measurement: "
        + (f"{min(loads):.1f} to {max(loads):.1f}" if loads else "-")
        + f", at the end of the run {m.get('load_at_end', ['?'])[0]:.2f} (other work shared "
        "the machine).",
        "",
        report.markdown_table(
            at_defaults.COLUMNS, at_defaults.rows(data["results"], data.get("ceiling"), s["jobs"])
        ),
        "",
        f"SQLite's own claim+complete rate on this machine: {data['ceiling']:,.0f} jobs/s at "
        "the start of the run"
        + (
            f"; {', '.join(f'{c:,.0f}' for c in beside)} just before each SQLite round "
            "(the ratio uses their median)."
            if beside
            else "."
        ),
        "",
        report.markdown_table(
            ("target", "measured", "verdict"), report.target_rows(data["defaults_targets"])
        ),
    ]
    _replace_section(DEFAULTS_BEGIN, DEFAULTS_END, body)


def write_events_docs(data: dict[str, Any], source: Path) -> None:
    """The A/B of lifecycle events, between its own markers in docs/benchmarks.md."""
    m = data["machine"]
    loads = [x for e in data["events"] for x in e["loads"]]
    body = [
        f"Run {data['started']} UTC (`{source.relative_to(ROOT)}`, `--events both`), on "
        f"{m['cpu']}, {m['cores']} cores; tenure: {_source(data['tenure_source'])}. "
        f"{data['scale']['jobs']:,} no-op jobs per drain; each row's drains alternate "
        "events on and off (ABBA), and the ratio is each round's on/off, median (range). "
        f"Load average (1 min) after the drains: {min(loads):.1f} to {max(loads):.1f}.",
        "",
        report.markdown_table(report.EVENTS_COLUMNS, report.events_rows(data["events"])),
    ]
    _replace_section(EVENTS_BEGIN, EVENTS_END, body)


def _replace_section(begin: str, end: str, body: list[str]) -> None:
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    if begin not in text:
        text += f"\n{begin}\n{end}\n"
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    DOCS.write_text(f"{head}{begin}\n{chr(10).join(body)}\n{end}{tail}")


def _source(src: dict[str, Any]) -> str:
    text = f"commit {src['commit']}"
    if src["dirty"]:
        text += f" with uncommitted changes to {len(src['dirty'])} file(s) under src/tenure"
    text += f", source digest {src['digest']}, run from a copy taken at the start"
    if src.get("tree_changed_during_run"):
        text += " (the tree changed during the run; the copy did not)"
    return text
