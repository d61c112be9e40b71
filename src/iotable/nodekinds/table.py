"""The ``table`` node: a table layer, its units applied at every position (weight sharing).

Its checks are vectorized over all units (numpy); a Python loop over units only runs to name the first bad
one."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..domain import Domain
from ..errors import GraphError
from ..graph.fields import codes_in, element_radix_bits, index_array, int_field, ints_field, node_where, short_list
from ..graph.kind import MetaDecoder, NodeKindDef, register
from ..graph.liveness import channel_positions
from ..graph.nodes import Edge, ElementOrder, Meta, Node, NodeKind, TableMeta, WindowMeta
from ..runtime.table import TableKernel
from ..units import Unit


def _check_table(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    producer, where, meta = producers[0], node_where(node), node.meta
    assert isinstance(meta, TableMeta)  # _check_fields
    codes_in(node, producer)
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
    if len(written) != node.channels or not np.array_equal(written, np.arange(node.channels)):
        msg = (
            f"{where}: its units write output channels {short_list(written.tolist())}; expected each of its "
            f"{node.channels} channel(s) exactly once"
        )
        raise GraphError(msg)
    bits = ints_field(meta.unit_bits, f"{where}: meta.unit_bits", minimum=0, length=len(meta.units))
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
            int_field(value, f"{where}: unit {u} {field}", minimum=minimum)
        msg = f"{where}: the units' {field} fields are not integers >= {minimum}"
        raise GraphError(msg)
    return column.astype(np.int64)


def _channel_lists(units: Sequence[Unit], field: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths, flat channels)`` of every unit's ``field`` (a tuple of channel indices >= 0)."""
    lists = [getattr(u, field) for u in units]
    clean = set(map(type, lists)) == {tuple}
    if clean:
        clean = set(map(type, itertools.chain.from_iterable(lists))) <= {int, np.int64, np.int32}
    flat = np.zeros(0, np.int64)
    if clean:
        try:
            flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64)
        except OverflowError:  # past int64: named below
            clean = False
    if not clean or (flat < 0).any():
        for u, channels in enumerate(lists):
            ints_field(channels, f"{where}: unit {u} {field}", minimum=0)
        msg = f"{where}: the units' {field} are not tuples of channel indices"
        raise GraphError(msg)
    return np.fromiter(map(len, lists), dtype=np.int64, count=len(lists)), flat


def _unit_columns(node: Node, units: Any) -> dict[str, np.ndarray]:
    """The units' fields as arrays, every one typed: index, fan_in, rows, input and output channels."""
    where = node_where(node)
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
    where = f"{node_where(node)}: meta.index_map"
    fan_in = columns["fan_in"]
    width = int(fan_in.max())
    index_map = index_array(meta.index_map, where, (len(fan_in), width))
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
    radix, element_bits = element_radix_bits(producer)
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


@register
class Table(NodeKindDef):
    """A table layer: its units' tables, looked up at every position (:class:`~iotable.runtime.runtime.TableKernel`)."""

    name = "table"
    tabulated = True
    meta = TableMeta
    dot_shape = "box3d"
    dot_style = 'style=filled, fillcolor="#dce9f7"'

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_table(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> TableKernel:
        """The table layer's lookups."""
        assert isinstance(node.meta, TableMeta)  # a checked graph
        return TableKernel(node, runtime.layers[node.meta.layer], runtime.graph.producers(node.name)[0])

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """The elements each unit's index map names, at every position where one of the unit's outputs is live."""
        return [_live_reads(node, producers[0], live)]

    def decode(self, record: Any, where: str, codec: MetaDecoder) -> Meta:
        values = codec.fields(record, {"layer", "units", "unit_bits", "index_map", "modules"}, where)
        values["index_map"] = codec.index_array(values["index_map"], f"{where}.index_map", ndim=2)
        return TableMeta(**values)

    def row(self, node: Node) -> dict[str, Any]:
        meta = node.meta
        return {
            "units": len(meta.units),
            "fan_in": "/".join(map(str, sorted(set(meta.fan_ins)))),
            "bits": "/".join(map(str, sorted(set(meta.unit_bits)))),
            "rows": sum(u.rows for u in meta.units),
        }

    def label(self, node: Node) -> list[str]:
        meta = node.meta
        units = meta.units
        fan_ins = "/".join(map(str, sorted(set(meta.fan_ins))))
        bits = "/".join(map(str, sorted(set(meta.unit_bits))))
        return [
            f"{len(units)} unit{'s' if len(units) != 1 else ''}, fan-in {fan_ins}, {bits} bit",
            f"{sum(u.rows for u in units)} rows",
        ]

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """The layer's units at every position (behind a window: over the window's input, each position's
        vector gathered from it), through ``builder.lookup``."""
        meta = node.meta
        assert isinstance(meta, TableMeta)  # a checked graph
        producer = builder.graph.producers(node.name)[0]
        positions = None
        if producer.kind is NodeKind.WINDOW:
            window = producer.meta
            assert isinstance(window, WindowMeta) and producer.layout is not None
            port = builder.values[builder.graph.inputs(producer.name)[0]]
            positions = builder.window_gather(port.shape, window, channels_last=producer.layout.channels_last)
        else:
            port = np.asarray(inputs[0])
        tables, index_map, channels = _units(builder, meta)
        return builder.lookup(node, tables, index_map, port, positions=positions, channels=channels, layer=meta.layer)

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """One instance of every unit on the stream's beats (a frame only behind a window)."""
        meta = node.meta
        assert isinstance(meta, TableMeta)  # a checked graph
        stream = builder.read(node, inputs[0])
        producer = builder.graph.producers(node.name)[0]
        if stream.beats > 1 and producer.kind is not NodeKind.WINDOW:
            raise builder.refuse(node, "a table over a frame streams only behind a window")
        tables, index_map, channels = _units(builder, meta)
        return builder.lookup(node, tables, index_map, stream, channels=channels, layer=meta.layer)


def _live_reads(node: Node, producer: Node, live: np.ndarray) -> np.ndarray:
    """The producer's elements the live outputs of table node ``node`` read: a unit at a position reads its index
    map's elements of that position's vector (the window's vector behind a window, else the producer's output)
    where any of its output channels is live there."""
    meta = node.meta
    assert isinstance(meta, TableMeta)  # a checked graph
    by_position = channel_positions(node, live).astype(np.int64)  # (P, C)
    owner = np.zeros((node.channels, len(meta.units)), dtype=np.int64)  # channel -> its unit
    for unit in meta.units:
        owner[list(unit.out_channels), unit.index] = 1
    unit_live = by_position @ owner > 0  # (P, U)
    index_map = np.asarray(meta.index_map)
    vector = producer.shape[-1] if producer.kind is NodeKind.WINDOW else math.prod(producer.shape)
    reads = np.zeros((len(meta.units), vector), dtype=np.int64)  # (U, V): what each unit reads of a vector
    rows, columns = np.nonzero(index_map >= 0)
    reads[rows, index_map[rows, columns]] = 1
    return (unit_live.astype(np.int64) @ reads > 0).reshape(producer.shape)


def _units(builder: Any, meta: TableMeta) -> tuple[list[Any], np.ndarray, list[tuple[int, ...]]]:
    """A table node's units as ``builder.lookup`` reads them: their tables, index map and output channels."""
    tables = builder.layers[meta.layer].tables
    return (
        [tables[unit.index] for unit in meta.units],
        np.asarray(meta.index_map),
        [unit.out_channels for unit in meta.units],
    )
