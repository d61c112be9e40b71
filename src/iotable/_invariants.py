"""The interlayer graph's invariants, checked node kind by node kind (what :meth:`Graph.check` runs).

A graph may come from :func:`iotable.precompute`, from a bundle on disk or from a hand edit, so nothing is
assumed: every node's fields and every ``meta`` key its kind needs are present and typed, every edge joins
existing nodes on existing ports, and shapes, layouts, domains, index maps, line buffers, pad codes and
pool windows agree with what the producers make. A graph that passes runs in the runtime without an
internal error, and its metadata says what the runtime computes.

The checks of each node kind live in one function (``_KINDS``), so that a kind's metadata can move into a
typed record without touching the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .domain import Domain
from .errors import IOTableError
from .graph import Edge, Graph, GraphError, Node, NodeKind, pad_index_map, window_buffer_depth
from .plan import Unit
from .spec import Layout, PaddingMode

_REBUILD = "rebuild it with iotable.precompute (or save it again)"


def check_graph(graph: Graph) -> None:
    """Raise :class:`GraphError` naming the node or edge, expected and received, on the first violation."""
    if not isinstance(graph.nodes, list) or not isinstance(graph.edges, list):
        msg = "graph: nodes and edges must be lists"
        raise GraphError(msg)
    for i, node in enumerate(graph.nodes):
        _check_fields(node, i)
    position = _check_order(graph.nodes)
    _check_ends(graph.nodes)
    by_name = {n.name: n for n in graph.nodes}
    del position
    into, out_of = _check_edges(graph.edges, by_name)
    for node in graph.nodes:
        edges = into.get(node.name, {})
        ports = sorted(edges)
        if ports != list(range(len(node.inputs))):
            msg = (
                f"graph: node {node.name!r} has {len(node.inputs)} input port(s) but edges drive port(s) "
                f"{ports}; expected each port 0..{len(node.inputs) - 1} driven exactly once"
            )
            raise GraphError(msg)
        incoming = [edges[p] for p in ports]
        producers = [by_name[p] for p in node.inputs]
        for edge, producer in zip(incoming, producers):
            _check_edge(edge, producer, node)
        _check_common_meta(node, incoming)
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
    if not isinstance(node.inputs, tuple) or not all(isinstance(p, str) for p in node.inputs):
        msg = f"{where}: inputs must be a tuple of producer names, received {node.inputs!r}"
        raise GraphError(msg)
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
    if not isinstance(node.meta, dict) or not all(isinstance(k, str) for k in node.meta):
        msg = f"{where}: meta must be a dict with string keys, received {type(node.meta).__name__}"
        raise GraphError(msg)


def _check_order(nodes: list[Node]) -> dict[str, int]:
    position: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.name in position:
            msg = f"graph: node name {node.name!r} is used twice (positions {position[node.name]} and {i}); rename one"
            raise GraphError(msg)
        position[node.name] = i
    for i, node in enumerate(nodes):
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
    return position


def _check_ends(nodes: list[Node]) -> None:
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


def _check_edges(edges: list[Edge], nodes: dict[str, Node]) -> tuple[dict[str, dict[int, Edge]], dict[str, list[Edge]]]:
    """Every edge joins existing nodes on existing ports, once; returns the edges by consumer port and by producer."""
    into: dict[str, dict[int, Edge]] = {}
    out_of: dict[str, list[Edge]] = {}
    used: dict[tuple[str, int], Edge] = {}
    for k, edge in enumerate(edges):
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
        consumer = nodes[edge.consumer]
        if edge.consumer_port >= len(consumer.inputs):
            msg = (
                f"{where}: drives input port {edge.consumer_port} of {consumer.name!r}, which has "
                f"{len(consumer.inputs)}"
            )
            raise GraphError(msg)
        if edge.consumer_port in into.get(edge.consumer, {}):
            msg = f"{where}: input port {edge.consumer_port} of {consumer.name!r} is driven twice"
            raise GraphError(msg)
        into.setdefault(edge.consumer, {})[edge.consumer_port] = edge
        producer = nodes[edge.producer]
        ports = producer.meta.get("outputs") if producer.kind is NodeKind.DUPLICATE else 1
        if isinstance(ports, int) and not isinstance(ports, bool) and edge.producer_port >= ports:
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
        _shape(edge.shape, f"{where}: shape", exact=True)
    return into, out_of


def _check_edge(edge: Edge, producer: Node, consumer: Node) -> None:
    where = f"edge {edge.producer!r} -> {edge.consumer!r} (port {edge.consumer_port})"
    if edge.producer != producer.name:
        msg = f"graph: {where} names producer {edge.producer!r}, but the consumer's port reads {producer.name!r}"
        raise GraphError(msg)
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
    if (edge.index_map is not None) != (consumer.kind is NodeKind.TABLE):
        have = "has" if edge.index_map is not None else "lacks"
        msg = f"graph: {where} {have} an index_map; edges into table nodes have one, other edges none"
        raise GraphError(msg)
    if (edge.buffer is not None) != (consumer.kind is NodeKind.WINDOW):
        have = "has" if edge.buffer is not None else "lacks"
        msg = f"graph: {where} {have} a buffer; edges into window nodes have one, other edges none"
        raise GraphError(msg)


# The keys each kind's meta holds: (required, optional). A key outside both is refused, so that nothing in a
# graph says what the runtime does not do; a new key is added here, with its checks in its kind's function.
_TRACE = {"fx_node"}  # the traced node a node stands for (what verify compares it with)
_KEYS: dict[NodeKind, tuple[set[str], set[str]]] = {
    NodeKind.INPUT: ({"layout"}, _TRACE),
    NodeKind.OUTPUT: (set(), _TRACE),
    NodeKind.TABLE: ({"layer", "units", "unit_bits", "modules", "spatial", "input_shapes"}, _TRACE | {"positions"}),
    NodeKind.PAD: ({"padding", "mode", "index_map", "pad_codes", "input_shapes"}, _TRACE),
    NodeKind.WINDOW: (
        {"kernel", "stride", "dilation", "channels", "element_order", "input_layout", "input_shapes"},
        _TRACE,
    ),
    NodeKind.RESHAPE: (set(), _TRACE),
    NodeKind.DUPLICATE: ({"outputs"}, _TRACE),
    NodeKind.JOIN: ({"op", "input_shapes"}, _TRACE | {"for"}),
    NodeKind.POOL: ({"module", "rank", "modules", "kernel_size", "stride", "padding", "dilation"}, _TRACE),
    NodeKind.HOST: ({"module", "modules", "input_shapes"}, _TRACE),
}


def _check_common_meta(node: Node, incoming: list[Edge]) -> None:
    """The kind's keys, no other; ``fx_node``, ``modules`` and ``input_shapes`` (one shape per input port) typed."""
    where = _where(node)
    required, optional = _KEYS[node.kind]
    missing, unknown = sorted(required - set(node.meta)), sorted(set(node.meta) - required - optional)
    if missing:
        msg = f"{where}: meta[{missing[0]!r}] is missing; a {node.kind.value} node needs it ({_REBUILD})"
        raise GraphError(msg)
    if unknown:
        msg = (
            f"{where}: meta holds the key {unknown[0]!r}, which a {node.kind.value} node does not have; expected "
            f"{sorted(required)} and optionally {sorted(optional)}"
        )
        raise GraphError(msg)
    if node.meta.get("fx_node") is not None and not isinstance(node.meta["fx_node"], str):
        msg = f"{where}: meta['fx_node'] must be a string or None, received {node.meta['fx_node']!r}"
        raise GraphError(msg)
    if "modules" in node.meta:
        modules = node.meta["modules"]
        if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) for m in modules):
            msg = f"{where}: meta['modules'] must be a list of module names, received {modules!r}"
            raise GraphError(msg)
    if "input_shapes" in node.meta:
        shapes = node.meta["input_shapes"]
        if not isinstance(shapes, (list, tuple)) or len(shapes) != len(node.inputs):
            msg = f"{where}: meta['input_shapes'] must list one shape per input port, received {shapes!r}"
            raise GraphError(msg)
        for edge, shape in zip(incoming, shapes):
            if _shape(shape, f"{where}: meta['input_shapes']") != edge.shape:
                msg = (
                    f"graph: edge {edge.producer!r} -> {edge.consumer!r} (port {edge.consumer_port}) carries shape "
                    f"{edge.shape}, but {node.name!r} expects {tuple(shape)} on that port"
                )
                raise GraphError(msg)


# -- typed access to meta ----------------------------------------------------------------------------------


def _need(node: Node, key: str) -> Any:
    if key not in node.meta:
        msg = f"{_where(node)}: meta[{key!r}] is missing; a {node.kind.value} node needs it ({_REBUILD})"
        raise GraphError(msg)
    return node.meta[key]


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _int(value: Any, where: str, *, minimum: int) -> int:
    if not _is_int(value) or value < minimum:
        msg = f"{where}: expected an integer >= {minimum}, received {value!r}"
        raise GraphError(msg)
    return int(value)


def _ints(value: Any, where: str, *, minimum: int, length: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or (length is not None and len(value) != length):
        size = f"{length} " if length is not None else ""
        msg = f"{where}: expected a sequence of {size}integers >= {minimum}, received {value!r}"
        raise GraphError(msg)
    return tuple(_int(v, where, minimum=minimum) for v in value)


def _shape(value: Any, where: str, *, exact: bool = False) -> tuple[int, ...]:
    """A shape: sizes >= 1, at most 8 axes (``exact``: a tuple of Python ints, as nodes and edges hold)."""
    if exact and not (isinstance(value, tuple) and all(type(v) is int for v in value)):
        msg = f"{where}: expected a tuple of integers, received {value!r}"
        raise GraphError(msg)
    if not isinstance(value, (list, tuple)) or len(value) > 8:
        msg = f"{where}: expected a shape (a tuple of at most 8 sizes >= 1), received {value!r}"
        raise GraphError(msg)
    return _ints(value, where, minimum=1)


def _same(node: Node, producer: Node, *fields: str) -> None:
    for name in fields:
        mine, theirs = getattr(node, name), getattr(producer, name)
        if mine != theirs:
            msg = f"{_where(node)}: {name} {mine!r} differs from {theirs!r} of {producer.name!r}, which it passes on"
            raise GraphError(msg)


def _one_input(node: Node) -> None:
    if len(node.inputs) != 1:
        msg = f"{_where(node)}: reads {len(node.inputs)} producer(s); a {node.kind.value} node reads exactly one"
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


def _join(channels: int, spatial: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    return (*spatial, channels) if layout.channels_last else (channels, *spatial)


def element_domains(node: Node) -> tuple[Domain, ...]:
    """The domain of every element of a node's output, flattened in C order (window nodes: one vector)."""
    if isinstance(node.domain, Domain):
        return (node.domain,)
    domains = node.domain
    assert isinstance(domains, tuple)  # callers checked that the node carries codes
    if node.kind is NodeKind.WINDOW:
        return domains
    if node.layout is None or node.layout.spatial_rank == 0:
        return domains  # one domain per channel, and every element is a channel
    _, spatial = _split(node.shape, node.layout)
    if node.layout.channels_last:
        return tuple(domains) * math.prod(spatial)
    return tuple(d for d in domains for _ in range(math.prod(spatial)))


# -- node kinds --------------------------------------------------------------------------------------------

Check = Callable[[Node, list[Node], list[Edge], list[Edge]], None]


def _check_input(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    where = _where(node)
    if node.inputs:
        msg = f"{where}: reads {list(node.inputs)}; the input node reads nothing"
        raise GraphError(msg)
    if node.domain is None or node.layout is None:
        msg = (
            f"{where}: needs a domain and a layout (the network's input codes), received {node.domain!r}, {node.layout}"
        )
        raise GraphError(msg)
    if _need(node, "layout") != node.layout:
        msg = f"{where}: meta['layout'] is {node.meta['layout']!r}, but the node's layout is {node.layout.value}"
        raise GraphError(msg)


def _check_output(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    _one_input(node)
    _same(node, producers[0], "shape", "layout", "domain")


def _check_duplicate(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    _one_input(node)
    _same(node, producers[0], "shape", "layout", "domain")
    outputs = _int(_need(node, "outputs"), f"{_where(node)}: meta['outputs']", minimum=1)
    ports = sorted(e.producer_port for e in outgoing)
    if ports != list(range(outputs)):
        msg = f"{_where(node)}: has {outputs} output port(s), but edges leave port(s) {ports}; expected each once"
        raise GraphError(msg)


def _check_reshape(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    _one_input(node)
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
    _one_input(node)
    producer, where = producers[0], _where(node)
    _codes_in(node, producer)
    _same(node, producer, "domain")
    layout = node.layout
    if layout is None or layout.spatial_rank == 0 or len(producer.shape) != len(node.shape):
        msg = (
            f"{where}: pads spatial axes, so needs a spatial layout and the rank of {producer.name!r}, "
            f"received {layout}"
        )
        raise GraphError(msg)
    mode = _need(node, "mode")
    if not isinstance(mode, str) or mode not in PaddingMode._value2member_map_:
        accepted = ", ".join(repr(m.value) for m in PaddingMode)
        msg = f"{where}: meta['mode'] is {mode!r}; expected one of {accepted}"
        raise GraphError(msg)
    raw = _need(node, "padding")
    if not isinstance(raw, (list, tuple)) or len(raw) != layout.spatial_rank:
        msg = f"{where}: meta['padding'] must hold a (before, after) pair per spatial axis, received {raw!r}"
        raise GraphError(msg)
    padding = tuple(_ints(pair, f"{where}: meta['padding']", minimum=0, length=2) for pair in raw)
    try:
        expected = pad_index_map(producer.shape, padding, mode, channels_last=layout.channels_last)
    except IOTableError as exc:
        msg = f"{where}: padding {padding} in mode {mode!r} does not fit {producer.shape}: {exc}"
        raise GraphError(msg) from None
    if node.shape != expected.shape:
        msg = (
            f"{where}: shape {node.shape} differs from {expected.shape}, {producer.name!r}'s {producer.shape} "
            f"padded by {padding}"
        )
        raise GraphError(msg)
    index_map = _need(node, "index_map")
    if not isinstance(index_map, np.ndarray) or index_map.dtype.kind not in "iu" or index_map.shape != expected.shape:
        got = f"{index_map.dtype} {index_map.shape}" if isinstance(index_map, np.ndarray) else type(index_map).__name__
        msg = f"{where}: meta['index_map'] must be an integer array of shape {expected.shape}, received {got}"
        raise GraphError(msg)
    if not np.array_equal(index_map, expected):
        at = tuple(int(i) for i in np.argwhere(index_map != expected)[0])
        msg = (
            f"{where}: index_map[{at}] is {int(index_map[at])}, but mode {mode!r} with padding {padding} copies "
            f"{int(expected[at])} there (-1: the pad code); the map and the mode disagree: rebuild the map with "
            "iotable.graph.pad_index_map"
        )
        raise GraphError(msg)
    codes = _need(node, "pad_codes")
    if mode != PaddingMode.ZEROS.value:
        if codes is not None:
            msg = f"{where}: meta['pad_codes'] is {codes!r}; mode {mode!r} copies input elements and has none (None)"
            raise GraphError(msg)
        return
    channels = _split(producer.shape, layout)[0]
    codes = _ints(codes, f"{where}: meta['pad_codes']", minimum=0, length=channels)
    for c, (code, domain) in enumerate(zip(codes, node.channel_domains() or ())):
        if domain.zero_code is None or code != domain.zero_code:
            msg = (
                f"{where}: meta['pad_codes'][{c}] is {code}, but padding feeds real 0, code "
                f"{domain.zero_code} of channel {c}'s {domain!r}"
            )
            raise GraphError(msg)


def _check_window(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    _one_input(node)
    producer, where = producers[0], _where(node)
    _codes_in(node, producer)
    layout = _need(node, "input_layout")
    if not isinstance(layout, Layout) or layout.spatial_rank == 0 or node.layout != layout:
        msg = f"{where}: meta['input_layout'] must be the node's spatial layout {node.layout}, received {layout!r}"
        raise GraphError(msg)
    rank = layout.spatial_rank
    kernel = _ints(_need(node, "kernel"), f"{where}: meta['kernel']", minimum=1, length=rank)
    stride = _ints(_need(node, "stride"), f"{where}: meta['stride']", minimum=1, length=rank)
    dilation = _ints(_need(node, "dilation"), f"{where}: meta['dilation']", minimum=1, length=rank)
    channels = _int(_need(node, "channels"), f"{where}: meta['channels']", minimum=1)
    order = "kernel-major" if layout.channels_last else "channel-major"
    if _need(node, "element_order") != order:
        msg = f"{where}: meta['element_order'] is {node.meta['element_order']!r}; a {layout.value} window is {order!r}"
        raise GraphError(msg)
    if len(producer.shape) != rank + 1 or _split(producer.shape, layout)[0] != channels:
        msg = f"{where}: reads {producer.name!r} of shape {producer.shape} as {layout.value} with {channels} channel(s)"
        raise GraphError(msg)
    size = _split(producer.shape, layout)[1]
    positions = tuple((n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(size, kernel, stride, dilation))
    if min(positions) < 1:
        msg = f"{where}: kernel {kernel} with dilation {dilation} does not fit the input {size} of {producer.name!r}"
        raise GraphError(msg)
    window = math.prod(kernel)
    if node.shape != (*positions, channels * window):
        msg = (
            f"{where}: shape {node.shape} differs from {(*positions, channels * window)}: {positions} positions of "
            f"{channels} channel(s) x {window} kernel position(s)"
        )
        raise GraphError(msg)
    domain = producer.domain
    if isinstance(domain, tuple):
        domain = tuple(domain) * window if layout.channels_last else tuple(d for d in domain for _ in range(window))
    if node.domain != domain:
        msg = (
            f"{where}: domain {node.domain!r} differs from {domain!r}, the window vector of {producer.name!r}'s domains"
        )
        raise GraphError(msg)
    buffer = {
        "depth": window_buffer_depth(kernel, dilation, size, channels),
        "stride": stride,
        "kernel": kernel,
        "dilation": dilation,
        "width": size[-1],
        "channels": channels,
        "element_order": order,
    }
    got = incoming[0].buffer
    if not isinstance(got, dict) or _plain(got) != _plain(buffer):
        msg = f"graph: edge {producer.name!r} -> {node.name!r} carries the line buffer {got!r}; expected {buffer}"
        raise GraphError(msg)


def _plain(value: Any) -> Any:
    """A buffer with sequences as tuples and integers as ``int`` (edges from a bundle hold tuples)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if _is_int(value):
        return ("int", int(value))
    return (type(value).__name__, value)


def _check_table(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    _one_input(node)
    producer, where = producers[0], _where(node)
    _codes_in(node, producer)
    layer = _need(node, "layer")
    if not isinstance(layer, str) or not layer:
        msg = f"{where}: meta['layer'] must name its table layer, received {layer!r}"
        raise GraphError(msg)
    units = _units(node)
    spatial = _need(node, "spatial")
    if not isinstance(spatial, bool) or spatial != (producer.kind is NodeKind.WINDOW):
        msg = (
            f"{where}: meta['spatial'] is {spatial!r}, but it reads a {producer.kind.value} node; a table is "
            "spatial (True) exactly when a window node feeds it"
        )
        raise GraphError(msg)
    if node.domain is not None and not isinstance(node.domain, Domain):
        msg = f"{where}: a table's outputs are codes of one Domain or raw values (None), received {node.domain!r}"
        raise GraphError(msg)
    if node.layout is None:
        msg = f"{where}: needs the layout of its layer"
        raise GraphError(msg)
    _need(node, "input_shapes")
    channels, spatial_size = _split(node.shape, node.layout)
    if spatial:
        positions = _ints(_need(node, "positions"), f"{where}: meta['positions']", minimum=1)
        if node.layout != producer.layout or positions != producer.shape[:-1] or spatial_size != positions:
            msg = (
                f"{where}: shape {node.shape} ({node.layout.value}) and meta['positions'] {positions} disagree with "
                f"the {producer.shape[:-1]} positions of the {producer.layout} window {producer.name!r}"
            )
            raise GraphError(msg)
    elif node.layout.spatial_rank:
        msg = f"{where}: a table without a window reads features; its layout must be NC, received {node.layout.value}"
        raise GraphError(msg)
    written = sorted(c for u in units for c in u.out_channels)
    if written != list(range(channels)):
        msg = (
            f"{where}: its units write output channels {_short(written)}; expected each of its {channels} channel(s) "
            "exactly once"
        )
        raise GraphError(msg)
    _check_index_map(node, units, producer, incoming[0])


def _units(node: Node) -> tuple[Unit, ...]:
    where = _where(node)
    units = _need(node, "units")
    if not isinstance(units, (list, tuple)) or not units:
        msg = f"{where}: meta['units'] must list its units, received {units!r}"
        raise GraphError(msg)
    for u, unit in enumerate(units):
        here = f"{where}: unit {u}"
        if not isinstance(unit, Unit):
            msg = f"{here} is a {type(unit).__name__}, not a Unit"
            raise GraphError(msg)
        if _int(unit.index, f"{here} index", minimum=0) != u:
            msg = f"{here} has index {unit.index}; units are listed in index order"
            raise GraphError(msg)
        _int(unit.fan_in, f"{here} fan_in", minimum=1)
        _int(unit.rows, f"{here} rows", minimum=1)
        _ints(unit.in_channels, f"{here} in_channels", minimum=0)
        if not _ints(unit.out_channels, f"{here} out_channels", minimum=0):
            msg = f"{here} writes no output channel"
            raise GraphError(msg)
    _ints(_need(node, "unit_bits"), f"{where}: meta['unit_bits']", minimum=0, length=len(units))
    return tuple(units)


def _expected_index_map(units: Sequence[Unit], *, window: int, channels: int, order: str | None) -> np.ndarray:
    """Each unit's inputs as element indices: its channels (features), or channel x kernel position in a window."""
    width = max(u.fan_in for u in units)
    index_map = np.full((len(units), width), -1, dtype=np.int64)
    taps = np.arange(window, dtype=np.int64)
    for u, unit in enumerate(units):
        ins = np.asarray(unit.in_channels, dtype=np.int64)
        if order is None:
            row = ins
        elif order == "kernel-major":
            row = (taps[:, None] * channels + ins[None, :]).reshape(-1)
        else:
            row = (ins[:, None] * window + taps[None, :]).reshape(-1)
        if len(row) != unit.fan_in:
            msg = (
                f"unit {u} reads {len(row)} element(s) ({len(ins)} channel(s) x {window}) but has fan-in {unit.fan_in}"
            )
            raise GraphError(msg)
        index_map[u, : len(row)] = row
    return index_map


def _check_index_map(table: Node, units: tuple[Unit, ...], producer: Node, edge: Edge) -> None:
    where = f"edge {edge.producer!r} -> {edge.consumer!r} (port {edge.consumer_port})"
    index_map = edge.index_map
    width = max(u.fan_in for u in units)
    if (
        not isinstance(index_map, np.ndarray)
        or index_map.dtype.kind not in "iu"
        or index_map.shape != (len(units), width)
    ):
        got = index_map.shape if isinstance(index_map, np.ndarray) else type(index_map).__name__
        msg = (
            f"graph: {where} must map the inputs of {len(units)} unit(s) with an integer index_map of shape "
            f"{(len(units), width)} (units, largest fan-in); received {got}"
        )
        raise GraphError(msg)
    spatial = producer.kind is NodeKind.WINDOW
    vector = producer.shape[-1] if spatial else math.prod(producer.shape)
    index_map = index_map.astype(np.int64)
    fan_ins = np.asarray([u.fan_in for u in units])
    driven = np.arange(width)[None, :] < fan_ins[:, None]
    bad = driven & ((index_map < 0) | (index_map >= vector))
    if bad.any():
        u, j = (int(v) for v in np.argwhere(bad)[0])
        if index_map[u, j] < 0:
            msg = f"graph: table {table.name!r} unit {u} input {j} is not driven (index -1 on {where})"
        else:
            msg = (
                f"graph: table {table.name!r} unit {u} input {j} reads element {int(index_map[u, j])}, but {where} "
                f"carries {vector} element(s) per position"
            )
        raise GraphError(msg)
    if (index_map[~driven] != -1).any():
        u = int(np.argwhere(~driven & (index_map != -1))[0][0])
        msg = f"graph: table {table.name!r} unit {u} has {units[u].fan_in} inputs but more are driven on {where}"
        raise GraphError(msg)
    if spatial:
        window = math.prod(producer.meta["kernel"])
        channels, order = producer.meta["channels"], producer.meta["element_order"]
    else:
        window, channels, order = 1, vector, None
    try:
        expected = _expected_index_map(units, window=window, channels=channels, order=order)
    except GraphError as exc:
        msg = f"graph: table {table.name!r} {exc}"
        raise GraphError(msg) from None
    if not np.array_equal(expected, index_map):
        u = int(np.flatnonzero((expected != index_map).any(axis=1))[0])
        msg = (
            f"graph: {where}: index_map row {u} is {index_map[u].tolist()}, but unit {u} of {table.name!r} reads "
            f"{expected[u].tolist()} (its input channels {list(units[u].in_channels)}"
            f"{' in ' + order + ' order' if order else ''})"
        )
        raise GraphError(msg)
    domains = element_domains(producer)
    radix = np.asarray([len(d) for d in domains], dtype=np.int64)
    bits = np.asarray([d.bits for d in domains], dtype=np.int64)
    if len(domains) == 1:
        radix, bits = np.broadcast_to(radix, (vector,)), np.broadcast_to(bits, (vector,))
    unit_bits = table.meta["unit_bits"]
    for u, unit in enumerate(units):
        reads = index_map[u, : unit.fan_in]
        rows = math.prod(int(r) for r in radix[reads])
        if rows != unit.rows or int(bits[reads].sum()) != unit_bits[u]:
            msg = (
                f"graph: table {table.name!r} unit {u} has {unit.rows} rows and {unit_bits[u]} bits, but the codes "
                f"it reads from {producer.name!r} give {rows} rows and {int(bits[reads].sum())} bits"
            )
            raise GraphError(msg)


def _short(values: list[int]) -> str:
    return str(values) if len(values) <= 8 else f"[{', '.join(map(str, values[:8]))}, ...] ({len(values)})"


def _check_join(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    where = _where(node)
    if not producers:
        msg = f"{where}: joins no operand"
        raise GraphError(msg)
    if _need(node, "op") != "concat" or node.meta.get("for", "add") != "add":
        msg = f"{where}: meta['op'] must be 'concat' and meta['for'] absent or 'add', received {node.meta['op']!r}"
        raise GraphError(msg)
    _need(node, "input_shapes")
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
    from torch import nn

    _one_input(node)
    producer, where = producers[0], _where(node)
    _codes_in(node, producer)
    _same(node, producer, "layout", "domain")
    module = _need(node, "module")
    if type(module) not in (nn.MaxPool1d, nn.MaxPool2d):
        msg = f"{where}: meta['module'] must be an nn.MaxPool1d or nn.MaxPool2d, received {type(module).__name__}"
        raise GraphError(msg)
    rank = 1 if isinstance(module, nn.MaxPool1d) else 2
    if not _is_int(_need(node, "rank")) or node.meta["rank"] != rank or len(node.shape) != rank + 1:
        msg = f"{where}: meta['rank'] {node.meta['rank']!r} and shape {node.shape} do not fit {type(module).__name__}"
        raise GraphError(msg)
    if node.layout is not None and node.layout.channels_last:
        msg = f"{where}: max-pools read channels-first codes, received layout {node.layout.value}"
        raise GraphError(msg)
    args = {}
    for key, low in (("kernel_size", 1), ("stride", 1), ("padding", 0), ("dilation", 1)):
        value = getattr(module, key)
        if _need(node, key) != value or type(node.meta[key]) is not type(value):
            msg = f"{where}: meta[{key!r}] is {node.meta[key]!r}, but its module's {key} is {value!r}"
            raise GraphError(msg)
        if _is_int(value):
            args[key] = _int(value, f"{where}: {key}", minimum=low)
        else:
            args[key] = _ints(value, f"{where}: {key}", minimum=low, length=rank)
    if not isinstance(module.ceil_mode, bool):
        msg = f"{where}: its module's ceil_mode must be True or False, received {module.ceil_mode!r}"
        raise GraphError(msg)
    fn = F.max_pool1d if rank == 1 else F.max_pool2d  # what the runtime runs
    try:
        shape = tuple(fn(torch.empty(1, *producer.shape, device="meta"), **args, ceil_mode=module.ceil_mode).shape[1:])
    except Exception as exc:  # torch says why the window does not fit (padding above half the kernel, ...)
        msg = f"{where}: {module} cannot pool {producer.name!r} of shape {producer.shape}: {exc}"
        raise GraphError(msg) from None
    if shape != node.shape:
        msg = f"{where}: shape {node.shape} differs from {shape}, what {module} makes of {producer.shape}"
        raise GraphError(msg)


def _check_host(node: Node, producers: list[Node], incoming: list[Edge], outgoing: list[Edge]) -> None:
    from torch import nn  # the module a host node runs is a torch module

    _one_input(node)
    where = _where(node)
    if node.domain is not None or node.layout is not None:
        msg = (
            f"{where}: a host node outputs raw values (domain and layout None), received {node.domain!r}, {node.layout}"
        )
        raise GraphError(msg)
    module = _need(node, "module")
    if not isinstance(module, nn.Module):
        msg = f"{where}: meta['module'] must be the torch module it runs, received {type(module).__name__}"
        raise GraphError(msg)
    _need(node, "modules")
    _need(node, "input_shapes")


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
