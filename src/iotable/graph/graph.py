"""The interlayer graph: how outputs of tables reach inputs of tables, for a hardware generator.

A :class:`Graph` is an immutable sequence of :class:`Node` in topological order plus the :class:`Edge`
between them. Every node holds its kind's typed metadata (:class:`TableMeta`, :class:`PadMeta`,
:class:`WindowMeta`, ... see :mod:`iotable.graph.nodes`). Node kinds are registered by name
(:class:`NodeKindDef`, :func:`register`; one module per built-in kind in :mod:`iotable.nodekinds`).
Tensors between nodes are per-sample arrays of integer codes in the model's own tensor layout (batch
axis left out), so a ``reshape`` node is exactly the model's ``flatten``/``view``.

Built-in kinds:

- ``input``: the network input; ``output``: the network output.
- ``table``: a table layer (:class:`TableMeta`); for a spatial layer the node is fed by a ``window``
  node and applies every unit at every position (weight sharing). Its ``index_map`` says which element
  feeds which input of which unit.
- ``pad``: pads spatial axes (:class:`PadMeta`): widths, mode, each channel's pad code and, for every
  output element, the input element it copies (:func:`pad_index_map`).
- ``window``: a sliding window (:class:`WindowMeta`: kernel, stride, dilation, channels, element order,
  line-buffer depth); its output is one window vector per output position, shape
  ``(*positions, channels * kernel positions)``.
- ``reshape``: flatten / view of the codes.
- ``duplicate``: fan-out of one producer to several consumers (one output port each).
- ``join``: ``concat`` of operands along the channel axis (an add followed by a quantizer is a join that
  gathers both operands, then a table of fan-in 2 per element).
- ``pool``: max-pooling of codes (codes ascend with values, so the max of codes is the code of the max).
- ``host``: a module the runtime runs with torch on decoded values (not tabulated); its output is raw.
- ``sum``: weighted sums of codes in exact integer arithmetic (:class:`SumMeta`: GroupSum's popcounts,
  class sums with a bias, a neuron's per-edge sums, partial sums); an adder tree in hardware.
- ``argmax``: the index of the largest code along an axis, ties to the first (:class:`ArgmaxMeta`).
- ``threshold``: a monotone step function of each code as comparisons against constants
  (:class:`ThresholdMeta`: a quantizer after a sum).

Which nodes feed a node is what the edges say: :meth:`Graph.inputs` derives it from them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .._util import display as _display
from .checks import check_graph
from .kind import NodeKindDef, definition, register
from .nodes import (
    META,
    ArgmaxMeta,
    DomainSpec,
    DuplicateMeta,
    Edge,
    ElementOrder,
    GraphError,
    HostMeta,
    InputMeta,
    JoinMeta,
    Meta,
    Node,
    NodeKind,
    OutputMeta,
    PadMeta,
    PoolMeta,
    ReshapeMeta,
    SumMeta,
    TableMeta,
    ThresholdMeta,
    WindowMeta,
    bits_label,
    pad_index_map,
    window_buffer_depth,
)

if TYPE_CHECKING:
    from .diagram import Diagram

__all__ = [
    "META",
    "ArgmaxMeta",
    "DomainSpec",
    "DuplicateMeta",
    "Edge",
    "ElementOrder",
    "Graph",
    "GraphError",
    "HostMeta",
    "InputMeta",
    "JoinMeta",
    "Meta",
    "Node",
    "NodeKind",
    "NodeKindDef",
    "OutputMeta",
    "PadMeta",
    "PoolMeta",
    "ReshapeMeta",
    "SumMeta",
    "TableMeta",
    "ThresholdMeta",
    "WindowMeta",
    "definition",
    "pad_index_map",
    "register",
    "window_buffer_depth",
    "wire",
]


class Graph:
    """The interlayer graph: nodes in topological order plus the edges between them, immutable.

    A graph never changes once made, so networks, plans and runtimes can share one. :meth:`replace`
    gives a graph with some nodes swapped; :meth:`check` verifies the invariants.

    Example:
        >>> d = Domain.uniform(1)
        >>> ends = (("input", NodeKind("input")), ("output", NodeKind("output")))
        >>> nodes = [Node(name, kind, (2,), Layout.NC, d) for name, kind in ends]
        >>> g = Graph(nodes, [Edge("input", 0, "output", 0, (2,), Layout.NC, d)])
        >>> g.check().inputs("output")
        ('input',)
    """

    def __init__(self, nodes: Iterable[Node] = (), edges: Iterable[Edge] = ()) -> None:
        self._nodes = tuple(nodes)
        self._edges = tuple(edges)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes, in topological order (the input node first, the output node last)."""
        return self._nodes

    @property
    def edges(self) -> tuple[Edge, ...]:
        """The edges."""
        return self._edges

    def replace(self, *nodes: Node) -> Graph:
        """A graph with each of ``nodes`` in place of the node of its name (edges unchanged).

        Raises:
            GraphError: a node's name is not in the graph.
        """
        new = {n.name: n for n in nodes}
        unknown = sorted(set(new) - {n.name for n in self._nodes})
        if unknown:
            msg = f"graph.replace: no node named {unknown[0]!r}; replace swaps nodes of the graph by name"
            raise GraphError(msg)
        return Graph([new.get(n.name, n) for n in self._nodes], self._edges)

    # -- reading ------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return self._nodes == other._nodes and self._edges == other._edges

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        kinds = Counter(n.kind for n in self._nodes)
        counts = ", ".join(f"{kinds[k]} {k.value}" for k in NodeKind if kinds[k])
        return _display.bounded(f"Graph({len(self._nodes)} nodes, {len(self._edges)} edges: {counts})")

    def _repr_html_(self) -> str:
        return _display.view(repr(self), _display.table(self.rows()), picture=self.picture_html())

    @cached_property
    def _by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self._nodes}

    @cached_property
    def _into(self) -> dict[str, tuple[Edge, ...]]:
        into: dict[str, list[Edge]] = {}
        for edge in self._edges:
            into.setdefault(edge.consumer, []).append(edge)
        return {name: tuple(sorted(edges, key=lambda e: e.consumer_port)) for name, edges in into.items()}

    @cached_property
    def _out_of(self) -> dict[str, tuple[Edge, ...]]:
        out: dict[str, list[Edge]] = {}
        for edge in self._edges:
            out.setdefault(edge.producer, []).append(edge)
        return {name: tuple(sorted(edges, key=lambda e: e.producer_port)) for name, edges in out.items()}

    def __getitem__(self, name: str) -> Node:
        node = self._by_name.get(name) if isinstance(name, str) else None
        if node is None:
            names = [n.name for n in self._nodes]
            shown = names if len(names) <= 20 else [*names[:20], f"... ({len(names)} in all)"]
            msg = f"graph: no node named {name!r}; nodes are {shown}"
            raise GraphError(msg)
        return node

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    def inputs(self, name: str) -> tuple[str, ...]:
        """The producers of node ``name``, one per input port in port order (what its edges say)."""
        return tuple(e.producer for e in self._into.get(name, ()))

    def producers(self, name: str) -> tuple[Node, ...]:
        """The nodes that feed node ``name``, one per input port in port order."""
        return tuple(self[e.producer] for e in self._into.get(name, ()))

    def consumers(self, name: str) -> tuple[str, ...]:
        """The nodes node ``name`` feeds, by output port."""
        return tuple(e.consumer for e in self._out_of.get(name, ()))

    def edges_into(self, name: str) -> list[Edge]:
        """Edges whose consumer is ``name``, by input port."""
        return list(self._into.get(name, ()))

    def edges_from(self, name: str) -> list[Edge]:
        """Edges whose producer is ``name``, by output port."""
        return list(self._out_of.get(name, ()))

    def nodes_of(self, kind: NodeKind | str) -> list[Node]:
        """Nodes of one kind."""
        try:
            kind = NodeKind(kind)
        except ValueError:
            accepted = ", ".join(repr(k.value) for k in NodeKind)
            msg = f"graph: unknown node kind {kind!r}; expected one of {accepted}"
            raise GraphError(msg) from None
        return [n for n in self._nodes if n.kind is kind]

    def table_nodes(self) -> list[Node]:
        """Nodes that look their outputs up in a layer of tables (their kind definition says ``tabulated``)."""
        return [n for n in self._nodes if n.kind.tabulated]

    def host_nodes(self) -> list[Node]:
        """Nodes run in software on decoded values (their kind definition says ``hosted``)."""
        return [n for n in self._nodes if n.kind.hosted]

    # -- invariants ---------------------------------------------------------------------------------------

    def check(self) -> Graph:
        """Verify the invariants; raise :class:`GraphError` naming the node or edge on the first violation.

        A graph may come from a bundle on disk or a hand edit, so nothing is taken on trust:

        - every node's name, kind, shape, layout, domain and metadata are present and typed (the metadata
          is its kind's record, every field typed), names are unique, the input node is first and the
          output node last;
        - every edge joins existing nodes, producer before consumer (topological order, hence no cycle);
          each node's input ports 0, 1, ... are each driven by exactly one edge, as many as its kind reads,
          and every output port drives at most one (a ``duplicate`` node fans out, each of its ports once);
        - shapes, layouts and domains agree across each edge;
        - each kind's metadata agrees with its producers: table units write each output channel once and
          their index maps drive every unit input once with the elements their input channels name, with
          the rows and bits of those elements' domains; window shapes, domains and line buffers follow
          from kernel, stride, dilation and the input; a pad node's shape and index map are the ones its
          mode and padding give (:func:`pad_index_map`), its pad codes each channel's code of real 0;
          pools, joins and reshapes make the shapes and domains they claim.

        Returns:
            The graph itself, so that ``graph.check()`` can be chained.
        """
        check_graph(self)
        return self

    # -- display ------------------------------------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        """One dict per node with the summary columns (kind, name, shape, units, fan-in, bits, rows, ...)."""
        result = []
        for node in self._nodes:
            row: dict[str, Any] = {"kind": node.kind.value, "name": node.name, "shape": node.shape}
            row.update(definition(node.kind).row(node))
            result.append(row)
        return result

    def summary(self) -> str:
        """A readable table: kind, name, shape, units, fan-in, bits, rows, buffer, stride."""
        return text_table(self.rows(), SUMMARY_COLUMNS)

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
        for node in self._nodes:
            lines.append(f"  {_dot_id(node.name)} [{_dot_node_attributes(node)}];")
        for edge in self._edges:
            label = f"{dims(edge.shape)}, {bits_label(edge.domain)}"
            consumer = self._by_name.get(edge.consumer)
            if consumer is not None and isinstance(consumer.meta, WindowMeta):
                label += f"\\nbuffer {consumer.meta.buffer_depth}, stride {dims(consumer.meta.stride)}"
            lines.append(f'  {_dot_id(edge.producer)} -> {_dot_id(edge.consumer)} [label="{label}"];')
        lines.append("}")
        return "\n".join(lines)

    def to_svg(self) -> str:
        """The graph's picture as SVG text, drawn by Graphviz from :meth:`to_dot`.

        Needs the optional extra ``iotable[notebook]`` (the ``graphviz`` package) and Graphviz's ``dot``
        program; without them it raises :class:`~iotable.errors.GraphvizNotInstalledError`, which says what
        to install.
        """
        from .diagram import render_svg  # the optional integration, imported only when a picture is asked for

        return render_svg(self.to_dot())

    def picture_html(self) -> str:
        """The picture as inline SVG for a notebook view, or ``""`` without Graphviz or for a large graph."""
        from .diagram import GraphvizNotInstalledError

        if len(self._nodes) > _display.MAX_PICTURE_NODES:
            return ""
        try:
            svg = self.to_svg()
        except GraphvizNotInstalledError:  # the notebook extra is optional: the table alone
            return ""
        return f'<div class="picture">{svg}</div>'

    def draw(self) -> Diagram:
        """The graph's picture (:class:`~iotable.graph.diagram.Diagram`), which a Jupyter notebook shows inline.

        Needs Graphviz, as :meth:`to_svg` does.
        """
        from .diagram import Diagram

        return Diagram(dot=self.to_dot(), svg=self.to_svg())


# -- DOT ----------------------------------------------------------------------------------------------------------


def _dot_text(text: str) -> str:
    """``text`` inside a double-quoted DOT string (where ``\\`` and ``"`` must be escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


#: The columns of :meth:`Graph.summary`, keys of :meth:`Graph.rows`.
SUMMARY_COLUMNS = ("kind", "name", "shape", "units", "fan_in", "bits", "rows", "buffer", "stride")


def text_table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """``rows`` as plain-text columns headed by their keys (a missing or ``None`` value is blank)."""
    table = [["" if r.get(c) is None else str(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in table]
    return "\n".join(lines)


def _dot_id(name: str) -> str:
    return f'"{_dot_text(name)}"'


def dims(values: Any) -> str:
    """``(1, 10, 10)`` as ``1x10x10`` (a single number as itself)."""
    return "x".join(map(str, values)) if isinstance(values, (tuple, list)) else str(values)


def _dot_node_attributes(node: Node) -> str:
    """A node's DOT attributes: its kind's shape and style, a label of its kind, name, shape and what its
    kind adds (:meth:`NodeKindDef.label <iotable.graph.kind.NodeKindDef.label>`)."""
    kind = definition(node.kind)
    lines = [kind.title(node), _dot_text(node.name), dims(node.shape), *kind.label(node)]
    label = "\\n".join(lines)  # DOT's line break inside a label
    attributes = f'shape={kind.dot_shape}, label="{label}"'
    return f"{attributes}, {kind.dot_style}" if kind.dot_style else attributes


def wire(nodes: Iterable[Node], reads: Mapping[str, Sequence[str]], duplicate: Callable[[Node, int], Node]) -> Graph:
    """The checked graph of ``nodes`` in order, each reading the nodes ``reads`` names (one per input port), with
    ``duplicate(node, n)`` inserted after each node that ``n > 1`` ports read (a branch): its output ``k`` feeds
    the ``k``-th reader. Every front end assembles its graph so."""
    readers: dict[str, list[tuple[str, int]]] = {}
    for name, sources in reads.items():
        for port, source in enumerate(sources):
            readers.setdefault(source, []).append((name, port))
    ordered: list[Node] = []
    producer: dict[tuple[str, int], tuple[str, int]] = {}  # (reader, port) -> (node, output port)
    for node in nodes:
        ordered.append(node)
        mine = readers.get(node.name, [])
        if len(mine) > 1:
            dup = duplicate(node, len(mine))
            ordered.append(dup)
            producer[(dup.name, 0)] = (node.name, 0)
            producer.update({reader: (dup.name, k) for k, reader in enumerate(mine)})
    by_name = {n.name: n for n in ordered}
    edges = []
    for node in ordered:
        ports = len(reads.get(node.name, ())) or int((node.name, 0) in producer)  # a duplicate reads one
        for port in range(ports):
            key = (node.name, port)
            source, out_port = producer[key] if key in producer else (reads[node.name][port], 0)
            made = by_name[source]
            edges.append(Edge(source, out_port, node.name, port, made.shape, made.layout, made.domain))
    return Graph(ordered, edges).check()
