"""The interlayer graph's invariants, checked node kind by node kind (what :meth:`Graph.check` runs).

A graph may come from :func:`iotable.precompute`, from a bundle on disk or from a hand edit, so nothing is
assumed: every node's fields and its kind's metadata record are present and typed, every edge joins
existing nodes on existing ports, producer before consumer, and shapes, layouts, domains, index maps,
line buffers, pad codes and pool windows agree with what the producers make. A graph that passes runs in
the runtime without an internal error, and its metadata says what the runtime computes.

What every node has is checked here; what a node kind's record must say is checked by its kind
(:meth:`NodeKindDef.check <iotable.graph.kind.NodeKindDef.check>`, looked up in the registry of
:mod:`iotable.graph.kind`).
"""

from __future__ import annotations

from typing import Any

from ..domain import Domain
from ..layout import Layout
from .fields import REBUILD, element_domains, is_int, node_where, shape_field, short_list
from .kind import NodeKind, definition, definitions, find
from .nodes import Edge, GraphError, Node

__all__ = ["check_graph", "element_domains"]


def check_graph(graph: Any) -> None:
    """Raise :class:`GraphError` naming the node or edge, expected and received, on the first violation."""
    nodes, edges = graph.nodes, graph.edges
    if not isinstance(nodes, tuple) or not isinstance(edges, tuple):
        msg = "graph: nodes and edges must be tuples (a Graph holds them so); build it with Graph(nodes, edges)"
        raise GraphError(msg)
    for i, node in enumerate(nodes):
        _check_fields(node, i)
    position = _check_names(nodes)
    _check_ends(nodes)
    by_name = {n.name: n for n in nodes}
    into, out_of = _check_edges(edges, by_name, position)
    for node in nodes:
        incoming = _ports(node, into.get(node.name, {}))
        producers = [by_name[e.producer] for e in incoming]
        definition(node.kind).check(node, producers, incoming, out_of.get(node.name, []))


def _check_fields(node: Any, i: int) -> None:
    if not isinstance(node, Node):
        msg = f"graph: nodes[{i}] is a {type(node).__name__}, not a Node"
        raise GraphError(msg)
    if not isinstance(node.name, str) or not node.name:
        msg = f"graph: nodes[{i}] has the name {node.name!r}; expected a non-empty string"
        raise GraphError(msg)
    if not isinstance(node.kind, NodeKind) or find(node.kind) is None:
        accepted = ", ".join(k.value for k in definitions())
        msg = f"graph: node {node.name!r} has kind {node.kind!r}; expected a registered NodeKind ({accepted})"
        raise GraphError(msg)
    where = node_where(node)
    shape_field(node.shape, f"{where}: shape", exact=True)
    if node.layout is not None:
        if not isinstance(node.layout, Layout):
            msg = f"{where}: layout must be a Layout or None, received {node.layout!r}"
            raise GraphError(msg)
        if len(node.shape) != node.layout.spatial_rank + 1:
            msg = (
                f"{where}: shape {node.shape} has {len(node.shape)} axes, but layout {node.layout.value} "
                f"describes {node.layout.spatial_rank + 1} (channels and spatial axes, no batch axis)"
            )
            raise GraphError(msg)
    _check_domain(node, where)
    record = definition(node.kind).meta
    if type(node.meta) is not record:
        msg = (
            f"{where}: meta must be a {record.__name__} (the {node.kind.value} node's record), received "
            f"{type(node.meta).__name__}; {REBUILD}"
        )
        raise GraphError(msg)
    if node.fx_node is not None and not isinstance(node.fx_node, str):
        msg = f"{where}: fx_node must name the traced node it stands for, or be None; received {node.fx_node!r}"
        raise GraphError(msg)
    if hasattr(node.meta, "modules"):
        modules = node.meta.modules
        if not isinstance(modules, tuple) or not all(isinstance(m, str) for m in modules):
            msg = f"{where}: meta.modules must be a tuple of module names, received {modules!r}"
            raise GraphError(msg)


def _check_domain(node: Node, where: str) -> None:
    domain = node.domain
    if isinstance(domain, tuple):
        if not domain or not all(isinstance(d, Domain) for d in domain):
            msg = f"{where}: domain must be a Domain, a non-empty tuple of Domains or None, received {domain!r}"
            raise GraphError(msg)
        if not node.kind.windowed and len(domain) != node.channels:
            msg = f"{where}: lists {len(domain)} channel domain(s) for {node.channels} channel(s) of shape {node.shape}"
            raise GraphError(msg)
    elif domain is not None and not isinstance(domain, Domain):
        msg = f"{where}: domain must be a Domain, a tuple of Domains or None, received {domain!r}"
        raise GraphError(msg)


def _check_names(nodes: tuple[Node, ...]) -> dict[str, int]:
    position: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.name in position:
            msg = f"graph: node name {node.name!r} is used twice (positions {position[node.name]} and {i}); rename one"
            raise GraphError(msg)
        position[node.name] = i
    return position


def _check_ends(nodes: tuple[Node, ...]) -> None:
    """One input node, first, and one output node, last: the runtime reads the batch in and the result out there."""
    if not nodes or not nodes[0].kind.is_input or not nodes[-1].kind.is_output:
        ends = f"{nodes[0].kind.value} first and {nodes[-1].kind.value} last" if nodes else "no node"
        msg = f"graph: expected the input node first and the output node last, received {ends}"
        raise GraphError(msg)
    for node in nodes[1:-1]:
        if node.kind.is_input or node.kind.is_output:
            msg = f"graph: node {node.name!r} is a second {node.kind.value} node; a graph has one input and one output"
            raise GraphError(msg)


Into = dict[str, dict[int, Edge]]


def _check_edges(
    edges: tuple[Edge, ...], nodes: dict[str, Node], position: dict[str, int]
) -> tuple[Into, dict[str, list[Edge]]]:
    """Every edge joins existing nodes, producer first, on ports driven once; returns them by consumer port and
    by producer."""
    into: Into = {}
    out_of: dict[str, list[Edge]] = {}
    used: dict[tuple[str, int], Edge] = {}
    for k, edge in enumerate(edges):
        where = _check_edge_fields(edge, k, nodes)
        if position[edge.producer] >= position[edge.consumer]:
            msg = (
                f"{where}: {edge.consumer!r} reads {edge.producer!r}, which comes at or after it: the graph has a "
                "cycle or is not in topological order; order producers before consumers"
            )
            raise GraphError(msg)
        if edge.consumer_port in into.get(edge.consumer, {}):
            msg = f"{where}: input port {edge.consumer_port} of {edge.consumer!r} is driven twice"
            raise GraphError(msg)
        into.setdefault(edge.consumer, {})[edge.consumer_port] = edge
        producer = nodes[edge.producer]
        meta = producer.meta
        ports = definition(producer.kind).output_ports(meta)
        if is_int(ports) and edge.producer_port >= ports:
            msg = f"{where}: leaves output port {edge.producer_port} of {producer.name!r}, which has {ports}"
            raise GraphError(msg)
        key = (edge.producer, edge.producer_port)
        if key in used:
            msg = (
                f"{where}: output port {edge.producer_port} of {producer.name!r} already drives "
                f"{used[key].consumer!r}; one output port drives one edge (a duplicate node fans out)"
            )
            raise GraphError(msg)
        used[key] = edge
        out_of.setdefault(edge.producer, []).append(edge)
        _check_carried(edge, producer)
    return into, out_of


def _check_edge_fields(edge: Any, k: int, nodes: dict[str, Node]) -> str:
    if not isinstance(edge, Edge):
        msg = f"graph: edges[{k}] is a {type(edge).__name__}, not an Edge"
        raise GraphError(msg)
    where = f"graph: edges[{k}] ({edge.producer!r} -> {edge.consumer!r})"
    for end in ("producer", "consumer"):
        name = getattr(edge, end)
        if not isinstance(name, str) or name not in nodes:
            msg = f"{where}: its {end} {name!r} is not a node of the graph; every edge joins two nodes"
            raise GraphError(msg)
    for port_name in ("producer_port", "consumer_port"):
        port = getattr(edge, port_name)
        if isinstance(port, bool) or not isinstance(port, int) or port < 0:
            msg = f"{where}: {port_name} must be an integer >= 0, received {port!r}"
            raise GraphError(msg)
    shape_field(edge.shape, f"{where}: shape", exact=True)
    return where


def _check_carried(edge: Edge, producer: Node) -> None:
    """An edge carries what its producer makes: its shape, layout and domain."""
    where = f"edge {edge.producer!r} -> {edge.consumer!r} (port {edge.consumer_port})"
    if edge.shape != producer.shape:
        msg = f"graph: {where} carries shape {edge.shape}, but {producer.name!r} produces {producer.shape}"
        raise GraphError(msg)
    if edge.layout != producer.layout:
        got = None if edge.layout is None else getattr(edge.layout, "value", edge.layout)
        made = None if producer.layout is None else producer.layout.value
        msg = f"graph: {where} carries layout {got}, but {producer.name!r} produces {made}"
        raise GraphError(msg)
    if edge.domain != producer.domain:
        msg = f"graph: {where} carries domain {edge.domain!r}, but {producer.name!r} produces {producer.domain!r}"
        raise GraphError(msg)


def _ports(node: Node, edges: dict[int, Edge]) -> list[Edge]:
    """The edges into ``node`` by port: ports 0, 1, ... each driven once, as many as its kind reads."""
    ports = sorted(edges)
    count = definition(node.kind).reads
    if count == 0:
        wanted, reads = 0, "reads nothing"
    elif count is None:
        wanted, reads = max(1, len(ports)), "reads one operand per port, at least one"
    else:
        wanted, reads = count, "reads exactly one producer" if count == 1 else f"reads {count} producers"
    if ports != list(range(wanted)):
        msg = (
            f"{node_where(node)}: edges drive its input port(s) {short_list(ports)}; a {node.kind.value} node {reads} "
            f"(ports 0..{wanted - 1}, each driven by one edge)"
        )
        if node.kind.is_input:
            msg = f"{node_where(node)}: edges drive its input port(s) {short_list(ports)}; the input node reads nothing"
        raise GraphError(msg)
    return [edges[p] for p in ports]
