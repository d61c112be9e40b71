"""Pareto fronts: which points no other point beats on every objective.

A point dominates another when it is at least as good on every objective and better on one; the front is
the points nothing dominates. With a margin ``near`` (a fraction), the points *near* the front are kept too:
those within that fraction of one front point on every objective (``near=0.1``: at most 10% more LUTs and
latency, and 10% less Fmax, than some point of the front), for the stages whose numbers the cheaper ones only
estimate. A missing value (``None``) is worse than any number.

Example:
    >>> front([(10, 2), (12, 1), (12, 2), (30, 1)], ("min", "min"))
    [0, 1]
    >>> front([(10, 2), (12, 1), (12, 2), (30, 1)], ("min", "min"), near=0.25)
    [0, 1, 2]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["SENSES", "dominates", "front"]

SENSES = ("min", "max")


def _value(v: float | None, sense: str) -> float:
    """A comparable number: the value, or the worst one for a missing value."""
    if v is None:
        return math.inf if sense == "min" else -math.inf
    return float(v)


def dominates(a: Sequence[float | None], b: Sequence[float | None], senses: Sequence[str]) -> bool:
    """Whether ``a`` is at least as good as ``b`` on every objective and better on one."""
    u = [_value(x, s) for x, s in zip(a, senses, strict=True)]
    v = [_value(y, s) for y, s in zip(b, senses, strict=True)]
    if any((x > y) if s == "min" else (x < y) for x, y, s in zip(u, v, senses)):
        return False
    return u != v


def _within(b: Sequence[float | None], a: Sequence[float | None], senses: Sequence[str], near: float) -> bool:
    """Whether ``b`` is within the fraction ``near`` of ``a`` on every objective."""
    for x, y, sense in zip(a, b, senses, strict=True):
        u, v = _value(x, sense), _value(y, sense)
        slack = near * abs(u) if math.isfinite(u) else 0.0
        if (v > u + slack) if sense == "min" else (v < u - slack):
            return False
    return True


def front(points: Sequence[Sequence[float | None]], senses: Sequence[str], *, near: float = 0.0) -> list[int]:
    """The indices of the points that no other point dominates and, with ``near``, of the points within that
    fraction of one of them (see the module docstring), in order."""
    best = [i for i, p in enumerate(points) if not any(dominates(q, p, senses) for q in points)]
    if not near:
        return best
    return [i for i, p in enumerate(points) if i in best or any(_within(p, points[j], senses, near) for j in best)]
