"""What both styles' builders share: the walk over the hardware part of a graph, one module per distinct table,
the layer modules that instantiate them, and the wiring helpers (element widths, window gathers, pool sources).

The per-node-kind functions live in :mod:`.unrolled` and :mod:`.streaming`; :mod:`.build` holds their tables.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import bits as bitfields
from ..errors import HDLError
from ..graph.graph import Graph, Node, NodeKind
from ..graph.interpret import GraphInterpreter
from ..graph.nodes import ElementOrder, PoolMeta, TableMeta, WindowMeta
from ..table import IOTable
from .netlist import Layer, Netlist, Style, TableModule
from .table import layout_of

__all__ = ["Builder", "NodeBuilder", "element_widths", "hardware_nodes", "pool_sources", "window_gather"]

#: The function that builds one node kind in one style: ``(builder, node, its producers' results) -> result``
#: (unrolled: an array of element ids in the node's shape; streaming: a :class:`~.streaming.Stream`).
NodeBuilder = Callable[["Builder", Node, Sequence[Any]], Any]


def hardware_nodes(graph: Graph) -> tuple[list[Node], str, list[str]]:
    """The nodes that become hardware (none that is a host node or reads one, directly or not), the node whose
    output is the hardware's output, and the host nodes left to software.

    Raises:
        HDLError: the hardware part would have more than one output tensor, or none.
    """
    software: set[str] = set()
    for node in graph.nodes:
        if node.kind is NodeKind.HOST or any(p in software for p in graph.inputs(node.name)):
            software.add(node.name)
    hosts = [n.name for n in graph.nodes if n.kind is NodeKind.HOST]
    hardware = [n for n in graph.nodes if n.name not in software and n.kind is not NodeKind.OUTPUT]
    keep = {n.name for n in hardware}
    cut = sorted({e.producer for e in graph.edges if e.producer in keep and e.consumer not in keep})
    if len(cut) != 1:
        msg = (
            f"export: the hardware part of the graph (everything before its host nodes {hosts}) ends in {len(cut)} "
            f"tensors ({cut}); expected exactly one. List the modules after the cut in host= so that one tensor "
            "leaves the tables"
        )
        raise HDLError(msg)
    if all(n.kind is NodeKind.INPUT for n in hardware):
        msg = (
            f"export: the first node after the input is a host node ({hosts[0]!r}), so there is no table to "
            "export; precompute without host= for the layers you want in hardware"
        )
        raise HDLError(msg)
    return hardware, cut[0], hosts


def _table_key(table: IOTable) -> str:
    """A digest of everything a table module is made of: domains' sizes, rows, outputs and don't-cares."""
    digest = hashlib.sha256()
    digest.update(repr((table.radices, table.output_domain.bits if table.output_domain else None)).encode())
    digest.update(np.ascontiguousarray(table.outputs).tobytes())
    if not table.is_dense:
        digest.update(np.ascontiguousarray(table.addresses).tobytes())
    return digest.hexdigest()


def element_widths(node: Node) -> np.ndarray:
    """Bits of each element of ``node``'s output, in its shape (per-channel domains broadcast along the channels)."""
    domains = node.channel_domains()
    if domains is None:
        msg = f"export: node {node.name!r} outputs raw values, not codes; hardware needs quantized tensors"
        raise HDLError(msg)
    bits = np.array(bitfields.widths(domains), dtype=np.int64)
    if node.layout is None or not node.shape:
        return np.broadcast_to(bits if bits.size > 1 else bits[:1], node.shape).copy()
    axis = -1 if node.layout.channels_last or node.kind is NodeKind.WINDOW else 0
    shape = [1] * len(node.shape)
    shape[axis] = -1
    return np.broadcast_to(bits.reshape(shape), node.shape).copy()


def window_gather(shape: tuple[int, ...], meta: WindowMeta, *, channels_last: bool) -> np.ndarray:
    """For a window over an input of per-sample ``shape``: the flat input index of every element of every
    window vector, shape ``(*positions, channels * taps)``, in the window's element order."""
    rank = len(meta.kernel)
    channels = shape[-1] if channels_last else shape[0]
    size = shape[:-1] if channels_last else shape[1:]
    positions = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(size, meta.kernel, meta.stride, meta.dilation)]
    grids = np.meshgrid(*[np.arange(p) for p in positions], indexing="ij")  # (*P) per axis
    taps = np.meshgrid(*[np.arange(k) for k in meta.kernel], indexing="ij")
    coords = []
    for axis in range(rank):
        p = grids[axis].reshape(*grids[axis].shape, 1)  # (*P, 1)
        t = taps[axis].reshape(-1)  # (T,), row-major over the kernel
        coords.append(p * meta.stride[axis] + t * meta.dilation[axis])  # (*P, T)
    c = np.arange(channels)
    if channels_last:
        index = np.ravel_multi_index((*[x[..., None] for x in coords], c), (*size, channels))  # (*P, T, C)
        vectors = index if meta.element_order is ElementOrder.KERNEL_MAJOR else np.swapaxes(index, -1, -2)
    else:
        index = np.ravel_multi_index((c[:, None], *[x[..., None, :] for x in coords]), (channels, *size))  # (*P, C, T)
        vectors = index if meta.element_order is ElementOrder.CHANNEL_MAJOR else np.swapaxes(index, -1, -2)
    return vectors.reshape(*positions, channels * math.prod(meta.kernel))


def pool_sources(in_shape: tuple[int, ...], out_shape: tuple[int, ...], meta: PoolMeta, channels_last: bool) -> list:
    """For every output element (C order), the flat input indices its window covers inside the input."""
    size = in_shape[:-1] if channels_last else in_shape[1:]
    out = out_shape[:-1] if channels_last else out_shape[1:]
    rank = len(size)
    axes = []
    for axis in range(rank):  # (out positions, kernel taps) of input coordinates, -1 outside
        o = np.arange(out[axis])[:, None] * meta.stride[axis] - meta.padding[axis]
        coord = o + np.arange(meta.kernel_size[axis])[None, :] * meta.dilation[axis]
        axes.append(np.where((coord >= 0) & (coord < size[axis]), coord, -1))
    sources = []
    for index in np.ndindex(*out_shape):
        c = index[-1] if channels_last else index[0]
        pos = index[:-1] if channels_last else index[1:]
        lines = [axes[a][pos[a]] for a in range(rank)]
        grid = np.meshgrid(*lines, indexing="ij")
        valid = np.all([g >= 0 for g in grid], axis=0)
        coords = [g[valid] for g in grid]
        full = (*coords, np.full(len(coords[0]), c)) if channels_last else (np.full(len(coords[0]), c), *coords)
        sources.append(np.ravel_multi_index(full, in_shape).tolist())
    return sources


class Builder(GraphInterpreter[Any]):
    """The state of one walk over the hardware part of a graph, for either style: the netlist, one module per
    distinct table, the layer modules that instantiate them, and (streaming) the handshakes. What a node
    becomes is not here: :meth:`run_node` calls the function of the node's kind in ``handlers``, a table
    keyed by :class:`~iotable.graph.graph.NodeKind` (:data:`.build.BUILDERS` holds one per style).

    Args:
        graph: the network's (checked) graph.
        layers: the network's table layers by name (``net.layers``).
        top: the top module's name (a prefix of every module's name).
        pipeline: a register after every ``pipeline``-th table layer; 0 for none.
    """

    def __init__(
        self,
        graph: Graph,
        layers: dict[str, Any],
        *,
        top: str,
        pipeline: int,
        style: Style,
        handlers: Mapping[NodeKind, NodeBuilder],
    ) -> None:
        super().__init__(graph)
        self.handlers = handlers
        self.layers = layers
        self.pipeline = pipeline
        self.netlist = Netlist(top, style)
        hardware, self.cut, self.hosts = hardware_nodes(graph)
        self.hardware = {n.name for n in hardware}
        self.values: dict[str, Any] = {}
        self.table_count = 0
        self.pool_count = 0
        self._keys: dict[str, str] = {}
        # streaming: the stream a reshape of a whole frame stands for, and the stage counters
        self.flattened: dict[str, str] = {}
        self.window_count = 0
        self.pad_count = 0

    def run_node(self, node: Node, inputs: Any) -> Any:
        if node.name not in self.hardware:
            return None
        handler = self.handlers.get(node.kind)
        result = self.default(node, inputs) if handler is None else handler(self, node, inputs)
        self.values[node.name] = result
        return result

    def handshake(self, beats: int) -> int:
        """A new handshake moving ``beats`` words per sample (streaming); returns its index."""
        self.netlist.beats.append(beats)
        return len(self.netlist.beats) - 1

    def module(self, table: IOTable, layer: str, unit: int, index: int) -> str:
        """The module of ``table``: an existing one of the same content, or a new one."""
        key = _table_key(table)
        if key in self._keys:
            name = self._keys[key]
            module = self.netlist.modules[name]
            self.netlist.modules[name] = TableModule(name, module.table, module.layout, (*module.uses, (layer, unit)))
            return name
        name = f"{self.netlist.top}_layer{index}_u{unit}"
        layout = layout_of(table, what=f"export: layer {layer!r} unit {unit}")
        self.netlist.modules[name] = TableModule(name, table, layout, ((layer, unit),))
        self._keys[key] = name
        return name

    def layer_block(
        self, node: Node, index: int, x_ids: np.ndarray, local: np.ndarray, *, stage: int, streamed: bool = False
    ) -> tuple[np.ndarray, Layer]:
        """The layer module of table node ``node``: one instance of every unit at each of ``local``'s rows
        (positions; each row lists the elements of ``x_ids`` a position reads); its output signal's ids in the
        node's element order (C order over channels and positions) and the block, appended to the netlist.
        ``streamed``: the instances serve every position in turn, so ``local`` has one row and the output is
        one position's channels."""
        meta = node.meta
        assert isinstance(meta, TableMeta)  # a checked graph
        netlist = self.netlist
        tables = self.layers[meta.layer].tables
        positions = local.shape[0]
        instances, units, lsbs, widths, channel_of = [], [], [], [], []
        offset = 0
        for unit in meta.units:
            module = self.module(tables[unit.index], meta.layer, unit.index, index)
            layout = netlist.modules[module].layout
            columns = meta.index_map[unit.index, : unit.fan_in]
            for p in range(positions):
                instances.append((f"u{unit.index}_p{p}", module, local[p, columns].tolist()))
                units.append((unit.index, p))
                lsbs.append(offset)
                for j, channel in enumerate(unit.out_channels):
                    widths.append(layout.output_width)
                    channel_of.append((channel, p, offset + layout.output_offsets[j]))
                offset += layout.code_bits
        # The output's elements, C order: channel c at position p sits where its instance put it.
        element = _channels(channel_of) if streamed else _output_index(node, [(c, p) for c, p, _ in channel_of])
        lsb = np.empty(len(channel_of), np.int64)
        lsb[element] = [bit for _, _, bit in channel_of]
        width = np.empty(len(channel_of), np.int64)
        width[element] = widths
        ids = netlist.signal(f"layer{index}_y", width, stage=stage, lsb=lsb)
        for k, (c, p, _) in enumerate(channel_of):
            where = "" if streamed else f" position {p}"
            netlist.origin[int(ids[element[k]])] = f"node '{node.name}' unit {_unit_of(meta, c)}{where}"
        block = Layer(
            f"{netlist.top}_layer{index}", node.name, meta.layer, x_ids, netlist.width[x_ids], instances, units,
            np.asarray(lsbs, np.int64), offset, len(netlist.signals) - 1,
        )  # fmt: skip
        netlist.blocks.append(block)
        return ids, block


def _channels(channel_of: list[tuple[int, int, int]]) -> np.ndarray:
    """Elements in channel order (one position: the output's elements are its channels)."""
    return np.array([c for c, _, _ in channel_of], dtype=np.int64)


def _unit_of(meta: TableMeta, channel: int) -> int:
    for unit in meta.units:
        if channel in unit.out_channels:
            return unit.index
    return -1


def _output_index(node: Node, places: list[tuple[int, int]]) -> np.ndarray:
    """The flat (C order) index in ``node``'s output of each (channel, position) pair."""
    channels = np.array([c for c, _ in places], dtype=np.int64)
    positions = np.array([p for _, p in places], dtype=np.int64)
    spatial = node.spatial_size
    if not spatial:
        return channels
    count = math.prod(spatial)
    if node.layout is not None and node.layout.channels_last:
        return positions * node.channels + channels
    return channels * count + positions
