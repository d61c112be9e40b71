"""The interlayer graph: how outputs of tables reach inputs of tables, for a hardware generator.

A :class:`Graph` is a list of :class:`Node` in topological order. Node kinds form a closed set
(:class:`NodeKind`); every node carries an open ``meta`` dict. Tensors between nodes are per-sample arrays
of integer codes in the model's own tensor layout (batch axis left out), so a ``reshape`` node is exactly
the model's ``flatten``/``view``.

Kinds and their ``meta``:

- ``input``: the network input (``meta["layout"]``).
- ``output``: the network output.
- ``table``: a table layer; ``meta["layer"]`` names its tables in the network, ``meta["units"]`` its
  units; for a spatial layer the node is fed by a ``window`` node and applies every unit at every position
  (weight sharing). Its input edge's ``index_map`` says which element feeds which input of which unit.
- ``pad``: pads spatial axes with each channel's code of real 0 (``meta["pad_codes"]``, ``meta["padding"]``).
- ``window``: a sliding window (``kernel``, ``stride``, ``dilation``, ``channels``, ``element_order``); its
  output is one window vector per output position, shape ``(*positions, channels * kernel positions)``;
  the edge into it records the line buffer (``Edge.buffer``).
- ``reshape``: flatten / view of the codes.
- ``duplicate``: fan-out of one producer to several consumers (one output port each).
- ``join``: ``concat`` of operands along the channel axis (an add followed by a quantizer is a join that
  gathers both operands, then a table of fan-in 2 per element).
- ``pool``: max-pooling of codes (codes ascend with values, so the max of codes is the code of the max).
- ``host``: a module the runtime runs with torch on decoded values (not tabulated); its output is raw.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .domain import Domain
from .errors import IOTableError
from .spec import Layout

__all__ = ["Edge", "Graph", "GraphError", "Node", "NodeKind"]


class GraphError(IOTableError, ValueError):
    """The interlayer graph breaks an invariant (see :meth:`Graph.check`)."""


class NodeKind(enum.Enum):
    """The closed set of node kinds of the interlayer graph."""

    INPUT = "input"
    OUTPUT = "output"
    TABLE = "table"
    PAD = "pad"
    WINDOW = "window"
    RESHAPE = "reshape"
    DUPLICATE = "duplicate"
    JOIN = "join"
    POOL = "pool"
    HOST = "host"


#: A node's output domain: one for every element, one per channel, or ``None`` for raw (float) values.
DomainSpec = Domain | tuple[Domain, ...] | None


@dataclass
class Node:
    """One node: its kind, producers (one per input port), per-sample output shape, layout and domain."""

    name: str
    kind: NodeKind
    inputs: tuple[str, ...]
    shape: tuple[int, ...]
    layout: Layout | None
    domain: DomainSpec
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def channels(self) -> int:
        """Size of the channel axis of the output (the only axis for ``"NC"``)."""
        if self.layout is None or not self.shape:
            return math.prod(self.shape)
        return self.shape[-1] if self.layout.channels_last else self.shape[0]

    def channel_domains(self) -> tuple[Domain, ...] | None:
        """The output domain of each channel, or ``None`` for raw values."""
        if self.domain is None:
            return None
        if isinstance(self.domain, Domain):
            return (self.domain,) * self.channels
        return self.domain


@dataclass(frozen=True)
class Edge:
    """A connection from a producer's output port to a consumer's input port.

    ``shape``, ``layout`` and ``domain`` describe the elements that travel (the producer's output).
    ``index_map`` is set on edges into ``table`` nodes: shape ``(units, max fan-in)``, entry ``[u, j]`` is
    the flat index (in the producer's per-sample tensor, or in the window vector) that feeds input ``j``
    of unit ``u``; ``-1`` pads units with a smaller fan-in. ``buffer`` is set on edges into ``window``
    nodes: ``depth`` (elements the line buffer holds), ``stride``, ``kernel``, ``dilation``, ``width`` (of
    the buffered input), ``channels`` and the ``element_order`` inside a window.
    """

    producer: str
    producer_port: int
    consumer: str
    consumer_port: int
    shape: tuple[int, ...]
    layout: Layout | None
    domain: DomainSpec
    index_map: np.ndarray | None = None
    buffer: dict[str, Any] | None = None


def window_buffer_depth(
    kernel: tuple[int, ...], dilation: tuple[int, ...], size: tuple[int, ...], channels: int
) -> int:
    """Line-buffer depth in elements of a sliding window over an input of spatial ``size``.

    2-D: ``((k_h - 1) * d_h * W + (k_w - 1) * d_w + 1) * C``; 1-D: ``((k - 1) * d + 1) * C``.

    Example:
        >>> window_buffer_depth((3, 3), (1, 1), (8, 8), 4)
        76
    """
    if len(kernel) == 1:
        return ((kernel[0] - 1) * dilation[0] + 1) * channels
    (k_h, k_w), (d_h, d_w), width = kernel, dilation, size[1]
    return ((k_h - 1) * d_h * width + (k_w - 1) * d_w + 1) * channels


class Graph:
    """The interlayer graph: nodes in topological order plus the edges between them.

    ``edges`` are stored explicitly (``add_edge``); :meth:`check` verifies the invariants.
    """

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.edges: list[Edge] = []

    # -- building -----------------------------------------------------------------------------------------

    def add(self, node: Node) -> Node:
        """Append a node (its producers must already be in the graph for :meth:`check` to pass)."""
        self.nodes.append(node)
        return node

    def add_edge(self, edge: Edge) -> Edge:
        """Record an edge."""
        self.edges.append(edge)
        return edge

    # -- reading ------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        msg = f"graph: no node named {name!r}; nodes are {[n.name for n in self.nodes]}"
        raise GraphError(msg)

    def edges_into(self, name: str) -> list[Edge]:
        """Edges whose consumer is ``name``, by input port."""
        return sorted((e for e in self.edges if e.consumer == name), key=lambda e: e.consumer_port)

    def edges_from(self, name: str) -> list[Edge]:
        """Edges whose producer is ``name``, by output port."""
        return sorted((e for e in self.edges if e.producer == name), key=lambda e: e.producer_port)

    def nodes_of(self, kind: NodeKind | str) -> list[Node]:
        """Nodes of one kind."""
        try:
            kind = NodeKind(kind)
        except ValueError:
            accepted = ", ".join(repr(k.value) for k in NodeKind)
            msg = f"graph: unknown node kind {kind!r}; expected one of {accepted}"
            raise GraphError(msg) from None
        return [n for n in self.nodes if n.kind is kind]

    # -- invariants ---------------------------------------------------------------------------------------

    def check(self) -> Graph:
        """Verify the invariants; raise :class:`GraphError` with the node and a fix on the first violation.

        - node names are unique; every producer a node names exists and comes earlier (topological order,
          hence no cycle);
        - every input port of every node is driven by exactly one edge, and every edge matches its nodes;
        - shapes, layouts and domains agree across each edge;
        - every unit input of every table is driven exactly once, by an element that exists.

        Returns:
            The graph itself, so that ``graph.check()`` can be chained.
        """
        position: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.name in position:
                msg = (
                    f"graph: node name {node.name!r} is used twice (positions {position[node.name]} and {i}); "
                    "rename one"
                )
                raise GraphError(msg)
            position[node.name] = i
        for i, node in enumerate(self.nodes):
            for producer in node.inputs:
                if producer not in position:
                    msg = f"graph: node {node.name!r} reads {producer!r}, which is not in the graph; add it first"
                    raise GraphError(msg)
                if position[producer] >= i:
                    msg = (
                        f"graph: node {node.name!r} reads {producer!r}, which comes at or after it: the graph has a "
                        "cycle or is not in topological order; order producers before consumers"
                    )
                    raise GraphError(msg)
        by_name = {n.name: n for n in self.nodes}
        for node in self.nodes:
            edges = self.edges_into(node.name)
            ports = [e.consumer_port for e in edges]
            if ports != list(range(len(node.inputs))):
                msg = (
                    f"graph: node {node.name!r} has {len(node.inputs)} input port(s) but edges drive port(s) "
                    f"{ports}; expected each port 0..{len(node.inputs) - 1} driven exactly once"
                )
                raise GraphError(msg)
            for edge, producer in zip(edges, node.inputs):
                self._check_edge(edge, by_name[producer], node)
        return self

    def _check_edge(self, edge: Edge, producer: Node, consumer: Node) -> None:
        where = f"edge {edge.producer!r} -> {edge.consumer!r} (port {edge.consumer_port})"
        if edge.producer != producer.name:
            msg = f"graph: {where} names producer {edge.producer!r}, but the consumer's port reads {producer.name!r}"
            raise GraphError(msg)
        if edge.shape != producer.shape:
            msg = f"graph: {where} carries shape {edge.shape}, but {producer.name!r} produces {producer.shape}"
            raise GraphError(msg)
        if edge.domain != producer.domain:
            msg = f"graph: {where} carries domain {edge.domain!r}, but {producer.name!r} produces {producer.domain!r}"
            raise GraphError(msg)
        expected = consumer.meta.get("input_shapes")
        if expected is not None and tuple(expected[edge.consumer_port]) != edge.shape:
            msg = (
                f"graph: {where} carries shape {edge.shape}, but {consumer.name!r} expects "
                f"{tuple(expected[edge.consumer_port])} on that port"
            )
            raise GraphError(msg)
        if consumer.kind is NodeKind.TABLE:
            self._check_index_map(edge, consumer, where)

    @staticmethod
    def _check_index_map(edge: Edge, table: Node, where: str) -> None:
        index_map = edge.index_map
        units = table.meta["units"]
        if index_map is None or index_map.shape[0] != len(units):
            got = None if index_map is None else index_map.shape
            msg = f"graph: {where} must map the inputs of {len(units)} unit(s); index_map has shape {got}"
            raise GraphError(msg)
        vector = edge.shape[-1] if table.meta.get("spatial") else math.prod(edge.shape)
        # Every unit at once: its first fan_in entries drive existing elements, the rest are -1.
        fan_in = np.asarray([unit.fan_in for unit in units], dtype=np.int64)
        driving = np.arange(index_map.shape[1])[None, :] < fan_in[:, None]
        bad = (driving & ((index_map < 0) | (index_map >= vector))) | (~driving & (index_map != -1))
        if not bad.any():
            return
        u = int(np.flatnonzero(bad.any(axis=1))[0])
        unit, row = units[u], index_map[u]
        driven = row[: unit.fan_in]
        if (driven < 0).any():
            j = int(np.flatnonzero(driven < 0)[0])
            msg = f"graph: table {table.name!r} unit {u} input {j} is not driven (index -1 on {where})"
            raise GraphError(msg)
        if (driven >= vector).any():
            j = int(np.flatnonzero(driven >= vector)[0])
            msg = (
                f"graph: table {table.name!r} unit {u} input {j} reads element {int(driven[j])}, but {where} "
                f"carries {vector} element(s) per position"
            )
            raise GraphError(msg)
        msg = f"graph: table {table.name!r} unit {u} has {unit.fan_in} inputs but more are driven on {where}"
        raise GraphError(msg)

    # -- display ------------------------------------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        """One dict per node with the summary columns (kind, name, shape, units, fan-in, bits, rows, ...)."""
        result = []
        for node in self.nodes:
            row: dict[str, Any] = {"kind": node.kind.value, "name": node.name, "shape": node.shape}
            if node.kind is NodeKind.TABLE:
                units = node.meta["units"]
                fan_ins = sorted({u.fan_in for u in units})
                row.update(
                    units=len(units),
                    fan_in="/".join(map(str, fan_ins)),
                    bits="/".join(map(str, sorted(set(node.meta["unit_bits"])))),
                    rows=sum(u.rows for u in units),
                )
            buffers = [e.buffer for e in self.edges_into(node.name) if e.buffer]
            if buffers:
                row.update(buffer=buffers[0]["depth"], stride=buffers[0]["stride"])
            if node.kind is NodeKind.HOST:
                row["host"] = "host (torch)"
            result.append(row)
        return result

    def summary(self) -> str:
        """A readable table: kind, name, shape, units, fan-in, bits, rows, buffer, stride."""
        columns = ["kind", "name", "shape", "units", "fan_in", "bits", "rows", "buffer", "stride"]
        table = [[str(r.get(c, "")) for c in columns] for r in self.rows()]
        widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in table]
        return "\n".join(lines)

    def to_dot(self) -> str:
        """The graph in Graphviz DOT: one box per node, edges labelled with shape (and buffer depth)."""
        shapes = {
            NodeKind.TABLE: "box3d",
            NodeKind.HOST: "component",
            NodeKind.INPUT: "invhouse",
            NodeKind.OUTPUT: "house",
        }
        lines = ["digraph iotable {", "  rankdir=TB;", '  node [fontname="monospace"];']
        for node in self.nodes:
            label = f"{node.kind.value}\\n{node.name}\\n{node.shape}"
            if node.kind is NodeKind.TABLE:
                label += f"\\n{len(node.meta['units'])} units, {sum(u.rows for u in node.meta['units'])} rows"
            lines.append(f'  "{node.name}" [shape={shapes.get(node.kind, "box")}, label="{label}"];')
        for edge in self.edges:
            label = "x".join(map(str, edge.shape))
            if edge.buffer:
                label += f"\\nbuffer {edge.buffer['depth']}, stride {edge.buffer['stride']}"
            lines.append(f'  "{edge.producer}" -> "{edge.consumer}" [label="{label}"];')
        lines.append("}")
        return "\n".join(lines)
