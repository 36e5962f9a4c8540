"""tenure's modules import one another without a cycle.

An import inside a function counts as one at the top: it is a dependency all
the same, met later. Imports under ``if TYPE_CHECKING:`` are read by the type
checker only, and do not count. The layers themselves (which package may
import which) are import-linter's contracts, in pyproject.toml.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import tenure
from tenure import config, errors, signals
from tenure.core import values

SRC = Path(__file__).resolve().parents[2] / "src"

# Imports that close a cycle, allowed one by one, each with its reason.
ALLOWED = {
    # errors' __getattr__ (PEP 562) hands out Retry and Fail at their old
    # address on first use: errors itself runs nothing of signals.
    ("tenure.errors", "tenure.signals"),
}


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package under ``src``, by dotted name."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports in ``node``, at any depth, but those of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from _import_nodes(child)


def _base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names, relative ones too."""
    if not node.level:
        return node.module or ""
    parts = name.split(".")
    if path.name != "__init__.py":
        parts = parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that module ``name`` imports."""
    found = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _base(name, path, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]  # fmt: skip
        found.update(t for t in targets if t in known and t != name)
    return found


def graph(src: Path = SRC) -> dict[str, set[str]]:
    """Each module of the package, with the modules it imports (ALLOWED left out)."""
    known = modules(src)
    return {name: {t for t in imports_of(name, path, known) if (name, t) not in ALLOWED}
            for name, path in known.items()}  # fmt: skip


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while (w := stack.pop()) != v:
                group.add(w)
            group.add(v)
            if len(group) > 1:
                groups.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [_cycle_in(min(group), group, edges) for group in groups]


def _cycle_in(start: str, group: set[str], edges: dict[str, set[str]]) -> list[str]:
    """The shortest cycle from ``start`` back to it within ``group``."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges[v] & group):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    following.append(w)
        frontier = following
    raise AssertionError(f"{start} is in no cycle of {sorted(group)}")


def test_the_modules_import_one_another_without_a_cycle() -> None:
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_a_cycle_through_a_function_level_import__is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import x\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import c\n"
        "def x():\n    from . import a\n"
    )
    (package / "c.py").write_text("import pkg.b\n")
    assert cycles(graph(tmp_path)) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_names_moved_down__keep_their_old_addresses() -> None:
    assert tenure.Retry is errors.Retry is signals.Retry
    assert tenure.Fail is errors.Fail is signals.Fail
    assert config.MAX_SECONDS is values.MAX_SECONDS
    assert config.check_seconds is values.check_seconds
    assert config.check_integer is values.check_integer
    assert not hasattr(errors, "Nothing")


def test_each_allowed_import__is_still_made() -> None:
    known = modules()
    stale = [(a, b) for a, b in sorted(ALLOWED) if b not in imports_of(a, known[a], known)]
    assert not stale, f"no longer imported, take them out of ALLOWED: {stale}"
