"""The interlayer graph's invariants, checked node kind by node kind (what :meth:`Graph.check` runs).

A graph may come from :func:`iotable.precompute`, from a bundle on disk or from a hand edit, so nothing is
assumed: every node's fields and its kind's metadata record are present and typed, every edge joins
existing nodes on existing ports, producer before consumer, and shapes, layouts, domains, index maps,
line buffers, pad codes and pool windows agree with what the producers make. A graph that passes runs in
the runtime without an internal error, and its metadata says what the runtime computes.

The checks of each node kind live in one function (``_KINDS``). Per-unit checks of table layers are
vectorized (numpy over all units at once); a Python loop over units only runs to name the first bad one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..domain import Domain
from ..errors import IOTableError
from ..front.plan import Unit
from ..front.spec import Layout, PaddingMode
from .nodes import (
    META,
    DuplicateMeta,
    Edge,
    ElementOrder,
    GraphError,
    HostMeta,
    JoinMeta,
    Node,
    NodeKind,
    PadMeta,
    PoolMeta,
    TableMeta,
    WindowMeta,
    pad_index_map,
    window_buffer_depth,
)

_REBUILD = "rebuild it with iotable.precompute (or save it again)"


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
        _KINDS[node.kind](node, producers, incoming, out_of.get(node.name, []))


# -- fields every node has ---------------------------------------------------------------------------------


def _where(node: Node) -> str:
    return f"graph: {node.kind.value} node {node.name!r}"


def _check_fields(node: Any, i: int) -> None:
    if not isinstance(node, Node):
        msg = f"graph: nodes[{i}] is a {type(node).__name__}, not a Node"
        raise GraphError(msg)
    if not isinstance(node.name, str) or not node.name:
        msg = f"graph: nodes[{i}] has the name {node.name!r}; expected a non-empty string"
        raise GraphError(msg)
    if not isinstance(node.kind, NodeKind):
        accepted = ", ".join(k.value for k in NodeKind)
        msg = f"graph: node {node.name!r} has kind {node.kind!r}; expected a NodeKind ({accepted})"
        raise GraphError(msg)
    where = _where(node)
    _shape(node.shape, f"{where}: shape", exact=True)
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
    record = META[node.kind]
    if type(node.meta) is not record:
        msg = (
            f"{where}: meta must be a {record.__name__} (the {node.kind.value} node's record), received "
            f"{type(node.meta).__name__}; {_REBUILD}"
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
        if node.kind is not NodeKind.WINDOW and len(domain) != node.channels:
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
    if not nodes or nodes[0].kind is not NodeKind.INPUT or nodes[-1].kind is not NodeKind.OUTPUT:
        ends = f"{nodes[0].kind.value} first and {nodes[-1].kind.value} last" if nodes else "no node"
        msg = f"graph: expected the input node first and the output node last, received {ends}"
        raise GraphError(msg)
    for node in nodes[1:-1]:
        if node.kind in (NodeKind.INPUT, NodeKind.OUTPUT):
            msg = f"graph: node {node.name!r} is a second {node.kind.value} node; a graph has one input and one output"
            raise GraphError(msg)


# -- edges -------------------------------------------------------------------------------------------------

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
        ports = meta.outputs if isinstance(meta, DuplicateMeta) else 1
        if _is_int(ports) and edge.producer_port >= ports:
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
    _shape(edge.shape, f"{where}: shape", exact=True)
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
    if node.kind is NodeKind.INPUT:
        wanted, reads = 0, "reads nothing"
    elif node.kind is NodeKind.JOIN:
        wanted, reads = max(1, len(ports)), "reads one operand per port, at least one"
    else:
        wanted, reads = 1, "reads exactly one producer"
    if ports != list(range(wanted)):
        msg = (
            f"{_where(node)}: edges drive its input port(s) {_short(ports)}; a {node.kind.value} node {reads} "
            f"(ports 0..{wanted - 1}, each driven by one edge)"
        )
        if node.kind is NodeKind.INPUT:
            msg = f"{_where(node)}: edges drive its input port(s) {_short(ports)}; the input node reads nothing"
        raise GraphError(msg)
    return [edges[p] for p in ports]


# -- typed fields ------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _int(value: Any, where: str, *, minimum: int) -> int:
    if not _is_int(value) or value < minimum:
        msg = f"{where}: expected an integer >= {minimum}, received {value!r}"
        raise GraphError(msg)
    return int(value)


def _ints(value: Any, where: str, *, minimum: int, length: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, tuple) or (length is not None and len(value) != length):
        size = f"{length} " if length is not None else ""
        msg = f"{where}: expected a tuple of {size}integers >= {minimum}, received {value!r}"
        raise GraphError(msg)
    return tuple(_int(v, where, minimum=minimum) for v in value)


def _shape(value: Any, where: str, *, exact: bool = False) -> tuple[int, ...]:
    """A shape: sizes >= 1, at most 8 axes (``exact``: a tuple of Python ints, as nodes and edges hold)."""
    if exact and not (isinstance(value, tuple) and all(type(v) is int for v in value)):
        msg = f"{where}: expected a tuple of integers, received {value!r}"
        raise GraphError(msg)
    if not isinstance(value, tuple) or len(value) > 8:
        msg = f"{where}: expected a shape (a tuple of at most 8 sizes >= 1), received {value!r}"
        raise GraphError(msg)
    return _ints(value, where, minimum=1)


def _index_array(value: Any, where: str, shape: tuple[int, ...]) -> np.ndarray:
    """An integer array of exactly ``shape``, as ``int64``."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.shape != shape:
        got = f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
        msg = f"{where} must be an integer array of shape {shape}, received {got}"
        raise GraphError(msg)
    return value.astype(np.int64, copy=False)


def _same(node: Node, producer: Node, *fields: str) -> None:
    for name in fields:
        mine, theirs = getattr(node, name), getattr(producer, name)
        if mine != theirs:
            msg = f"{_where(node)}: {name} {mine!r} differs from {theirs!r} of {producer.name!r}, which it passes on"
            raise GraphError(msg)


def _codes_in(node: Node, producer: Node) -> None:
    if producer.domain is None:
        msg = (
            f"{_where(node)}: reads raw values from {producer.name!r}; a {node.kind.value} node reads codes "
            "(end that layer in a quantizer)"
        )
        raise GraphError(msg)


def _split(shape: tuple[int, ...], layout: Layout) -> tuple[int, tuple[int, ...]]:
    """``(channels, spatial sizes)`` of a per-sample shape in ``layout``."""
    if layout.channels_last:
        return shape[-1], shape[:-1]
    return shape[0], shape[1:]


def element_domains(node: Node) -> tuple[Domain, ...]:
    """The domain of every element of a node's output, flattened in C order (window nodes: one vector); one
    domain where all elements share it."""
    if isinstance(node.domain, Domain):
        return (node.domain,)
    domains = node.domain
    assert isinstance(domains, tuple)  # callers checked that the node carries codes
    if node.kind is NodeKind.WINDOW or node.layout is None or node.layout.spatial_rank == 0:
        return domains  # one domain per element of the vector
    _, spatial = _split(node.shape, node.layout)
    if node.layout.channels_last:
        return tuple(domains) * math.prod(spatial)
    return tuple(d for d in domains for _ in range(math.prod(spatial)))


def _element_radix_bits(node: Node) -> tuple[np.ndarray, np.ndarray]:
    """Values and bits of the domain of every element of a node's output (one vector for a window)."""
    domains = node.domain if isinstance(node.domain, tuple) else (node.domain,)
    radix = np.asarray([len(d) for d in domains], dtype=np.int64)  # type: ignore[arg-type]
    bits = np.asarray([d.bits for d in domains], dtype=np.int64)  # type: ignore[union-attr]
    size = node.shape[-1] if node.kind is NodeKind.WINDOW else math.prod(node.shape)
    if len(domains) == 1:
        return np.broadcast_to(radix, (size,)), np.broadcast_to(bits, (size,))
    if node.kind is NodeKind.WINDOW or node.layout is None or node.layout.spatial_rank == 0:
        return radix, bits
    _, spatial = _split(node.shape, node.layout)
    repeat = math.prod(spatial)
    if node.layout.channels_last:
        return np.tile(radix, repeat), np.tile(bits, repeat)
    return np.repeat(radix, repeat), np.repeat(bits, repeat)


# -- node kinds --------------------------------------------------------------------------------------------

Check = Callable[[Node, list[Node], list[Edge], list[Edge]], None]


def _check_input(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    if node.domain is None or node.layout is None:
        msg = (
            f"{_where(node)}: needs a domain and a layout (the network's input codes), received {node.domain!r}, "
            f"{node.layout}"
        )
        raise GraphError(msg)


def _check_output(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    _same(node, producers[0], "shape", "layout", "domain")


def _check_duplicate(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    _same(node, producers[0], "shape", "layout", "domain")
    outputs = _int(node.meta.outputs, f"{_where(node)}: meta.outputs", minimum=1)
    ports = sorted(e.producer_port for e in outgoing)
    if ports != list(range(outputs)):
        msg = f"{_where(node)}: has {outputs} output port(s), but edges leave port(s) {ports}; expected each once"
        raise GraphError(msg)


def _check_reshape(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    producer, where = producers[0], _where(node)
    if math.prod(node.shape) != math.prod(producer.shape):
        msg = (
            f"{where}: shape {node.shape} holds {math.prod(node.shape)} elements, {producer.name!r} gives "
            f"{math.prod(producer.shape)}"
        )
        raise GraphError(msg)
    expected = _reshaped_domain(node, producer)
    if node.domain != expected:
        msg = f"{where}: domain {node.domain!r} differs from {expected!r}, what reshaping {producer.name!r} gives"
        raise GraphError(msg)
    layout = Layout.channels_first(len(node.shape) + 1) if expected is not None and 1 <= len(node.shape) <= 3 else None
    if node.layout != layout:
        msg = f"{where}: layout {node.layout} differs from {layout}, the layout of reshaped codes of shape {node.shape}"
        raise GraphError(msg)


def _reshaped_domain(node: Node, producer: Node) -> Any:
    domain = producer.domain
    if not isinstance(domain, tuple) or node.shape == producer.shape:
        return domain
    if len(set(domain)) == 1:
        return domain[0]
    if len(node.shape) == 1:  # flatten: every element keeps its channel's domain
        return element_domains(producer)
    msg = f"{_where(node)}: reshapes channels of different domains from {producer.shape} into {node.shape}"
    raise GraphError(msg)


def _check_pad(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    """Shape and index map from the padding and mode (:func:`pad_index_map`); zeros mode: each channel's code of 0."""
    producer, where, meta = producers[0], _where(node), node.meta
    assert isinstance(meta, PadMeta)  # _check_fields
    _codes_in(node, producer)
    _same(node, producer, "domain", "layout")
    layout = node.layout
    if layout is None or layout.spatial_rank == 0:
        msg = f"{where}: pads spatial axes, so needs a spatial layout, received {layout}"
        raise GraphError(msg)
    if not isinstance(meta.mode, PaddingMode):
        accepted = ", ".join(f"PaddingMode.{m.name}" for m in PaddingMode)
        msg = f"{where}: meta.mode is {meta.mode!r}; expected one of {accepted}"
        raise GraphError(msg)
    raw = meta.padding
    if not isinstance(raw, tuple) or len(raw) != layout.spatial_rank:
        msg = f"{where}: meta.padding must hold a (before, after) pair per spatial axis, received {raw!r}"
        raise GraphError(msg)
    padding = tuple(_ints(pair, f"{where}: meta.padding", minimum=0, length=2) for pair in raw)
    try:
        pairs = tuple((before, after) for before, after in padding)
        expected = pad_index_map(producer.shape, pairs, meta.mode, channels_last=layout.channels_last)
    except IOTableError as exc:
        msg = f"{where}: padding {padding} in mode {meta.mode.value!r} does not fit {producer.shape}: {exc}"
        raise GraphError(msg) from None
    if node.shape != expected.shape:
        msg = (
            f"{where}: shape {node.shape} differs from {expected.shape}, {producer.name!r}'s {producer.shape} "
            f"padded by {padding}"
        )
        raise GraphError(msg)
    index_map = _index_array(meta.index_map, f"{where}: meta.index_map", expected.shape)
    if not np.array_equal(index_map, expected):
        at = tuple(int(i) for i in np.argwhere(index_map != expected)[0])
        msg = (
            f"{where}: index_map[{at}] is {int(index_map[at])}, but mode {meta.mode.value!r} with padding {padding} "
            f"copies {int(expected[at])} there (-1: the pad code); the map and the mode disagree: rebuild the map "
            "with iotable.graph.pad_index_map"
        )
        raise GraphError(msg)
    _check_pad_codes(node, meta, _split(producer.shape, layout)[0])


def _check_pad_codes(node: Node, meta: PadMeta, channels: int) -> None:
    where, codes = _where(node), meta.pad_codes
    if meta.mode is not PaddingMode.ZEROS:
        if codes is not None:
            msg = f"{where}: meta.pad_codes is {codes!r}; mode {meta.mode.value!r} copies input elements and has none"
            raise GraphError(msg)
        return
    codes = _ints(codes, f"{where}: meta.pad_codes", minimum=0, length=channels)
    for c, (code, domain) in enumerate(zip(codes, node.channel_domains() or ())):
        if domain.zero_code is None or code != domain.zero_code:
            msg = (
                f"{where}: meta.pad_codes[{c}] is {code}, but padding feeds real 0, code "
                f"{domain.zero_code} of channel {c}'s {domain!r}"
            )
            raise GraphError(msg)


def _check_window(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    producer, where, meta = producers[0], _where(node), node.meta
    assert isinstance(meta, WindowMeta)  # _check_fields
    _codes_in(node, producer)
    layout = node.layout
    if layout is None or layout.spatial_rank == 0 or layout != producer.layout:
        msg = (
            f"{where}: layout {layout} must be the spatial layout of the input it reads, {producer.name!r}'s "
            f"{producer.layout}"
        )
        raise GraphError(msg)
    rank = layout.spatial_rank
    kernel = _ints(meta.kernel, f"{where}: meta.kernel", minimum=1, length=rank)
    stride = _ints(meta.stride, f"{where}: meta.stride", minimum=1, length=rank)
    dilation = _ints(meta.dilation, f"{where}: meta.dilation", minimum=1, length=rank)
    channels = _int(meta.channels, f"{where}: meta.channels", minimum=1)
    order = ElementOrder.of(layout)
    if meta.element_order is not order:
        got = getattr(meta.element_order, "value", meta.element_order)
        msg = f"{where}: meta.element_order is {got!r}; a {layout.value} window is {order.value!r}"
        raise GraphError(msg)
    if _split(producer.shape, layout)[0] != channels:
        msg = f"{where}: reads {producer.name!r} of shape {producer.shape} as {layout.value} with {channels} channel(s)"
        raise GraphError(msg)
    size = _split(producer.shape, layout)[1]
    positions = tuple((n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(size, kernel, stride, dilation))
    if min(positions) < 1:
        msg = f"{where}: kernel {kernel} with dilation {dilation} does not fit the input {size} of {producer.name!r}"
        raise GraphError(msg)
    taps = math.prod(kernel)
    if node.shape != (*positions, channels * taps):
        msg = (
            f"{where}: shape {node.shape} differs from {(*positions, channels * taps)}: {positions} positions of "
            f"{channels} channel(s) x {taps} kernel position(s)"
        )
        raise GraphError(msg)
    domain = producer.domain
    if isinstance(domain, tuple):
        domain = tuple(domain) * taps if layout.channels_last else tuple(d for d in domain for _ in range(taps))
    if node.domain != domain:
        msg = (
            f"{where}: domain {node.domain!r} differs from {domain!r}, the window vector of {producer.name!r}'s domains"
        )
        raise GraphError(msg)
    depth = window_buffer_depth(kernel, dilation, size, channels)
    if not _is_int(meta.buffer_depth) or meta.buffer_depth != depth:
        msg = (
            f"{where}: meta.buffer_depth is {meta.buffer_depth!r}; a kernel {kernel} with dilation {dilation} over "
            f"{size} x {channels} channel(s) buffers {depth} elements (iotable.graph.window_buffer_depth)"
        )
        raise GraphError(msg)


# -- tables ------------------------------------------------------------------------------------------------


def _check_table(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    producer, where, meta = producers[0], _where(node), node.meta
    assert isinstance(meta, TableMeta)  # _check_fields
    _codes_in(node, producer)
    if not isinstance(meta.layer, str) or not meta.layer:
        msg = f"{where}: meta.layer must name its table layer, received {meta.layer!r}"
        raise GraphError(msg)
    if node.domain is not None and not isinstance(node.domain, Domain):
        msg = f"{where}: a table's outputs are codes of one Domain or raw values (None), received {node.domain!r}"
        raise GraphError(msg)
    if node.layout is None:
        msg = f"{where}: needs the layout of its layer"
        raise GraphError(msg)
    if producer.kind is NodeKind.WINDOW:
        if node.layout != producer.layout or node.spatial_size != producer.spatial_size:
            msg = (
                f"{where}: shape {node.shape} ({node.layout.value}) disagrees with the {producer.spatial_size} "
                f"positions of the {getattr(producer.layout, 'value', None)} window {producer.name!r}"
            )
            raise GraphError(msg)
    elif node.layout.spatial_rank:
        msg = (
            f"{where}: reads a {producer.kind.value} node, so reads features; its layout must be NC, received "
            f"{node.layout.value} (a spatial table reads a window node)"
        )
        raise GraphError(msg)
    columns = _unit_columns(node, meta.units)
    written = np.sort(columns["out"])
    if not np.array_equal(written, np.arange(node.channels)):
        msg = (
            f"{where}: its units write output channels {_short(written.tolist())}; expected each of its "
            f"{node.channels} channel(s) exactly once"
        )
        raise GraphError(msg)
    bits = _ints(meta.unit_bits, f"{where}: meta.unit_bits", minimum=0, length=len(meta.units))
    index_map = _check_index_map(node, meta, columns, producer)
    _check_unit_rows(node, meta, columns, np.asarray(bits, dtype=np.int64), index_map, producer)


def _int_column(values: list[Any], units: Sequence[Unit], field: str, where: str, *, minimum: int) -> np.ndarray:
    """One integer field of every unit as an array (a loop over units only to name a bad one)."""
    try:
        column = np.asarray(values)
    except (TypeError, ValueError):  # ragged or odd objects: name the first bad one below
        column = np.asarray([], dtype=object)
    if column.dtype.kind not in "iu" or column.shape != (len(units),) or (column < minimum).any():
        for u, value in enumerate(values):
            _int(value, f"{where}: unit {u} {field}", minimum=minimum)
        msg = f"{where}: the units' {field} fields are not integers >= {minimum}"
        raise GraphError(msg)
    return column.astype(np.int64)


def _channel_lists(units: Sequence[Unit], field: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths, flat channels)`` of every unit's ``field`` (a tuple of channel indices >= 0)."""
    lists = [getattr(u, field) for u in units]
    clean = set(map(type, lists)) == {tuple}
    if clean:
        clean = set(map(type, itertools.chain.from_iterable(lists))) <= {int, np.int64, np.int32}
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64) if clean else np.zeros(0, np.int64)
    if not clean or (flat < 0).any():
        for u, channels in enumerate(lists):
            _ints(channels, f"{where}: unit {u} {field}", minimum=0)
        msg = f"{where}: the units' {field} are not tuples of channel indices"
        raise GraphError(msg)
    return np.fromiter(map(len, lists), dtype=np.int64, count=len(lists)), flat


def _unit_columns(node: Node, units: Any) -> dict[str, np.ndarray]:
    """The units' fields as arrays, every one typed: index, fan_in, rows, input and output channels."""
    where = _where(node)
    if not isinstance(units, tuple) or not units:
        msg = f"{where}: meta.units must be a non-empty tuple of its units, received {type(units).__name__}"
        raise GraphError(msg)
    if not all(type(u) is Unit for u in units):
        u = next(k for k, unit in enumerate(units) if type(unit) is not Unit)
        msg = f"{where}: unit {u} is a {type(units[u]).__name__}, not a Unit"
        raise GraphError(msg)
    index = _int_column([u.index for u in units], units, "index", where, minimum=0)
    if not np.array_equal(index, np.arange(len(units))):
        u = int(np.flatnonzero(index != np.arange(len(units)))[0])
        msg = f"{where}: unit {u} has index {int(index[u])}; units are listed in index order"
        raise GraphError(msg)
    fan_in = _int_column([u.fan_in for u in units], units, "fan_in", where, minimum=1)
    rows = _int_column([u.rows for u in units], units, "rows", where, minimum=1)
    in_lengths, in_flat = _channel_lists(units, "in_channels", where)
    out_lengths, out_flat = _channel_lists(units, "out_channels", where)
    if (out_lengths == 0).any():
        msg = f"{where}: unit {int(np.flatnonzero(out_lengths == 0)[0])} writes no output channel"
        raise GraphError(msg)
    return {"fan_in": fan_in, "rows": rows, "in_lengths": in_lengths, "in": in_flat, "out": out_flat}


def expected_index_map(
    in_lengths: np.ndarray, in_flat: np.ndarray, *, taps: int, channels: int, order: ElementOrder | None
) -> np.ndarray:
    """Each unit's inputs as element indices, ``-1`` beyond its fan-in: its channels (features), or channel x
    kernel position in a window vector of ``order``. Units reading as many channels are filled at once."""
    width = int(in_lengths.max()) * taps
    index_map = np.full((len(in_lengths), width), -1, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(in_lengths)[:-1]])
    tap = np.arange(taps, dtype=np.int64)
    for length in np.unique(in_lengths):
        members = np.flatnonzero(in_lengths == length)
        picks = in_flat[starts[members, None] + np.arange(length)[None, :]]  # (units, channels)
        if order is None:
            rows = picks
        elif order is ElementOrder.KERNEL_MAJOR:
            rows = (tap[None, :, None] * channels + picks[:, None, :]).reshape(len(members), -1)
        else:
            rows = (picks[:, :, None] * taps + tap[None, None, :]).reshape(len(members), -1)
        index_map[members, : rows.shape[1]] = rows
    return index_map


def _check_index_map(node: Node, meta: TableMeta, columns: dict[str, np.ndarray], producer: Node) -> np.ndarray:
    """The index map drives every unit input once, with the elements the unit's input channels name."""
    where = f"{_where(node)}: meta.index_map"
    fan_in = columns["fan_in"]
    width = int(fan_in.max())
    index_map = _index_array(meta.index_map, where, (len(fan_in), width))
    if producer.kind is NodeKind.WINDOW:
        window = producer.meta
        assert isinstance(window, WindowMeta)  # checked before (producers come first)
        vector, taps, channels, order = producer.shape[-1], window.taps, window.channels, window.element_order
    else:
        vector, taps, channels, order = math.prod(producer.shape), 1, math.prod(producer.shape), None
    driven = np.arange(width)[None, :] < fan_in[:, None]
    bad = driven & ((index_map < 0) | (index_map >= vector))
    if bad.any():
        u, j = (int(v) for v in np.argwhere(bad)[0])
        if index_map[u, j] < 0:
            msg = f"graph: table {node.name!r} unit {u} input {j} is not driven (index -1 in meta.index_map)"
        else:
            msg = (
                f"graph: table {node.name!r} unit {u} input {j} reads element {int(index_map[u, j])}, but "
                f"{producer.name!r} gives {vector} element(s) per position"
            )
        raise GraphError(msg)
    if (index_map[~driven] != -1).any():
        u = int(np.argwhere(~driven & (index_map != -1))[0][0])
        msg = f"graph: table {node.name!r} unit {u} has {int(fan_in[u])} inputs but more are driven in meta.index_map"
        raise GraphError(msg)
    if (columns["in"] >= channels).any():
        u = int(
            np.searchsorted(np.cumsum(columns["in_lengths"]), np.flatnonzero(columns["in"] >= channels)[0], "right")
        )
        msg = f"graph: table {node.name!r} unit {u} reads input channels beyond the {channels} of {producer.name!r}"
        raise GraphError(msg)
    reads = columns["in_lengths"] * taps
    if not np.array_equal(reads, fan_in):
        u = int(np.flatnonzero(reads != fan_in)[0])
        msg = (
            f"graph: table {node.name!r} unit {u} reads {int(reads[u])} element(s) "
            f"({int(columns['in_lengths'][u])} channel(s) x {taps}) but has fan-in {int(fan_in[u])}"
        )
        raise GraphError(msg)
    expected = expected_index_map(columns["in_lengths"], columns["in"], taps=taps, channels=channels, order=order)
    if not np.array_equal(expected, index_map):
        u = int(np.flatnonzero((expected != index_map).any(axis=1))[0])
        ins = columns["in"][int(columns["in_lengths"][:u].sum()) :][: int(columns["in_lengths"][u])]
        in_order = f" in {order.value} order" if order else ""
        msg = (
            f"graph: {where} row {u} is {index_map[u].tolist()}, but unit {u} of {node.name!r} reads "
            f"{expected[u].tolist()} (its input channels {ins.tolist()}{in_order})"
        )
        raise GraphError(msg)
    return index_map


def _check_unit_rows(
    node: Node,
    meta: TableMeta,
    columns: dict[str, np.ndarray],
    bits: np.ndarray,
    index_map: np.ndarray,
    producer: Node,
) -> None:
    """Each unit's rows and bits are those of the domains of the elements it reads."""
    radix, element_bits = _element_radix_bits(producer)
    driven = index_map >= 0
    reads = np.where(driven, index_map, 0)
    log_rows = np.where(driven, np.log2(radix[reads].astype(np.float64)), 0.0).sum(axis=1)
    rows = np.where(driven, radix[reads], 1).prod(axis=1)  # exact while below 2**62 (checked by log_rows)
    got_bits = np.where(driven, element_bits[reads], 0).sum(axis=1)
    bad = (log_rows > 62) | (rows != columns["rows"]) | (got_bits != bits)
    if bad.any():
        u = int(np.flatnonzero(bad)[0])
        msg = (
            f"graph: table {node.name!r} unit {u} has {int(columns['rows'][u])} rows and {int(bits[u])} bits, but "
            f"the codes it reads from {producer.name!r} give {int(rows[u]) if log_rows[u] <= 62 else 'over 2**62'} "
            f"rows and {int(got_bits[u])} bits"
        )
        raise GraphError(msg)


def _short(values: list[int]) -> str:
    return str(values) if len(values) <= 8 else f"[{', '.join(map(str, values[:8]))}, ...] ({len(values)})"


# -- joins, pools, hosts -----------------------------------------------------------------------------------


def _check_join(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    where, meta = _where(node), node.meta
    assert isinstance(meta, JoinMeta)  # _check_fields
    if meta.op != "concat" or not isinstance(meta.for_add, bool):
        msg = (
            f"{where}: meta.op must be 'concat' and meta.for_add True or False, received {meta.op!r}, {meta.for_add!r}"
        )
        raise GraphError(msg)
    if meta.for_add and len(producers) != 2:
        msg = f"{where}: gathers the operands of an add (meta.for_add), so joins 2 operands, not {len(producers)}"
        raise GraphError(msg)
    layout = node.layout
    if layout is None or node.domain is None:
        msg = f"{where}: joins codes along a channel axis, so needs a layout and a domain"
        raise GraphError(msg)
    channels, size = _split(node.shape, layout)
    total = 0
    domains: list[Domain] = []
    for producer in producers:
        _codes_in(node, producer)
        if len(producer.shape) != len(node.shape) or _split(producer.shape, layout)[1] != size:
            msg = (
                f"{where}: operand {producer.name!r} of shape {producer.shape} does not join {node.shape} along its "
                f"channels"
            )
            raise GraphError(msg)
        total += _split(producer.shape, layout)[0]
        domains += list(producer.channel_domains() or ())
    if total != channels or tuple(node.channel_domains() or ()) != tuple(domains):
        msg = (
            f"{where}: {channels} channel(s) of domains {node.domain!r}, but its operands give {total} of "
            f"{tuple(domains)!r}"
        )
        raise GraphError(msg)


def _check_pool(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    import torch  # graphs are plain data; only a pool node's window needs torch to be checked
    import torch.nn.functional as F

    producer, where, meta = producers[0], _where(node), node.meta
    assert isinstance(meta, PoolMeta)  # _check_fields
    _codes_in(node, producer)
    _same(node, producer, "layout", "domain")
    if node.layout is None or node.layout.spatial_rank not in (1, 2) or node.layout.channels_last:
        msg = f"{where}: max-pools read channels-first codes of 1 or 2 spatial axes, received layout {node.layout}"
        raise GraphError(msg)
    rank = node.layout.spatial_rank
    args: dict[str, Any] = {}
    for key, low in (("kernel_size", 1), ("stride", 1), ("padding", 0), ("dilation", 1)):
        args[key] = _ints(getattr(meta, key), f"{where}: meta.{key}", minimum=low, length=rank)
    if not isinstance(meta.ceil_mode, bool):
        msg = f"{where}: meta.ceil_mode must be True or False, received {meta.ceil_mode!r}"
        raise GraphError(msg)
    fn = F.max_pool1d if rank == 1 else F.max_pool2d  # what the runtime runs
    try:
        empty = torch.empty(1, *producer.shape, device="meta")
        shape = tuple(fn(empty, **args, ceil_mode=meta.ceil_mode).shape[1:])
    except Exception as exc:  # torch says why the window does not fit (padding above half the kernel, ...)
        msg = f"{where}: a max-pool of {args} cannot pool {producer.name!r} of shape {producer.shape}: {exc}"
        raise GraphError(msg) from None
    if shape != node.shape:
        msg = f"{where}: shape {node.shape} differs from {shape}, what a max-pool of {args} makes of {producer.shape}"
        raise GraphError(msg)


def _check_host(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    from torch import nn  # the module a host node runs is a torch module

    where, meta = _where(node), node.meta
    assert isinstance(meta, HostMeta)  # _check_fields
    if node.domain is not None or node.layout is not None:
        msg = (
            f"{where}: a host node outputs raw values (domain and layout None), received {node.domain!r}, {node.layout}"
        )
        raise GraphError(msg)
    if not isinstance(meta.module, nn.Module):
        msg = f"{where}: meta.module must be the torch module it runs, received {type(meta.module).__name__}"
        raise GraphError(msg)


_KINDS: dict[NodeKind, Check] = {
    NodeKind.INPUT: _check_input,
    NodeKind.OUTPUT: _check_output,
    NodeKind.TABLE: _check_table,
    NodeKind.PAD: _check_pad,
    NodeKind.WINDOW: _check_window,
    NodeKind.RESHAPE: _check_reshape,
    NodeKind.DUPLICATE: _check_duplicate,
    NodeKind.JOIN: _check_join,
    NodeKind.POOL: _check_pool,
    NodeKind.HOST: _check_host,
}
assert set(_KINDS) == set(META) == set(NodeKind)  # a new kind needs its record and its checks
