"""Numbers at the door: the bounds every stored value keeps, and their checks.

Bounds, once for every backend: each value stored must fit PostgreSQL's
integer and SQLite's and Redis' numbers alike, and render as a date.
"""

from __future__ import annotations

from tenure.core.names import shown
from tenure.errors import InvalidInput

MAX_SECONDS = 10 * 365.25 * 86_400.0  # delays, deadlines, backoffs: ten years
PRIORITY_RANGE = (-1_000_000, 1_000_000)
ATTEMPTS_RANGE = (1, 1_000_000)  # max_attempts and max_stalls, of a queue or a job
TIMEOUT_RANGE = (0.0, MAX_SECONDS)  # above 0


def shown_bound(x: float) -> str:
    """A bound as the checks' messages word it."""
    if x == MAX_SECONDS:
        return "315576000 (ten years)"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def check_number(
    name: str, value: object, lo: float, hi: float, *, above: bool = False, kind: str = "a number"
) -> None:
    """InvalidInput unless ``value`` is a real number (not a bool) within
    ``[lo, hi]`` (``(lo, hi]`` when ``above``). NaN, infinities and integers too
    large for a float fall outside every range."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not (ok and (lo < value if above else lo <= value) and value <= hi):  # type: ignore[operator]
        low = "(" if above else "["
        raise InvalidInput(
            f"{name} must be {kind} within {low}{shown_bound(lo)}, {shown_bound(hi)}], "
            f"got {shown(value)}"
        )


def check_integer(name: str, value: object, lo: int | float, hi: int | float) -> None:
    """InvalidInput unless ``value`` is an int (not a bool) within ``[lo, hi]``."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidInput(
            f"{name} must be an integer within [{shown_bound(lo)}, {shown_bound(hi)}], "
            f"got {shown(value)}"
        )


def check_seconds(name: str, value: object, *, above: bool = False) -> None:
    """A number of seconds within [0, ten years] (``(0, ten years]`` when ``above``)."""
    check_number(name, value, 0.0, MAX_SECONDS, above=above, kind="a number of seconds")
