"""The builders of both styles, as tables of one function per graph node kind.

:data:`BUILDERS` maps a :class:`~iotable.hdl.netlist.Style` to its table ``{NodeKind: NodeBuilder}``; a
:data:`~iotable.hdl.builder.NodeBuilder` is ``(builder, node, inputs) -> result``, where ``builder`` is the
:class:`~iotable.hdl.builder.Builder` of the walk (its netlist, table modules, counters, the results of the
nodes before), ``inputs`` the results of the node's producers by input port, and the result what the node's
consumers read (unrolled: element ids in the node's shape; streaming: a :class:`~iotable.hdl.streaming.Stream`).
A new node kind adds an entry to each table; a kind a style has no entry for is refused by the builder's
``default``. :data:`FINISH` turns the walked builder into the :class:`~iotable.hdl.netlist.Netlist`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..graph.graph import Graph, NodeKind
from . import streaming, unrolled
from .builder import Builder, NodeBuilder
from .netlist import Netlist, Style

__all__ = ["BUILDERS", "FINISH", "build_netlist"]

#: The builder of each node kind, per style.
BUILDERS: Mapping[Style, Mapping[NodeKind, NodeBuilder]] = {
    Style.UNROLLED: unrolled.BUILDERS,
    Style.STREAMING: streaming.BUILDERS,
}

#: What each style does after the walk: align or pick the output, set the latency and the clocking.
FINISH: Mapping[Style, Callable[[Builder], Netlist]] = {
    Style.UNROLLED: unrolled.finish,
    Style.STREAMING: streaming.finish,
}


def build_netlist(graph: Graph, layers: dict[str, Any], style: Style, *, top: str, pipeline: int) -> Netlist:
    """The hardware IR of ``graph``'s hardware part in ``style``: every node through its kind's builder."""
    builder = Builder(graph, layers, top=top, pipeline=pipeline, style=style, handlers=BUILDERS[style])
    builder.run_graph()
    netlist = FINISH[style](builder)
    netlist.hosts = list(builder.hosts)
    return netlist
