"""Every code sample of the documentation runs, so none can rot.

Each page under ``docs/`` is one test. Its fenced blocks (indented ones too,
as in content tabs) run in order, in a fresh directory, as a reader would run
them:

- A ``python`` block runs as a script. When its first line is a comment that
  names a file (``# tasks.py``), it is saved under that name first, so that
  later blocks can import it or run it.
- A ``python`` block whose file a later ``sh`` block runs (``python send.py``)
  is only saved: that block runs it (beside a worker it starts, say).
- A ``sh`` block runs only when the line before it is ``<!-- run -->``: most
  shell samples install packages or start a worker that runs until stopped.
  It runs in bash, stopping at the first command that fails; what it leaves
  running in the background is killed at its end.
- A tasks module, a file that a ``tenure worker MODULE:app`` of the page
  names, does nothing when imported (it is imported again at every worker's
  start): imported alone, it writes nothing.
- A block after ``<!-- not run: REASON -->`` does not run (a peer's code that
  needs Celery, a fragment that uses names defined elsewhere); a ``python``
  one is still compiled, so it stays valid Python. The reason is required.
- PostgreSQL and Redis URLs in a block (``postgresql://app@db/shop``) are
  replaced by fresh storage on the suite's real servers: samples read as
  production code and run against the real thing.

Pages whose samples another test runs and checks (``OWN_TESTS``) are only
compiled here; so is the README, whose Python blocks must all lie in the
sections that ``test_readme.py`` runs.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.acceptance.test_readme import section_blocks
from tests.conftest import fresh_storage_url

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
OWN_TESTS = {
    "transactional-enqueue.md": "tests/acceptance/test_docs_transactional_enqueue.py",
    "howto/django.md": "tests/integration/test_django.py",  # a Django project built of them
}

FENCE = re.compile(
    r"(?:^[ \t]*<!-- (?P<mark>run|not run: [^>]*\S) -->\n)?"
    r"^(?P<indent>[ \t]*)```(?P<lang>\w+)[^\n]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
URLS = {
    "postgres": re.compile(r"postgres(?:ql)?://[^\s\"'`)]+"),
    "redis": re.compile(r"rediss?://[^\s\"'`)]+"),
}


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    mark: str | None  # "run", "not run: why", or None

    @property
    def runs(self) -> bool:
        if self.lang == "python":
            return self.mark is None
        return self.lang == "sh" and self.mark == "run"


def blocks(text: str) -> list[Block]:
    found = []
    for m in FENCE.finditer(text):
        indent = len(m["indent"])
        code = "".join(line[indent:] for line in m["code"].splitlines(keepends=True))
        found.append(Block(m["lang"], code, m["mark"]))
    return found


def pages() -> list[Path]:
    """The pages with a sample to run, but for those of OWN_TESTS."""
    return sorted(p for p in DOCS.rglob("*.md") if str(p.relative_to(DOCS)) not in OWN_TESTS
                  and any(b.runs for b in blocks(p.read_text())))  # fmt: skip


def compile_python(block: Block, where: str) -> None:
    try:
        compile(block.code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as exc:
        pytest.fail(f"{where}: a sample is not valid Python: {exc}\n{block.code}")


def run(command: list[str], cwd: Path, env: dict[str, str], code: str) -> None:
    """Run a sample in a process group of its own; kill what it leaves behind
    (a worker started with ``&``). Its output goes to a file, which a process
    left running cannot hold open as it would a pipe."""
    with tempfile.TemporaryFile() as out:
        sample = subprocess.Popen(command, cwd=cwd, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            status = sample.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sample.pid, signal.SIGKILL)
            sample.wait()
        out.seek(0)
        assert status == 0, f"this sample failed:\n{code}\n{out.read().decode()}"


def saved_only(page_blocks: list[Block]) -> set[str]:
    """The files that a shell sample of the page runs: saved, not run on their own."""
    shell = "\n".join(b.code for b in page_blocks if b.lang == "sh" and b.runs)
    return set(re.findall(r"\bpython3? ([\w/]+\.py)\b", shell))


def check_tasks_modules(page: Path, page_blocks: list[Block], directory: Path,
                        env: dict[str, str]) -> None:  # fmt: skip
    """Each tasks module of the page, imported alone, writes nothing (no job
    enqueued, no database created): every worker's start imports it again."""
    files = {named[1]: b.code for b in page_blocks if b.runs and b.lang == "python"
             if (named := re.match(r"# ([\w/]+\.py)\b", b.code))}  # fmt: skip
    modules = set(re.findall(r"tenure worker ([\w.]+):", page.read_text()))
    directory.mkdir()
    for name, code in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(code)
    for module in sorted(m for m in modules if f"{m.replace('.', '/')}.py" in files):
        before = set(directory.rglob("*"))
        importing = [sys.executable, "-B", "-c", f"import {module}"]
        done = subprocess.run(importing, cwd=directory, env=env, capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        wrote = sorted(str(p.relative_to(directory)) for p in set(directory.rglob("*")) - before)
        assert not wrote, f"importing the tasks module {module} wrote {wrote}: it must only define"


def test_every_sample_is_run_here_or_by_a_test_of_its_own() -> None:
    for page in DOCS.rglob("*.md"):
        name = str(page.relative_to(DOCS))
        for block in blocks(page.read_text()):
            if block.lang == "python":
                compile_python(block, name)
            if block.mark is not None and block.mark != "run":
                assert block.mark.startswith("not run: "), (name, block.mark)
    for name, test in OWN_TESTS.items():
        assert (DOCS / name).exists() and (ROOT / test).exists(), (name, test)
    readme_test = (ROOT / "tests/acceptance/test_readme.py").read_text()
    sections = re.findall(r'section_blocks\("([^"]+)"\)', readme_test)
    run_there = {code for s in sections for lang, code in section_blocks(s) if lang == "python"}
    for block in blocks((ROOT / "README.md").read_text()):
        if block.lang == "python":
            compile_python(block, "README.md")
            assert block.code in run_there, f"README: run by no test:\n{block.code}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_the_samples_of_a_page__run_as_written(
    page: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    storage: dict[str, str] = {}
    page_blocks = blocks(page.read_text())
    check_tasks_modules(page, page_blocks, tmp_path / "tasks-modules-alone", env)
    saved = saved_only(page_blocks)
    for i, block in enumerate(b for b in page_blocks if b.runs):
        code = block.code
        for kind, url in URLS.items():
            if url.search(code):
                if kind not in storage:
                    storage[kind] = fresh_storage_url(kind, request, tmp_path)
                code = url.sub(storage[kind], code)
        if block.lang == "sh":
            run(["bash", "-e", "-o", "pipefail", "-c", code], tmp_path, env, code)
            continue
        named = re.match(r"# ([\w/]+\.py)\b", code)
        script = tmp_path / (named[1] if named else f"sample_{i}.py")
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(code)
        if named is None or named[1] not in saved:
            run([sys.executable, str(script.relative_to(tmp_path))], tmp_path, env, code)
