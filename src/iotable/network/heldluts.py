"""The LUT counts a network already holds: :func:`iotable.synth.cost` returns a network (``report.network``)
whose ``luts`` keep every checked mapping, and a bundle saved from it keeps them too. Summaries read them from
there instead of saying that no table was mapped."""

from __future__ import annotations

from typing import Any

from ..lutnet import DEFAULT_SCRIPT, bit_function

__all__ = ["held_luts"]


def held_luts(network: Any, *, k: int = 6) -> int | None:
    """ABC's k-input LUTs of ``network``'s live tables (each unit's table, as :func:`~iotable.synth.cost`
    counts them) with the default script, from the results ``network.luts`` holds; ``None`` when a live
    table has none (or the network holds no result at all)."""
    held = getattr(network, "luts", None)
    if not held:
        return None
    script = DEFAULT_SCRIPT.replace("{k}", str(k))
    by_key = {r.key: r.luts for r in held.values() if r.k == k and r.script == script}
    units = network.liveness.layers(network.graph)
    total = 0
    for name, layer in network.layers.items():
        for u, table in enumerate(layer.tables):
            if name in units and not units[name][u]:
                continue  # a dead table: synthesis deletes it, and cost does not map it
            luts = by_key.get(bit_function(table, what="summary").key())
            if luts is None:
                return None
            total += luts
    return total
