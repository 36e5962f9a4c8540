"""Find an App by its import path (``module:attr``), and the path of an App.

Executor processes import the worker's App by path: nothing is pickled across
processes, so the App must be importable.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from tenure.app import App
from tenure.errors import InvalidInput


def load_app(path: str) -> App:
    """Import ``module:attr`` (attr may be dotted), with the current directory importable."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidInput(f"expected MODULE:APP such as myapp.tasks:app, got {path!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name + ".").startswith(exc.name + "."):
            raise InvalidInput(
                f"cannot import {module_name!r}: no module named {exc.name!r}"
            ) from None
        raise InvalidInput(f"cannot import {module_name!r}: {exc}") from None
    except SystemExit as exc:
        # Not an exit of ours: a worker that cannot load its App says why, and
        # fails (even on sys.exit(0): there is no App to run).
        raise InvalidInput(
            f"cannot import {module_name!r}: it called sys.exit({exc.code!r}) while being imported"
        ) from None
    except Exception as exc:
        raise InvalidInput(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InvalidInput(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, App):
        raise InvalidInput(f"{path} is a {type(obj).__name__}, not a tenure App")
    return obj


def path_of(app: App) -> str | None:
    """``module:attr`` under which an imported module holds ``app``, if any (not __main__)."""
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is app:
                return f"{name}:{attr}"
    return None
