"""The model's input quantizer as the design's input format, not a table layer (:func:`input_format`).

A model whose first module quantizes its input (``nn.Sequential(Quantize(2), nn.Linear(...), ...)``) makes a
first table layer of that quantizer alone. When the quantizer maps the input domain onto itself code for code,
those tables are the identity on codes: LUTs, registers and a cycle of latency for nothing. After the tables
are built, :func:`input_format` reads them (the enumerator's exact rows, every code of every element) and, where
every one is the identity, drops the layer: its readers read the network's input, whose domain is the
quantizer's. A quantizer that changes any code (fewer bits, another scale) stays a table layer, and so does a
layer with a mixing module (a linear layer, a module declared with ``decompose``), whatever its tables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from torch import nn

from ..front.layerplan import LayerPlan
from ..graph.graph import Edge, Graph, Node
from ..graph.nodes import TableMeta, WindowMeta
from ..tabulate.layers import LayerTables, tabulate

__all__ = ["input_format"]


def input_format(graph: Graph, layers: dict[str, LayerTables]) -> tuple[Graph, dict[str, LayerTables]]:
    """``graph`` without its first table layer where that layer is the identity on the input's codes (the model's
    input quantizer, see the module's docstring), and ``layers`` without it; both unchanged otherwise."""
    found = identity_input_layer(graph, layers.get)
    if found is None:
        return graph, layers
    assert isinstance(found.meta, TableMeta)  # a table node
    rest = {name: tables for name, tables in layers.items() if name != found.meta.layer}
    return without_input_layer(graph, found), rest


def planned_input_format(graph: Graph, planned: dict[str, tuple[nn.Module, LayerPlan]]) -> Graph:
    """:func:`input_format` before the tables are built (for estimates from the plans): only the candidate
    layer, the input quantizer, is tabulated (one table of the input's codes per channel or element)."""

    def tables(name: str) -> LayerTables | None:
        return tabulate(*planned[name]) if name in planned else None

    found = identity_input_layer(graph, tables)
    return graph if found is None else without_input_layer(graph, found)


def identity_input_layer(graph: Graph, tables: Callable[[str], LayerTables | None]) -> Node | None:
    """The table node right after the input (through windows of one tap) whose tables, ``tables(layer name)``,
    are all the identity on codes; ``None`` where there is none, or where the network would be left with nothing
    but its input and output. ``tables`` is called for that one candidate only, after the graph's checks."""
    start = graph.nodes[0]
    node = start
    while True:
        readers = graph.consumers(node.name)
        if len(readers) != 1:
            return None  # the input (or a window of it) fans out: another node reads it as it is
        node = graph[readers[0]]
        if not node.kind.windowed:
            break
        meta = node.meta
        assert isinstance(meta, WindowMeta)  # a checked graph
        if meta.taps != 1 or any(s != 1 for s in meta.stride):
            return None
    if not node.kind.tabulated or node.shape != start.shape or node.layout != start.layout:
        return None
    if any(graph[r].kind.is_output for r in graph.consumers(node.name)):
        return None  # a network of the quantizer alone keeps its one layer
    assert isinstance(node.meta, TableMeta)  # a checked graph
    layer = tables(node.meta.layer)
    return node if layer is not None and _is_identity(node, start, layer) else None


def without_input_layer(graph: Graph, table: Node) -> Graph:
    """``graph`` without ``table`` (found by :func:`identity_input_layer`) and the windows before it: the table's
    readers read the input, whose domain becomes the table's (equal codes, equal values)."""
    start = dataclasses.replace(graph.nodes[0], domain=table.domain)
    dropped = {table.name}
    node = table
    while node.name != start.name:  # the windows between the input and the table
        node = graph[graph.inputs(node.name)[0]]
        dropped.add(node.name)
    dropped.discard(start.name)
    edges = []
    for edge in graph.edges:
        if edge.consumer in dropped:
            continue  # the input's edge into the dropped window or table
        if edge.producer == table.name:
            edge = Edge(start.name, 0, edge.consumer, edge.consumer_port, start.shape, start.layout, start.domain)
        edges.append(edge)
    nodes = [start, *(n for n in graph.nodes[1:] if n.name not in dropped)]
    return Graph(nodes, edges).check()


def _is_identity(node: Node, start: Node, layer: LayerTables) -> bool:
    """Whether ``node`` holds quantizers and elementwise modules only (no mixing layer) and every unit reads one
    element and writes it back, code for code, in the domain the input gives that element (so its value too)."""
    meta = node.meta
    assert isinstance(meta, TableMeta)  # a checked graph
    if not layer.plan.spec.elementwise:
        return False  # a layer of the user's own (a mixing layer, even one that computes the identity) stays
    ins, outs = start.channel_domains(), node.channel_domains()
    if ins is None or outs is None or len(ins) != len(outs) or len(layer.tables) != len(meta.units):
        return False
    for unit, table in zip(meta.units, layer.tables):
        if unit.fan_in != 1 or tuple(unit.in_channels) != tuple(unit.out_channels):
            return False
        channel = unit.in_channels[0]
        if int(meta.index_map[unit.index][0]) != channel or ins[channel] != outs[channel]:
            return False
        if not table.is_dense or table.fan_out != 1 or table.output_domain != outs[channel]:
            return False
        if table.input_domains != (ins[channel],):
            return False
        if not np.array_equal(table.outputs[:, 0], np.arange(table.rows)):
            return False
    return True
