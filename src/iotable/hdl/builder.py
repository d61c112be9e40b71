"""What both styles' builders share: the walk over the hardware part of a graph, one module per distinct table,
the layer modules that instantiate them (:meth:`Builder.lookup`), and the wiring helpers (element widths, window
gathers, pool sources).

What a node becomes is its kind's: :meth:`Builder.run_node` calls the hardware method of the node's kind
(:mod:`iotable.nodekinds`) for the style, with the builder, which is everything the kind builds with. The
style's builder (:mod:`.unrolled`, :mod:`.streaming`) adds that style's machinery; :mod:`.build` picks it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .. import bits as bitfields
from ..errors import HDLError
from ..graph.graph import Graph, Node
from ..graph.interpret import GraphInterpreter
from ..graph.kind import NodeKindDef, definition
from ..graph.liveness import Liveness, channel_positions, liveness, pool_sources, window_gather
from ..graph.nodes import PoolMeta, WindowMeta
from ..table import IOTable
from .arithmetic import TREE_TERMS, add_adder, add_argmax, add_thresholds, sum_levels
from .netlist import Layer, Netlist, Pool, Style, TableModule
from .table import layout_of

__all__ = ["Builder", "LookupUnits", "element_widths", "hardware_nodes", "pool_sources", "window_gather"]


def hardware_nodes(graph: Graph) -> tuple[list[Node], str, list[str]]:
    """The nodes that become hardware (none that is a host node or reads one, directly or not), the node whose
    output is the hardware's output, and the host nodes left to software.

    Raises:
        HDLError: the hardware part would have more than one output tensor, or none.
    """
    software: set[str] = set()
    for node in graph.nodes:
        if node.kind.hosted or any(p in software for p in graph.inputs(node.name)):
            software.add(node.name)
    hosts = [n.name for n in graph.nodes if n.kind.hosted]
    hardware = [n for n in graph.nodes if n.name not in software and not n.kind.is_output]
    keep = {n.name for n in hardware}
    cut = sorted({e.producer for e in graph.edges if e.producer in keep and e.consumer not in keep})
    if len(cut) != 1:
        msg = (
            f"export: the hardware part of the graph (everything before its host nodes {hosts}) ends in {len(cut)} "
            f"tensors ({cut}); expected exactly one. List the modules after the cut in host= so that one tensor "
            "leaves the tables"
        )
        raise HDLError(msg)
    if all(n.kind.is_input for n in hardware):
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
    if not node.shape:  # one element (an argmax of a vector)
        return bits[:1].reshape(())
    if node.layout is None:
        return np.broadcast_to(bits if bits.size > 1 else bits[:1], node.shape).copy()
    axis = -1 if node.layout.channels_last or node.kind.windowed else 0
    shape = [1] * len(node.shape)
    shape[axis] = -1
    return np.broadcast_to(bits.reshape(shape), node.shape).copy()


class Builder(GraphInterpreter[Any]):
    """The state of one walk over the hardware part of a graph, and what a node kind builds its hardware with.

    The walk calls, for every node of the hardware part, the hardware method of the node's kind for the
    walk's style (:meth:`NodeKindDef.unrolled <iotable.graph.kind.NodeKindDef.unrolled>` or
    :meth:`~iotable.graph.kind.NodeKindDef.streaming`) with this builder, the node and its producers'
    results by input port; what it returns is the node's result. The subclass of each style
    (:class:`~.unrolled.UnrolledBuilder`, :class:`~.streaming.StreamingBuilder`) adds that style's machinery.

    What a kind may use, in either style:

    - :attr:`graph`, :attr:`layers` (``net.layers``), :attr:`values` (the results of the nodes before),
      :attr:`pipeline` and :attr:`netlist` (the IR: ``netlist.signal``, ``netlist.width`` of each element);
    - :meth:`lookup` — logic from codes: a layer of :class:`~iotable.table.IOTable` s over given elements, the
      general way for a kind to make hardware (the ``table`` kind is one such layer);
    - :meth:`element_widths`, :meth:`constants`, :meth:`window_gather`, :meth:`pool_sources`,
      :meth:`add_pool` and :meth:`no_hardware` (the refusal of a kind without hardware in a style);
    - arithmetic: :meth:`add_sum` (adder trees), :meth:`add_argmax` (comparator trees with indices) and
      :meth:`add_threshold` (comparisons against constants), each counted as a table layer for ``pipeline``.

    Args:
        graph: the network's (checked) graph.
        layers: the network's table layers by name (``net.layers``).
        top: the top module's name (a prefix of every module's name).
        pipeline: a register after every ``pipeline``-th table layer; 0 for none.
        keep_dead: instantiate every unit; by default a unit is instantiated only where one of its outputs
            reaches the network's output (:func:`iotable.graph.liveness.liveness`), the outputs of the others
            are constant 0 elements, which nothing live reads.
        table_latency: the registers inside each table module (by name; pipelined mapped tables, the same for
            every module of a layer): a layer's output is that many stages after its input.
    """

    #: The style this builder builds (its subclasses set it).
    style: ClassVar[Style]

    def __init__(
        self,
        graph: Graph,
        layers: dict[str, Any],
        *,
        top: str,
        pipeline: int,
        keep_dead: bool = False,
        table_latency: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(graph)
        self.table_latency = dict(table_latency or {})
        self.live: Liveness | None = None if keep_dead else liveness(graph)
        self.layers = layers
        self.pipeline = pipeline
        self.netlist = Netlist(top, self.style)
        hardware, self.cut, self.hosts = hardware_nodes(graph)
        self.hardware = {n.name for n in hardware}
        self.values: dict[str, Any] = {}
        self.table_count = 0
        self.pool_count = 0
        self.arith_count = 0
        self.layers_done = 0  # table layers and arithmetic levels, for pipeline
        self._keys: dict[str, str] = {}

    def run_node(self, node: Node, inputs: Any) -> Any:
        if node.name not in self.hardware:
            return None
        result = self.build(definition(node.kind), node, inputs)
        self.values[node.name] = result
        return result

    def build(self, kind: NodeKindDef, node: Node, inputs: Sequence[Any]) -> Any:
        """The result of ``node``: its kind's hardware method of this builder's style."""
        raise NotImplementedError

    def finish(self) -> Netlist:
        """The netlist after the walk (each style aligns or picks the output, sets the latency and clocking)."""
        raise NotImplementedError

    def no_hardware(self, node: Node, kind: NodeKindDef) -> HDLError:
        """The refusal of a node whose kind has no hardware in this builder's style (raise it)."""
        style = self.style.value
        msg = (
            f"node {node.name!r}: node kind {kind.name!r} has no hardware in style {style!r}; define "
            f"{style}(self, builder, node, inputs) on {type(kind).__name__} (builder.lookup makes logic from "
            "tables), or leave the layers from that node on to software (host=)"
        )
        return HDLError(msg)

    # -- what a node kind builds with ------------------------------------------------------------------

    def element_widths(self, node: Node) -> np.ndarray:
        """Bits of each element of ``node``'s output, in its shape (:func:`element_widths`)."""
        return element_widths(node)

    def window_gather(self, shape: tuple[int, ...], meta: WindowMeta, *, channels_last: bool) -> np.ndarray:
        """The flat input index of every element of every window vector (:func:`window_gather`)."""
        return window_gather(shape, meta, channels_last=channels_last)

    def pool_sources(
        self, in_shape: tuple[int, ...], out_shape: tuple[int, ...], meta: PoolMeta, channels_last: bool
    ) -> list:
        """For every output element, the flat input indices its window covers (:func:`pool_sources`)."""
        return pool_sources(in_shape, out_shape, meta, channels_last)

    def constants(self, widths: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Constant elements of ``widths`` bits holding ``codes``; their ids."""
        return self.netlist.constants(widths, codes)

    def add_pool(
        self, node: Node, x_ids: np.ndarray, maxima: list, widths: np.ndarray, *, stage: int, per: str
    ) -> np.ndarray:
        """A module of comparator trees for ``node``: output element ``k`` (of ``widths[k]`` bits) is the largest
        of the elements ``x_ids[maxima[k]]``; returns the output's ids (``per``: what an output element is, in
        the bench's messages: ``"element"`` or ``"channel"``)."""
        netlist, index = self.netlist, self.pool_count
        self.pool_count += 1
        widths = np.asarray(widths, np.int64).reshape(-1)
        live = None if self.live is None else self.live.elements.get(node.name)
        # an output element nothing live reads is a constant 0, not a comparator tree (when the elements are
        # the node's own: one per output element)
        kept = np.ones(len(maxima), bool) if live is None or live.size != len(maxima) else live.reshape(-1)
        if not kept.any():
            kept = np.ones(len(maxima), bool)
        made = np.flatnonzero(kept)
        signal = netlist.signal(f"pool{index}_y", widths[made], stage=stage)
        ids = np.empty(len(maxima), np.int64)
        ids[made] = signal
        ids[~kept] = netlist.constants(widths[~kept], np.zeros(int((~kept).sum()), np.int64))
        for k in made.tolist():
            netlist.origin[int(ids[k])] = f"node '{node.name}' {per} {k}"
        netlist.blocks.append(
            Pool(f"{netlist.top}_pool{index}", node.name, x_ids, netlist.width[x_ids], [maxima[k] for k in made],
                 widths[made], len(netlist.signals) - 1)
        )  # fmt: skip
        return ids

    def layer_done(self) -> bool:
        """Count one more table layer (or level of arithmetic); whether a register follows it (``pipeline``)."""
        self.layers_done += 1
        return bool(self.pipeline) and self.layers_done % self.pipeline == 0

    # -- arithmetic ------------------------------------------------------------------------------------

    def add_sum(self, node: Node, x: Any, index_map: np.ndarray, weights: np.ndarray, constant: np.ndarray) -> Any:
        """Adder trees: output ``k`` (of the node's field width) is ``constant[k] + sum_j weights[k, j] *
        x[index_map[k, j]]`` (``-1`` pads), unsigned, each tree of exactly the bits its sums need. Each level
        counts as a table layer for ``pipeline``; with registers on, a sum of more than
        :data:`~.arithmetic.TREE_TERMS` terms is split into levels of trees of at most that many, a register
        possible after each (so a deep popcount keeps its Fmax). ``x``: element ids (unrolled) or a stream
        whose beat the map indexes (streaming); returns the same kind of result."""
        index_map, weights = np.asarray(index_map, np.int64), np.asarray(weights, np.int64)
        made, index = self._arith_outputs(node, len(index_map))
        operands, carry = self.arith_in(x)
        terms = [[(int(i), int(w)) for i, w in zip(index_map[k], weights[k]) if i >= 0 and w] for k in made]
        widths = self.output_widths(node)
        group = TREE_TERMS if self.pipeline else 0
        x_widths = self.netlist.width[operands]
        levels = sum_levels(terms, [int(constant[k]) for k in made], x_widths, widths[made].tolist(), group)
        for at, level in enumerate(levels):
            operands, stage = self.arith_align(operands)
            origins = [f"node '{node.name}' element {k}" for k in made.tolist()]
            ids = add_adder(self.netlist, node.name, index, operands, level, stage=stage, at=(at, len(levels)),
                            origins=origins)  # fmt: skip
            operands, carry = self.arith_step(node, np.concatenate([operands[level.keep], ids]), ids, carry)
        return self.arith_out(node, self._arith_result(node, operands, made), carry)

    def add_argmax(self, node: Node, x: Any, groups: np.ndarray) -> Any:
        """Comparator trees: output ``k`` is the index in ``groups[k]`` (elements of ``x``, in index order) of its
        largest code, the first of equal ones, in the node's field width. Counts as a table layer."""
        groups = np.asarray(groups, np.int64)
        made, index = self._arith_outputs(node, len(groups))
        operands, carry = self.arith_in(x)
        operands, stage = self.arith_align(operands)
        origins = [f"node '{node.name}' element {k}" for k in made.tolist()]
        widths = self.output_widths(node)[made].tolist()
        ids = add_argmax(self.netlist, node.name, index, operands, [groups[k].tolist() for k in made], widths,
                         stage=stage, origins=origins)  # fmt: skip
        operands, carry = self.arith_step(node, ids, ids, carry)
        return self.arith_out(node, self._arith_result(node, operands, made), carry)

    def add_threshold(self, node: Node, x: Any, rows: Sequence[tuple[int, Sequence[int], Sequence[int], int]]) -> Any:
        """Comparisons against constants: output ``k``, for ``(element, thresholds, codes, base) = rows[k]``, is
        ``codes[j]`` for the last ``j`` with ``x[element] >= thresholds[j]`` (ascending, each below the field's
        range), else ``base``. Counts as a table layer."""
        made, index = self._arith_outputs(node, len(rows))
        operands, carry = self.arith_in(x)
        operands, stage = self.arith_align(operands)
        origins = [f"node '{node.name}' element {k}" for k in made.tolist()]
        kept = [(int(e), tuple(map(int, t)), tuple(map(int, c)), int(b)) for e, t, c, b in (rows[k] for k in made)]
        widths = self.output_widths(node)[made].tolist()
        ids = add_thresholds(self.netlist, node.name, index, operands, kept, widths, stage=stage, origins=origins)
        operands, carry = self.arith_step(node, ids, ids, carry)
        return self.arith_out(node, self._arith_result(node, operands, made), carry)

    def _arith_outputs(self, node: Node, count: int) -> tuple[np.ndarray, int]:
        """The outputs of an arithmetic node to build (those something live reads, when its outputs are the
        node's elements) and the block's number."""
        live = None if self.live is None else self.live.elements.get(node.name)
        kept = np.ones(count, bool) if live is None or live.size != count else live.reshape(-1).astype(bool)
        if not kept.any():
            kept = np.ones(count, bool)
        self.arith_count += 1
        return np.flatnonzero(kept), self.arith_count - 1

    def _arith_result(self, node: Node, ids: np.ndarray, made: np.ndarray) -> np.ndarray:
        """All outputs: those built, and constant 0 for the others (nothing live reads them)."""
        widths = self.output_widths(node)
        result = np.empty(len(widths), np.int64)
        dead = np.setdiff1d(np.arange(len(widths)), made)
        result[dead] = self.netlist.constants(widths[dead], np.zeros(dead.size, np.int64))
        result[made] = ids
        return result

    def output_widths(self, node: Node) -> np.ndarray:
        """Bits of each code of ``node``'s result in this style (unrolled: every element; streaming: a beat's)."""
        raise NotImplementedError

    def arith_in(self, x: Any) -> tuple[np.ndarray, Any]:
        """An arithmetic block's input as element ids, and what the style carries along (a stream)."""
        raise NotImplementedError

    def arith_align(self, ids: np.ndarray) -> tuple[np.ndarray, int]:
        """``ids`` read by one block, and the stage of its output."""
        raise NotImplementedError

    def arith_step(self, node: Node, operands: np.ndarray, ids: np.ndarray, carry: Any) -> tuple[np.ndarray, Any]:
        """After a block (its output ``ids``, the next ``operands``): a register where ``pipeline`` puts one."""
        raise NotImplementedError

    def arith_out(self, node: Node, ids: np.ndarray, carry: Any) -> Any:
        """The node's result from its output ids."""
        raise NotImplementedError

    def lookup(
        self,
        node: Node,
        tables: Sequence[IOTable],
        index_map: np.ndarray,
        x: Any,
        *,
        positions: np.ndarray | None = None,
        channels: Sequence[Sequence[int]] | None = None,
        layer: str | None = None,
    ) -> Any:
        """Logic from codes: one table layer, unit ``u`` the table ``tables[u]`` reading the elements
        ``index_map[u, :fan_in]`` of a vector and writing the output channels ``channels[u]`` (default: each
        table's outputs after the previous table's, from channel 0). The layer counts as a table layer for
        ``pipeline`` (a register after every ``pipeline``-th one) and its tables share modules by content
        with every other table of the design.

        Unrolled: ``x`` is element ids (any shape, read flat); the vector is ``x`` itself, or, with
        ``positions`` (``(P, V)``: the flat indices into ``x`` of each position's vector), every unit is
        instantiated at each of the ``P`` positions and channel ``c`` of position ``p`` is the node's element
        at (channel ``c``, position ``p``) as its layout orders them. Returns the output's ids in the node's
        shape (flat when their number is not the node's size). Streaming: ``x`` is a stream, the vector is
        each of its beats, and the result is a stream of the same frame whose beats are the channels.

        ``layer`` names the layer in module comments, the design's resources and errors (default: the node's
        name). Raises :class:`~iotable.errors.HDLError` where a table holds raw values (no codes).
        """
        raise NotImplementedError

    # -- the table layer behind lookup -----------------------------------------------------------------

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
        self,
        node: Node,
        units: LookupUnits,
        x_ids: np.ndarray,
        local: np.ndarray,
        *,
        stage: int,
        streamed: bool = False,
    ) -> tuple[np.ndarray, Layer]:
        """The layer module of ``units`` for ``node``: one instance of every unit at each of ``local``'s rows
        (positions; each row lists the elements of ``x_ids`` a position reads); its output signal's ids in the
        node's element order (C order over channels and positions) and the block, appended to the netlist.
        ``streamed``: the instances serve every position in turn, so ``local`` has one row and the output is
        one position's channels."""
        netlist, index = self.netlist, units.index
        positions = local.shape[0]
        alive = self.live_instances(node, units, positions, streamed=streamed)
        instances, placed, lsbs, widths, channel_of = [], [], [], [], []
        dead: list[tuple[int, int, int]] = []  # (channel, position, bits) of the outputs of units left out
        offset = 0
        for u, table in enumerate(units.tables):
            if not alive[u].any():
                width = layout_of(table, what=f"export: layer {units.layer!r} unit {u}").output_width
                dead += [(c, p, width) for p in range(positions) for c in units.channels[u]]
                continue
            module = self.module(table, units.layer, u, index)
            layout = netlist.modules[module].layout
            columns = units.index_map[u, : table.fan_in]
            for p in range(positions):
                if not alive[u, p]:
                    dead += [(c, p, layout.output_width) for c in units.channels[u]]
                    continue
                instances.append((f"u{u}_p{p}", module, local[p, columns].tolist()))
                placed.append((u, p))
                lsbs.append(offset)
                for j, channel in enumerate(units.channels[u]):
                    widths.append(layout.output_width)
                    channel_of.append((channel, p, offset + layout.output_offsets[j]))
                offset += layout.code_bits
        # The output's elements, C order: channel c at position p sits where its instance put it (the
        # signal holds the instances' outputs in that order; the outputs of units left out are constant 0).
        places = [(c, p) for c, p, _ in channel_of] + [(c, p) for c, p, _ in dead]
        element = _channels(places) if streamed else _output_index(node, places)
        latency = max((self.table_latency.get(m, 0) for _, m, _ in instances), default=0)
        written, unused = element[: len(channel_of)], element[len(channel_of) :]
        order = np.argsort(written, kind="stable")
        signal = netlist.signal(
            f"layer{index}_y",
            np.asarray(widths, np.int64)[order],
            stage=stage + latency,
            lsb=np.asarray([bit for _, _, bit in channel_of], np.int64)[order],
        )
        ids = np.empty(len(places), np.int64)
        ids[written[order]] = signal
        ids[unused] = netlist.constants(np.array([w for _, _, w in dead], np.int64), np.zeros(len(dead), np.int64))
        unit_of = {c: u for u, written_channels in enumerate(units.channels) for c in written_channels}
        for k, (c, p, _) in enumerate(channel_of):
            where = "" if streamed else f" position {p}"
            netlist.origin[int(ids[element[k]])] = f"node '{node.name}' unit {unit_of[c]}{where}"
        block = Layer(
            f"{netlist.top}_layer{index}", node.name, units.layer, x_ids, netlist.width[x_ids], instances, placed,
            np.asarray(lsbs, np.int64), offset, len(netlist.signals) - 1, units=len(units.tables),
            kind=node.kind.value, latency=latency,
        )  # fmt: skip
        netlist.blocks.append(block)
        return ids, block

    def live_instances(self, node: Node, units: LookupUnits, positions: int, *, streamed: bool) -> np.ndarray:
        """``(units, positions)``: whether the instance of each unit at each position has a live output (every one
        with ``keep_dead``). Streamed, one instance serves every position: live where any position is. A layer
        with no live instance at all is kept whole (nothing live reads it; its hardware stays as it was)."""
        alive = np.ones((len(units.tables), positions), dtype=bool)
        live = None if self.live is None else self.live.elements.get(node.name)
        channels = sum(map(len, units.channels))
        if live is None or node.channels != channels or (not streamed and live.size != channels * positions):
            return alive  # a layer whose outputs are not the node's channels: built whole
        by_position = channel_positions(node, live)  # (node positions, channels)
        for u, written in enumerate(units.channels):
            seen = by_position[:, list(written)].any(axis=1)
            alive[u] = seen.any() if streamed else seen
        return alive if alive.any() else np.ones_like(alive)

    def lookup_units(
        self,
        node: Node,
        tables: Sequence[IOTable],
        index_map: np.ndarray,
        channels: Sequence[Sequence[int]] | None,
        layer: str | None,
    ) -> LookupUnits:
        """The arguments of :meth:`lookup` checked, numbered as the next table layer."""
        tables = list(tables)
        index_map = np.asarray(index_map, dtype=np.int64)
        name = node.name if layer is None else layer
        if index_map.ndim != 2 or index_map.shape[0] != len(tables):
            msg = (
                f"lookup for node {node.name!r}: index_map must have one row per table ({len(tables)}), "
                f"received shape {index_map.shape}"
            )
            raise HDLError(msg)
        for u, table in enumerate(tables):
            if table.fan_in > index_map.shape[1] or (index_map[u, : table.fan_in] < 0).any():
                msg = (
                    f"lookup for node {node.name!r}: table {u} reads {table.fan_in} inputs; index_map row {u} "
                    f"must name that many elements (>= 0), received {index_map[u].tolist()}"
                )
                raise HDLError(msg)
        if channels is None:
            starts = np.concatenate([[0], np.cumsum([t.fan_out for t in tables])]).astype(int)
            channels = [tuple(range(starts[u], starts[u + 1])) for u in range(len(tables))]
        elif len(channels) != len(tables) or any(len(c) != t.fan_out for c, t in zip(channels, tables)):
            msg = (
                f"lookup for node {node.name!r}: channels must list each table's {[t.fan_out for t in tables]} outputs"
            )
            raise HDLError(msg)
        index = self.table_count
        self.table_count += 1
        return LookupUnits(index, name, tables, index_map, [tuple(int(c) for c in cs) for cs in channels])

    def check_reads(self, node: Node, units: LookupUnits, width: int) -> None:
        """Refuse an index map that reads past the ``width`` elements of a vector."""
        for u, table in enumerate(units.tables):
            if (units.index_map[u, : table.fan_in] >= width).any():
                msg = (
                    f"lookup for node {node.name!r}: index_map row {u} reads {units.index_map[u].tolist()}; a "
                    f"vector has {width} elements"
                )
                raise HDLError(msg)


@dataclass(frozen=True)
class LookupUnits:
    """One table layer of :meth:`Builder.lookup`: its number, name, tables, index map and output channels."""

    index: int
    layer: str
    tables: list[IOTable]
    index_map: np.ndarray
    channels: list[tuple[int, ...]]


def _channels(places: list[tuple[int, int]]) -> np.ndarray:
    """Elements in channel order (one position: the output's elements are its channels)."""
    return np.array([c for c, _ in places], dtype=np.int64)


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
