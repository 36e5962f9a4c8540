"""Fail, listing the offenders, when a source file is over 500 lines or a
function over 60 (from its ``def`` to its last line, decorators aside).

Small modules with one job, and functions that fit on a screen: a file or a
function past these sizes is one to split. Usage:
``python3 scripts/check_layout.py [PATH ...]`` (default: src).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
ROOT = Path(__file__).resolve().parents[1]


def _functions(
    node: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method under ``node``, nested ones too, by qualified name."""
    for child in ast.iter_child_nodes(node):
        name = prefix
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            yield name, child
            name += ".<locals>."
        elif isinstance(child, ast.ClassDef):
            name = f"{prefix}{child.name}."
        yield from _functions(child, name)


def offences(path: Path) -> list[str]:
    """What in the file at ``path`` is over its size, one line each."""
    text = path.read_text(encoding="utf-8")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    lines = len(text.splitlines())
    if lines > MAX_FILE_LINES:
        found.append(f"{shown}: {lines} lines (at most {MAX_FILE_LINES})")
    for name, function in _functions(ast.parse(text, str(path))):
        assert function.end_lineno is not None
        length = function.end_lineno - function.lineno + 1
        if length > MAX_FUNCTION_LINES:
            found.append(
                f"{shown}:{function.lineno}: {name} is {length} lines "
                f"(at most {MAX_FUNCTION_LINES})"
            )
    return found


def main(args: list[str]) -> int:
    roots = [Path(a).resolve() for a in args] or [ROOT / "src"]
    files = sorted(f for r in roots for f in ([r] if r.is_file() else r.rglob("*.py")))
    found = [line for f in files for line in offences(f)]
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} over the layout's sizes", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
