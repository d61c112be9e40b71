"""A sweep's Pareto plot: every placed candidate, the front joined by a line (matplotlib, ``iotable[sweep]``)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MatplotlibNotInstalledError, OptionError
from .store import write_output

if TYPE_CHECKING:
    from .result import SweepResult

__all__ = ["plot"]

_LABELS = {
    "luts": "LUTs after place and route", "fmax_mhz": "Fmax after routing (MHz)", "latency": "latency (cycles)",
    "accuracy": "accuracy", "estimate_luts": "LogicNets estimate (LUT6)", "abc_luts": "ABC LUTs",
    "flip_flops": "flip-flops",
}  # fmt: skip


def plot(result: SweepResult, path: str | Path | None, *, x: str, y: str, ax: Any) -> Any:
    """See :meth:`SweepResult.plot`."""
    for name, value in (("x", x), ("y", y)):
        if value not in _LABELS:
            msg = f"sweep plot: {name}={value!r} is not a number of the points; choose one of {sorted(_LABELS)}"
            raise OptionError(msg)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        msg = "sweep plot: matplotlib is not installed; pip install 'iotable[sweep]' (or matplotlib)"
        raise MatplotlibNotInstalledError(msg) from None
    ax, figure = _axes(ax, path)
    _draw(ax, result, x, y)
    if path is not None:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
        write_output(Path(path), buffer.getvalue())
    return ax


def _axes(ax: Any, path: Any) -> tuple[Any, Any]:
    """The axes to draw into and their figure: the caller's, a pyplot figure (shown by a notebook), or a figure of
    its own for a file (no pyplot state touched)."""
    from matplotlib.figure import Figure

    if ax is None and path is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6, 4))
    if ax is None:
        figure = Figure(figsize=(6, 4))
        return figure.add_subplot(), figure
    return ax, ax.figure


def _draw(ax: Any, result: SweepResult, x: str, y: str) -> None:
    """The placed points in grey, the front in colour joined by a line and labelled."""
    points = [p for p in result.points if getattr(p, x) is not None and getattr(p, y) is not None]
    best = sorted((p for p in points if p.front), key=lambda p: (getattr(p, x), getattr(p, y)))
    others = [p for p in points if not p.front]
    ax.scatter([getattr(p, x) for p in others], [getattr(p, y) for p in others], color="0.6", label="placed")
    ax.plot([getattr(p, x) for p in best], [getattr(p, y) for p in best], "o-", color="C3", label="Pareto front")
    for p in best:
        ax.annotate(f"{p.variant} p{p.pipeline} s{p.seed}", (getattr(p, x), getattr(p, y)), fontsize=7,
                    textcoords="offset points", xytext=(4, 4))  # fmt: skip
    ax.set_xlabel(_LABELS[x])
    ax.set_ylabel(_LABELS[y])
    ax.legend(loc="best", fontsize=8)
