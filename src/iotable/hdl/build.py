"""The hardware IR of a graph: the builder of the style walks it, each node built by its kind.

A node kind writes its hardware as methods of its :class:`~iotable.graph.kind.NodeKindDef`, one per style
(:meth:`~iotable.graph.kind.NodeKindDef.unrolled`, :meth:`~iotable.graph.kind.NodeKindDef.streaming`), called
with the walk's builder, the node and its producers' results by input port; the result is what the node's
consumers read (unrolled: element ids in the node's shape; streaming: a :class:`~iotable.hdl.streaming.Stream`).
The builder (:class:`~iotable.hdl.builder.Builder`, one subclass per style in :data:`BUILDERS`) is everything a
kind builds with; a kind without hardware in a style is refused by name. After the walk, the builder's
``finish`` turns it into the :class:`~iotable.hdl.netlist.Netlist`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..graph.graph import Graph
from .builder import Builder
from .netlist import Netlist, Style
from .streaming import StreamingBuilder
from .unrolled import UnrolledBuilder

__all__ = ["BUILDERS", "build_netlist"]

#: The builder of each style.
BUILDERS: Mapping[Style, type[Builder]] = {
    Style.UNROLLED: UnrolledBuilder,
    Style.STREAMING: StreamingBuilder,
}


def build_netlist(
    graph: Graph,
    layers: dict[str, Any],
    style: Style,
    *,
    top: str,
    pipeline: int,
    keep_dead: bool = False,
    table_latency: Mapping[str, int] | None = None,
) -> Netlist:
    """The hardware IR of ``graph``'s hardware part in ``style``: every node through its kind's hardware method;
    units whose outputs reach no network output are left out unless ``keep_dead`` (their outputs constant 0);
    ``table_latency``: the registers inside each (pipelined) table module, by name."""
    builder = BUILDERS[style](graph, layers, top=top, pipeline=pipeline, table_latency=table_latency)
    if keep_dead:
        builder.live = None  # every unit instantiated
    builder.run_graph()
    netlist = builder.finish()
    netlist.hosts = list(builder.hosts)
    return netlist
