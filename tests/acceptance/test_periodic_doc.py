"""docs/periodic.md runs as written: its tasks module, its worker and its listing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tenure import App, State
from tenure.core.schedules import tick_of
from tenure.errors import BackendUnavailable

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_the_periodic_page__runs_as_written(tmp_path: Path) -> None:
    blocks = BLOCK.findall((ROOT / "docs/periodic.md").read_text())
    [module] = [code for lang, code in blocks if lang == "python"]
    [script] = [code for lang, code in blocks if lang == "sh"]
    (tmp_path / "clock.py").write_text(module)
    worker, listing = [line.split("  #", 1)[0].strip() for line in script.splitlines()]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(tmp_path)
    running = subprocess.Popen(["bash", "-c", f"exec {worker}"], cwd=tmp_path, env=env,
                               stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "clock.db").exists() or len(beats(tmp_path)) < 2:
            assert running.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        listed = subprocess.run(["bash", "-c", listing], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    finally:
        running.send_signal(signal.SIGTERM)
        _, stderr = running.communicate(timeout=30)
    assert running.returncode == 0, stderr
    lines = listed.stdout.splitlines()
    assert any("heartbeat" in ln and "every 0:00:01" in ln and "skip" in ln for ln in lines)
    assert any("morning_report" in ln and "cron 0 7 * * MON-FRI (Europe/Paris)" in ln
               for ln in lines)  # fmt: skip
    done = beats(tmp_path)
    assert all(result == tick_of(key) for key, result in done)
    ticks = [result for _, result in done]
    # one job per tick, on whole seconds (a worker starved for a whole second
    # would enqueue the latest tick only: test_periodic counts missed ticks)
    assert len(ticks) == len(set(ticks)) and all(t == int(t) for t in ticks)


def beats(tmp_path: Path) -> list[tuple[str | None, float]]:
    """(key, result) of each heartbeat job completed; none while the worker
    has created the file but not yet its tables."""
    try:
        with App(f"sqlite:///{tmp_path / 'clock.db'}", read_only=True) as app:
            jobs = app.jobs(state=State.COMPLETED, limit=1000).jobs
    except BackendUnavailable:
        return []
    return [(j.key, j.result) for j in jobs if j.task == "heartbeat"]
