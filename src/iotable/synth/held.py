"""The LUT counts a network already holds: :func:`iotable.synth.cost` returns a network (``report.network``)
whose ``luts`` keep every checked mapping, and a bundle saved from it keeps them too. Summaries read them from
there instead of saying that no table was mapped."""

from __future__ import annotations

from typing import Any

from ..graph.liveness import liveness
from ..lutnet import bit_function
from .abcrun import DEFAULT_SCRIPT
from .mapping import _live_items

__all__ = ["held_luts"]


def held_luts(network: Any, *, k: int = 6) -> int | None:
    """ABC's k-input LUTs of ``network``'s live tables (each table once, as :func:`~iotable.synth.cost`
    counts them) with the default script, from the results ``network.luts`` holds; ``None`` when a live
    table has none (or the network holds no result at all)."""
    held = getattr(network, "luts", None)
    if not held:
        return None
    script = DEFAULT_SCRIPT.replace("{k}", str(k))
    by_key = {r.key: r.luts for r in held.values() if r.k == k and r.script == script}
    items, _ = _live_items(network, network, liveness(network.graph), None, False, what="summary")
    total = 0
    for table, _ in items:
        luts = by_key.get(bit_function(table, what="summary").key())
        if luts is None:
            return None
        total += luts
    return total
