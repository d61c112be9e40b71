"""A table network as a language-neutral netlist: signals, table instances, comparators and registers.

:class:`NetlistBuilder` is a :class:`~iotable.interpret.GraphInterpreter`: it walks the graph once and gives
every node's output tensor as an array of **element ids** in the node's shape. An element is a bit field of
a signal (``signal``, ``lsb``, ``width``) or a constant code (a pad code). Structural nodes are wiring, so
they only rearrange ids: a reshape reshapes, a join concatenates, a duplicate repeats, a pad gathers through
its index map with the pad codes' constants, a window gathers its vectors. Only table and pool nodes make
hardware: a table node becomes a *layer module* whose input port ``x`` is the tensor it reads (the window's
input when a window feeds it) and whose output port ``y`` is its output tensor, a pool node a module of
comparator trees. Pipeline registers follow table layers (every ``pipeline``-th one); an element's *stage*
is the registers it has passed, and a consumer that reads elements of different stages reads the earlier
ones through delay registers, so that every path from the input has the same latency.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import HDLError
from ..graph.graph import Graph, Node, NodeKind
from ..graph.interpret import GraphInterpreter
from ..graph.nodes import ElementOrder, PadMeta, PoolMeta, TableMeta, WindowMeta
from ..table import IOTable
from ._table import TableLayout, layout_of

__all__ = [
    "Layer",
    "Netlist",
    "NetlistBuilder",
    "Pool",
    "TableBuilder",
    "TableModule",
    "hardware_nodes",
    "window_gather",
]


@dataclass
class Signal:
    """A bit vector of the top level: the input, a module's output, a register or a delayed copy."""

    name: str
    width: int
    stage: int
    first: int  # the id of its first element; its elements have consecutive ids
    count: int
    source: int | None = None  # the signal a register copies, delayed by one cycle


@dataclass(frozen=True)
class TableModule:
    """One distinct table (deduplicated by content) and the module that holds it."""

    name: str
    table: IOTable
    layout: TableLayout
    uses: tuple[tuple[str, int], ...]  # (layer, unit) of every unit that instantiates it


@dataclass
class Layer:
    """A table node as a layer module: one instance per unit and position."""

    name: str  # the module's name
    node: str
    layer: str
    x_ids: np.ndarray  # the top-level elements driving port x, in order (element 0 at the lowest bits)
    x_widths: np.ndarray
    instances: list[tuple[str, str, list[int]]]  # (instance name, table module, local x elements, first input first)
    instance_units: list[tuple[int, int]]  # (unit, position) of each instance
    y_lsb: np.ndarray  # lowest bit in y of each instance's codes
    y_width: int
    output: int  # the top-level signal y drives
    register: int | None = None  # the top-level register after the layer, if any
    register_bits: int = 0


@dataclass
class Pool:
    """A pool node as a module of comparator trees: ``y`` element e is the maximum of some ``x`` elements."""

    name: str
    node: str
    x_ids: np.ndarray
    x_widths: np.ndarray
    maxima: list[list[int]]  # for each output element, the local x elements it takes the maximum of
    y_widths: np.ndarray
    output: int


@dataclass
class Netlist:
    """Everything the emitters need: signals, element store, modules, the output and its latency."""

    top: str
    signals: list[Signal] = field(default_factory=list)
    modules: dict[str, TableModule] = field(default_factory=dict)
    blocks: list[Layer | Pool] = field(default_factory=list)
    sig: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # -1: a constant
    lsb: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    width: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    value: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # a constant's code
    input_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    input_node: str = "input"
    output_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    output_node: str = "output"
    latency: int = 0
    origin: dict[int, str] = field(default_factory=dict)  # element id -> what writes it, for the bench

    # -- the element store ----------------------------------------------------------------------------------

    def _grow(self, sig: np.ndarray, lsb: np.ndarray, width: np.ndarray, value: np.ndarray) -> np.ndarray:
        start = len(self.sig)
        self.sig = np.concatenate([self.sig, sig.astype(np.int64)])
        self.lsb = np.concatenate([self.lsb, lsb.astype(np.int64)])
        self.width = np.concatenate([self.width, width.astype(np.int64)])
        self.value = np.concatenate([self.value, value.astype(np.int64)])
        return np.arange(start, len(self.sig), dtype=np.int64)

    def signal(self, name: str, widths: np.ndarray, *, stage: int, lsb: np.ndarray | None = None) -> np.ndarray:
        """A new signal whose elements have ``widths`` (element 0 at the lowest bits, unless ``lsb`` says where
        each sits); returns the elements' ids."""
        widths = np.asarray(widths, dtype=np.int64).reshape(-1)
        if lsb is None:
            lsb = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
        total = int((lsb + widths).max()) if widths.size else 0
        index = len(self.signals)
        ids = self._grow(np.full(widths.size, index), lsb, widths, np.zeros(widths.size, np.int64))
        first = int(ids[0]) if ids.size else len(self.sig)
        self.signals.append(Signal(name, max(total, 1), stage, first, int(widths.size)))
        return ids

    def constants(self, widths: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Constant elements (pad codes)."""
        widths, values = np.asarray(widths, np.int64).reshape(-1), np.asarray(values, np.int64).reshape(-1)
        return self._grow(np.full(widths.size, -1), np.zeros(widths.size, np.int64), widths, values)

    def stage_of(self, ids: np.ndarray) -> np.ndarray:
        """Each element's stage (registers passed); constants count as stage -1 (any stage)."""
        stages = np.array([s.stage for s in self.signals] + [-1], dtype=np.int64)
        return stages[self.sig[ids]]

    def register(self, signal: int, name: str) -> int:
        """A register copying ``signal`` one cycle later; returns the new signal's index."""
        src = self.signals[signal]
        count = src.count
        part = slice(src.first, src.first + count)
        self._grow(np.full(count, len(self.signals)), self.lsb[part], self.width[part], np.zeros(count, np.int64))
        new = Signal(name, src.width, src.stage + 1, len(self.sig) - count, count, source=signal)
        self.signals.append(new)
        return len(self.signals) - 1

    def moved(self, ids: np.ndarray, signal: int, to: int) -> np.ndarray:
        """``ids`` with the elements of ``signal`` replaced by the same elements of signal ``to``."""
        old, new = self.signals[signal], self.signals[to]
        inside = (ids >= old.first) & (ids < old.first + old.count)
        return np.where(inside, ids - old.first + new.first, ids)

    def aligned(self, ids: np.ndarray, stage: int) -> np.ndarray:
        """``ids`` read at ``stage``: elements of earlier stages through delay registers (made once, reused)."""
        ids = np.asarray(ids, dtype=np.int64)
        for index in np.unique(self.sig[ids.reshape(-1)]):
            if index < 0:
                continue
            current = int(index)
            while self.signals[current].stage < stage:
                current = self._delay(current)
            if current != index:
                ids = self.moved(ids, int(index), current)
        return ids

    def _delay(self, signal: int) -> int:
        """The one-cycle delayed copy of ``signal`` (made on first use), named after the signal it delays."""
        for k, s in enumerate(self.signals):
            if s.source == signal:
                return k
        root = signal
        while self.signals[root].source is not None:
            root = self.signals[root].source  # type: ignore[assignment]
        return self.register(signal, f"{self.signals[root].name}_d{self.signals[signal].stage + 1}")

    def describe(self, element: int) -> str:
        """What writes ``element`` (a node, unit and position), through the registers that copy it."""
        index = int(self.sig[element])
        while index >= 0 and self.signals[index].source is not None:
            src = self.signals[index].source
            assert src is not None
            element = element - self.signals[index].first + self.signals[src].first
            index = src
        if index < 0:
            return "a constant"
        return self.origin.get(int(element), f"node '{self.input_node}' element {element - self.signals[index].first}")

    @property
    def registers(self) -> list[Signal]:
        """The signals that are registers, in creation order."""
        return [s for s in self.signals if s.source is not None]


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
    bits = np.array([max(d.bits, 1) for d in domains], dtype=np.int64)
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


def _pool_sources(in_shape: tuple[int, ...], out_shape: tuple[int, ...], meta: PoolMeta, channels_last: bool) -> list:
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


class TableBuilder(GraphInterpreter[Any]):
    """What both styles' builders share: the hardware part of the graph, the netlist, one module per distinct
    table and the layer modules that instantiate them.

    Args:
        graph: the network's (checked) graph.
        layers: the network's table layers by name (``net.layers``).
        top: the top module's name (a prefix of every module's name).
        pipeline: a register after every ``pipeline``-th table layer; 0 for none.
    """

    def __init__(self, graph: Graph, layers: dict[str, Any], *, top: str, pipeline: int) -> None:
        super().__init__(graph)
        self.layers = layers
        self.pipeline = pipeline
        self.netlist = Netlist(top)
        hardware, self.cut, self.hosts = hardware_nodes(graph)
        self.hardware = {n.name for n in hardware}
        self.values: dict[str, Any] = {}
        self.table_count = 0
        self.pool_count = 0
        self._keys: dict[str, str] = {}

    def run_node(self, node: Node, inputs: Any) -> Any:
        if node.name not in self.hardware:
            return None
        result = super().run_node(node, inputs)
        self.values[node.name] = result
        return result

    def _module(self, table: IOTable, layer: str, unit: int, index: int) -> str:
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
            module = self._module(tables[unit.index], meta.layer, unit.index, index)
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


class NetlistBuilder(TableBuilder):
    """Walks the hardware part of a graph and builds its unrolled :class:`Netlist` (see the module docstring)."""

    def build(self) -> Netlist:
        """Walk the graph; return the netlist, its output aligned to one stage (the latency)."""
        self.run_graph()
        netlist = self.netlist
        out = self.values[self.cut]
        stage = int(max(netlist.stage_of(out.reshape(-1)).max(), 0)) if out.size else 0
        netlist.output_ids = netlist.aligned(out.reshape(-1), stage)
        netlist.output_node = self.cut
        netlist.latency = stage
        return netlist

    # -- wiring -----------------------------------------------------------------------------------------------

    def input(self, node: Node, inputs: Any) -> np.ndarray:
        widths = element_widths(node)
        ids = self.netlist.signal("in_data", widths, stage=0).reshape(node.shape)
        self.netlist.input_ids, self.netlist.input_node = ids.reshape(-1), node.name
        return ids

    def reshape(self, node: Node, inputs: Any) -> np.ndarray:
        return np.asarray(inputs[0]).reshape(node.shape)

    def duplicate(self, node: Node, inputs: Any) -> np.ndarray:
        return np.asarray(inputs[0])

    def join(self, node: Node, inputs: Any) -> np.ndarray:
        axis = -1 if node.layout is not None and node.layout.channels_last else 0
        return np.concatenate([np.asarray(x) for x in inputs], axis=axis)

    def pad(self, node: Node, inputs: Any) -> np.ndarray:
        meta = node.meta
        assert isinstance(meta, PadMeta)  # a checked graph
        source = np.asarray(inputs[0]).reshape(-1)
        index = np.asarray(meta.index_map)
        if not (index < 0).any():
            return source[index]
        channels_last = node.layout is not None and node.layout.channels_last
        domains = node.channel_domains() or ()
        assert meta.pad_codes is not None  # a checked graph: -1 entries come with pad codes
        widths = np.array([max(d.bits, 1) for d in domains], dtype=np.int64)
        constants = self.netlist.constants(widths, np.asarray(meta.pad_codes))
        channel = np.indices(index.shape)[-1 if channels_last else 0]
        return np.where(index < 0, constants[channel], source[np.maximum(index, 0)])

    def window(self, node: Node, inputs: Any) -> np.ndarray:
        meta = node.meta
        assert isinstance(meta, WindowMeta) and node.layout is not None  # a checked graph
        source = np.asarray(inputs[0])
        return source.reshape(-1)[window_gather(source.shape, meta, channels_last=node.layout.channels_last)]

    def output(self, node: Node, inputs: Any) -> np.ndarray:
        return np.asarray(inputs[0])

    # -- hardware ---------------------------------------------------------------------------------------------

    def table(self, node: Node, inputs: Any) -> np.ndarray:
        meta = node.meta
        assert isinstance(meta, TableMeta)  # a checked graph
        netlist, index = self.netlist, self.table_count
        self.table_count += 1
        producer = self.graph.producers(node.name)[0]
        if producer.kind is NodeKind.WINDOW:
            window = producer.meta
            assert isinstance(window, WindowMeta) and producer.layout is not None
            port = self.values[self.graph.inputs(producer.name)[0]]
            local = window_gather(port.shape, window, channels_last=producer.layout.channels_last)
            local = local.reshape(-1, local.shape[-1])
        else:
            port = np.asarray(inputs[0])
            local = np.arange(port.size, dtype=np.int64).reshape(1, -1)
        x_ids = port.reshape(-1)
        stage = int(max(netlist.stage_of(x_ids).max(), 0)) if x_ids.size else 0
        x_ids = netlist.aligned(x_ids, stage)
        ids, block = self.layer_block(node, index, x_ids, local, stage=stage)
        if self.pipeline and (index + 1) % self.pipeline == 0:
            signal = block.output
            registered = netlist.register(signal, f"layer{index}_q")
            block.register, block.register_bits = registered, netlist.signals[registered].width
            ids = netlist.moved(ids, signal, registered)
        return ids.reshape(node.shape)

    def pool(self, node: Node, inputs: Any) -> np.ndarray:
        meta = node.meta
        assert isinstance(meta, PoolMeta)  # a checked graph
        netlist, index = self.netlist, self.pool_count
        self.pool_count += 1
        source = np.asarray(inputs[0])
        channels_last = node.layout is not None and node.layout.channels_last
        x_ids = source.reshape(-1)
        stage = int(max(netlist.stage_of(x_ids).max(), 0)) if x_ids.size else 0
        x_ids = netlist.aligned(x_ids, stage)
        maxima = _pool_sources(source.shape, node.shape, meta, channels_last)
        widths = netlist.width[x_ids][[m[0] for m in maxima]]
        ids = netlist.signal(f"pool{index}_y", widths, stage=stage)
        for k in range(len(maxima)):
            netlist.origin[int(ids[k])] = f"node '{node.name}' element {k}"
        netlist.blocks.append(
            Pool(f"{netlist.top}_pool{index}", node.name, x_ids, netlist.width[x_ids], maxima, widths,
                 len(netlist.signals) - 1)
        )  # fmt: skip
        return ids.reshape(node.shape)


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
