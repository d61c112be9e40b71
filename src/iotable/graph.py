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
- ``pad``: pads spatial axes: ``meta["padding"]`` (a ``(before, after)`` pair per axis), ``meta["mode"]``
  (``"zeros"``, ``"reflect"``, ``"replicate"``, ``"circular"``), ``meta["index_map"]`` (for every output
  element, the flat index of the input element it copies, or ``-1`` where it holds its channel's pad code,
  :func:`pad_index_map`) and ``meta["pad_codes"]`` (each channel's code of real 0 in mode ``"zeros"``).
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
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _display
from .domain import Domain
from .errors import IOTableError, SpecError
from .spec import Layout, PaddingMode

if TYPE_CHECKING:
    from .diagram import Diagram

__all__ = ["Edge", "Graph", "GraphError", "Node", "NodeKind", "pad_index_map"]


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

    def __repr__(self) -> str:
        text = f"Node({_display.name(self.name)}, {self.kind.value}, shape {self.shape}"
        if self.kind is NodeKind.TABLE and "units" in self.meta:
            units = self.meta["units"]
            text += f", {len(units)} units, {sum(u.rows for u in units):,} rows"
        if self.inputs:
            more = f" and {len(self.inputs) - 2} more" if len(self.inputs) > 2 else ""
            text += f", reads {', '.join(_display.name(i) for i in self.inputs[:2])}{more}"
        return _display.bounded(text + ")")


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

    def __repr__(self) -> str:
        text = (
            f"Edge({_display.name(self.producer)}[{self.producer_port}] -> {_display.name(self.consumer)}"
            f"[{self.consumer_port}], shape {self.shape}, {_bits_label(self.domain)}"
        )
        if self.index_map is not None:
            text += f", index map {'x'.join(map(str, self.index_map.shape))}"
        if self.buffer:
            text += f", buffer {self.buffer['depth']}, stride {self.buffer['stride']}"
        return _display.bounded(text + ")")


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


def pad_index_map(
    shape: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    mode: str | PaddingMode,
    *,
    channels_last: bool = False,
) -> np.ndarray:
    """What every element of a padded tensor holds: the flat index of the input element it copies, or ``-1``.

    ``shape`` is the per-sample input shape (channels first, or last with ``channels_last``), ``padding``
    one ``(before, after)`` pair per spatial axis. The result has the padded shape; entry ``e`` is the
    C-order flat index into the input of the element that ``e`` copies, or ``-1`` where ``e`` holds its
    channel's pad code (mode ``"zeros"``). Every mode pads axis by axis, so a corner copies the copy of
    an edge, as torch's padding does.

    Raises:
        SpecError: a padding wider than the mode allows (reflect: less than the extent, circular: at most).

    Example:
        >>> pad_index_map((1, 3), ((2, 1),), "reflect").tolist()
        [[2, 1, 0, 1, 2, 1]]
        >>> pad_index_map((2, 2), ((1, 0),), "zeros").tolist()
        [[-1, 0, 1], [-1, 2, 3]]
    """
    mode = PaddingMode.parse(mode, what="pad_index_map")
    shape = tuple(int(n) for n in shape)
    first = 0 if channels_last else 1
    if len(padding) != len(shape) - 1:
        msg = f"pad_index_map: {len(padding)} (before, after) pair(s) for the {len(shape) - 1} spatial axes of {shape}"
        raise SpecError(msg)
    index = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    for axis, (before, after) in enumerate(padding):
        sources = mode.sources(shape[first + axis], int(before), int(after))
        taken = np.take(index, np.maximum(sources, 0), axis=first + axis)
        held = (sources < 0).reshape([-1 if a == first + axis else 1 for a in range(len(shape))])
        index = np.where(held, -1, taken)
    return index


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

    def __repr__(self) -> str:
        kinds = Counter(n.kind for n in self.nodes)
        counts = ", ".join(f"{kinds[k]} {k.value}" for k in NodeKind if kinds[k])
        return _display.bounded(f"Graph({len(self.nodes)} nodes, {len(self.edges)} edges: {counts})")

    def _repr_html_(self) -> str:
        return _display.view(repr(self), _display.table(self.rows()), picture=_display.graph_picture(self))

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
        """Verify the invariants; raise :class:`GraphError` naming the node or edge on the first violation.

        A graph may come from a bundle on disk or a hand edit, so nothing is taken on trust:

        - every node's name, kind, producers, shape, layout and domain are present and typed, names are
          unique, producers come earlier (topological order, hence no cycle), the input node is first and the
          output node last;
        - every edge joins existing nodes; every input port is driven by exactly one edge and every output
          port drives at most one (a ``duplicate`` node fans out, each of its ports once);
        - shapes, layouts and domains agree across each edge, and ``meta["input_shapes"]`` with them;
        - each kind's ``meta`` holds the keys it has (no other), typed, and agrees with its producers: table
          units write each output channel once and their index maps are the elements their input channels
          name, with the rows and bits of those elements' domains; window shapes, domains and line buffers
          follow from kernel, stride, dilation and the input; a pad node's shape and index map are the ones
          its mode and padding give (:func:`pad_index_map`), its pad codes each channel's code of real 0;
          pools, joins and reshapes make the shapes and domains they claim.

        Returns:
            The graph itself, so that ``graph.check()`` can be chained.
        """
        from ._invariants import check_graph  # the rules, kind by kind, live with their own imports

        check_graph(self)
        return self

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
        """The graph in Graphviz DOT, for :meth:`to_svg` or ``dot -Tsvg``.

        Node shapes tell the kinds apart (tables are filled 3-D boxes, host nodes grey dashed components
        labelled "host (torch)", windows parallelograms, ...); a node's label gives its kind, name and
        output shape, and for a table its units, fan-ins, bits per unit and rows, for a window its kernel and
        stride. Edges are labelled with the shape they carry and the bits per element (``float`` for raw
        values); an edge into a window also with its line-buffer depth and stride.
        """
        lines = [
            "digraph iotable {",
            "  rankdir=TB;",
            '  node [fontname="monospace", fontsize=10];',
            '  edge [fontname="monospace", fontsize=9];',
        ]
        for node in self.nodes:
            lines.append(f"  {_dot_id(node.name)} [{_dot_node_attributes(node)}];")
        for edge in self.edges:
            label = f"{_dims(edge.shape)}, {_bits_label(edge.domain)}"
            if edge.buffer:
                label += f"\\nbuffer {edge.buffer['depth']}, stride {_dims(edge.buffer['stride'])}"
            lines.append(f'  {_dot_id(edge.producer)} -> {_dot_id(edge.consumer)} [label="{label}"];')
        lines.append("}")
        return "\n".join(lines)

    def to_svg(self) -> str:
        """The graph's picture as SVG text, drawn by Graphviz from :meth:`to_dot`.

        Needs the optional extra ``iotable[notebook]`` (the ``graphviz`` package) and Graphviz's ``dot``
        program; without them it raises :class:`~iotable.diagram.GraphvizNotInstalledError`, which says what
        to install.
        """
        from .diagram import render_svg  # the optional integration, imported only when a picture is asked for

        return render_svg(self.to_dot())

    def draw(self) -> Diagram:
        """The graph's picture (:class:`~iotable.diagram.Diagram`), which a Jupyter notebook shows inline.

        Needs Graphviz, as :meth:`to_svg` does.
        """
        from .diagram import Diagram

        return Diagram(dot=self.to_dot(), svg=self.to_svg())


# -- DOT ----------------------------------------------------------------------------------------------------------

_DOT_SHAPES = {
    NodeKind.INPUT: "invhouse",
    NodeKind.OUTPUT: "house",
    NodeKind.TABLE: "box3d",
    NodeKind.PAD: "box",
    NodeKind.WINDOW: "parallelogram",
    NodeKind.RESHAPE: "oval",
    NodeKind.DUPLICATE: "triangle",
    NodeKind.JOIN: "invtriangle",
    NodeKind.POOL: "trapezium",
    NodeKind.HOST: "component",
}
_DOT_STYLES = {
    NodeKind.TABLE: 'style=filled, fillcolor="#dce9f7"',
    NodeKind.HOST: 'style="filled,dashed", fillcolor="#e6e6e6", color="#666666", fontcolor="#333333"',
    NodeKind.PAD: 'style="rounded,dashed"',
    NodeKind.WINDOW: "margin=0.02",  # a parallelogram is wide already: no margin on top
}


def _dot_text(text: str) -> str:
    """``text`` inside a double-quoted DOT string (where ``\\`` and ``"`` must be escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _dot_id(name: str) -> str:
    return f'"{_dot_text(name)}"'


def _dims(values: Any) -> str:
    """``(1, 10, 10)`` as ``1x10x10`` (a single number as itself)."""
    return "x".join(map(str, values)) if isinstance(values, (tuple, list)) else str(values)


def _bits_label(domain: DomainSpec) -> str:
    """Bits per element of a domain spec: ``2 bit``, ``2/3 bit`` (channels differ), or ``float`` (raw values)."""
    if domain is None:
        return "float"
    domains = (domain,) if isinstance(domain, Domain) else domain
    return "/".join(str(b) for b in sorted({d.bits for d in domains})) + " bit"


def _dot_node_attributes(node: Node) -> str:
    first = "host (torch)" if node.kind is NodeKind.HOST else node.kind.value
    lines = [first, _dot_text(node.name), _dims(node.shape)]
    if node.kind is NodeKind.TABLE:
        units = node.meta["units"]
        fan_ins = "/".join(map(str, sorted({u.fan_in for u in units})))
        bits = "/".join(map(str, sorted(set(node.meta["unit_bits"]))))
        lines.append(f"{len(units)} unit{'s' if len(units) != 1 else ''}, fan-in {fan_ins}, {bits} bit")
        lines.append(f"{sum(u.rows for u in units)} rows")
    elif node.kind is NodeKind.WINDOW:
        lines.append(f"kernel {_dims(node.meta['kernel'])}, stride {_dims(node.meta['stride'])}")
    label = "\\n".join(lines)  # DOT's line break inside a label
    attributes = f'shape={_DOT_SHAPES[node.kind]}, label="{label}"'
    style = _DOT_STYLES.get(node.kind)
    return f"{attributes}, {style}" if style else attributes
