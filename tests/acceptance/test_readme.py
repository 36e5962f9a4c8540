"""The README's "Use it" section runs as written, so it cannot rot."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tenure import App, State

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def section_blocks(heading: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a README section, up to the next heading: (language, code)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split(f"\n{heading}\n", 1)[1]
    section = re.split(r"\n##+ ", section, maxsplit=1)[0]
    return BLOCK.findall(section)


def use_it_blocks() -> list[tuple[str, str]]:
    """The fenced code blocks of the README's "Use it" section: (language, code)."""
    return section_blocks("## Use it")


def write_python_blocks(blocks: list[tuple[str, str]], directory: Path) -> None:
    """Each Python block is the file its first line names."""
    for lang, code in blocks:
        if lang == "python":
            name = re.match(r"# (\w+\.py)\b", code)
            assert name is not None, f"a Python block must start with '# file.py': {code[:40]}"
            (directory / name[1]).write_text(code)


def run(line: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, (line, done.stdout, done.stderr)
    return done.stdout


def test_the_use_it_section__runs_as_written_and_loses_nothing(tmp_path: Path) -> None:
    blocks = use_it_blocks()
    assert [lang for lang, _ in blocks].count("sh") == 1
    write_python_blocks(blocks, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    [script] = [code for lang, code in blocks if lang == "sh"]
    workers: list[subprocess.Popen[bytes]] = []
    output = []
    log = (tmp_path / "worker.log").open("wb")
    try:
        for line in script.splitlines():
            command = line.split("  #", 1)[0].strip()
            if export := re.fullmatch(r"export (\w+)=(\S+)", command):
                env[export[1]] = export[2]
            elif command.startswith("tenure worker"):
                workers.append(subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=tmp_path,
                                                env=env, stderr=log))  # fmt: skip
            elif command:
                output.append(run(command, tmp_path, env))
        status = "tenure status --json"
        deadline = time.monotonic() + 60
        while (counts := json.loads(run(status, tmp_path, env))["default"])["completed"] < 6:
            assert time.monotonic() < deadline, counts
            time.sleep(0.05)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [w.wait(30) for w in workers]
        log.close()
        assert codes == [0] * len(workers), (tmp_path / "worker.log").read_text()
    assert output[0].strip() == "queued"  # signup.py
    # notify.py, before any worker runs: a state and counts print as plain names
    assert output[1] == (
        "queued {'waiting': 0, 'scheduled': 1, 'queued': 5, 'active': 0, 'completed': 0, "
        "'dead': 0, 'cancelled': 0}\n"
    )
    assert "storage: sqlite:///tenure.db (from the App tasks:app)" in "".join(output)
    with App(f"sqlite:///{tmp_path / 'tenure.db'}") as app:
        jobs = app.jobs(limit=100).jobs
    done = {j.args["to"]: j.result for j in jobs if j.state is State.COMPLETED}
    assert done == {to: f"sent 'Welcome' to {to}"
                    for to in ("a@example.com", "c@example.com", "d@x", "e@x", "f@example.com",
                               "g@example.com")}  # fmt: skip
    [later] = [j for j in jobs if j.state is not State.COMPLETED]
    assert (later.state, later.key, later.args) == (State.SCHEDULED, "welcome-b",
                                                    {"to": "b@example.com"})  # fmt: skip


def test_waiting_for_a_result__runs_as_written(tmp_path: Path) -> None:
    """results.py beside a worker of the README's tasks.py. (Testing your tasks
    is a page of the docs, whose samples test_docs_samples.py runs.)"""
    write_python_blocks(use_it_blocks(), tmp_path)
    waiting = section_blocks("### Waiting for a result")
    assert [lang for lang, _ in waiting] == ["python"]
    write_python_blocks(waiting, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TENURE_APP"] = "tasks:app"
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(["tenure", "worker", "--pool", "thread"], cwd=tmp_path, env=env,
                              stderr=log)  # fmt: skip
    try:
        printed = run("python results.py", tmp_path, env)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(30)
        log.close()
    assert code == 0, (tmp_path / "worker.log").read_text()
    assert printed.splitlines() == [
        "sent 'Welcome' to h@example.com",
        "sent 'Hi' to i@example.com",
        "cancelled",
    ]
