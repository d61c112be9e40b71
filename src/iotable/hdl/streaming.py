"""A table network as a streaming netlist: pixels in raster order, line buffers, units shared across positions.

:data:`BUILDERS` holds one function per node kind that the :class:`~iotable.hdl.builder.Builder` walk (shared
with the unrolled style: its element store, table modules and layer modules) calls, giving every node a
:class:`Stream`: the
element ids of **one beat** (one pixel: a position's channels, or a window vector, or a whole flat tensor)
and the handshake that beat moves on. Between handshakes sit *stages*, clocked blocks with a valid/ready
pair on each side:

- a :class:`~iotable.hdl.netlist.PadStage` per pad node: it emits the padded frame in raster order, taking a
  pixel from its input inside the frame and sending the pad codes outside it (zeros padding: each channel's code
  of 0);
- a :class:`~iotable.hdl.netlist.WindowStage` per window node (and per max-pool): a shift register of exactly
  the window's buffer depth; when the pixel it takes completes a window at an output position (the stride and
  dilation say which), the window is valid, its elements read from the register's taps;
- a :class:`~iotable.hdl.netlist.RegisterStage` after every ``pipeline``-th table layer.

Table and pool nodes are combinational blocks on the beat of the stage before them: a layer module with one
instance of every unit (shared by all positions) and a module of comparator trees. A flat tensor is a frame
of one position; a 1-D sequence a frame of one row. What a stream cannot carry without a frame-sized buffer
(fan-out, joins, reading a whole frame as one vector, padding that copies pixels not yet received) is
refused by name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import HDLError
from ..front.spec import PaddingMode
from ..graph.graph import Node, NodeKind
from ..graph.nodes import ElementOrder, PadMeta, PoolMeta, TableMeta, WindowMeta, window_buffer_depth
from .builder import Builder, NodeBuilder, element_widths
from .netlist import Netlist, PadStage, Pool, RegisterStage, WindowStage

__all__ = ["BUILDERS", "Stream", "beats_of", "finish", "from_beats"]


@dataclass(frozen=True)
class Stream:
    """The beats of one node's tensor: the ids of one beat's elements, the handshake they move on, the frame."""

    handshake: int
    ids: np.ndarray
    frame: tuple[int, int]  # (rows, columns) of positions per sample; (1, L) in 1-D, (1, 1) for a flat tensor

    @property
    def beats(self) -> int:
        """Beats per sample."""
        return self.frame[0] * self.frame[1]


def _frame(node: Node) -> tuple[int, int]:
    spatial = node.spatial_size
    if not spatial:
        return (1, 1)
    return (1, spatial[0]) if len(spatial) == 1 else (spatial[0], spatial[1])


def _axes2(values: tuple[int, ...], fill: int) -> tuple[int, int]:
    """Per-axis values as (rows, columns): a 1-D value is the columns'."""
    return (fill, values[0]) if len(values) == 1 else (values[0], values[1])


def _completing(size: int, kernel: int, stride: int, dilation: int) -> tuple[bool, ...]:
    """Of ``size`` input places along an axis, those where a window at a (strided) output position ends."""
    span = dilation * (kernel - 1)
    outputs = (size - span - 1) // stride + 1
    ends = {p * stride + span for p in range(max(outputs, 0))}
    return tuple(i in ends for i in range(size))


def beats_of(codes: np.ndarray, node: Node) -> np.ndarray:
    """A batch of ``node``'s tensors ``(N, *shape)`` as beats ``(N * positions, channels)``, positions in raster
    order."""
    n = codes.shape[0]
    if not node.spatial_size:
        return codes.reshape(n, -1)
    channels = node.channels
    if node.layout is not None and node.layout.channels_last:
        return codes.reshape(-1, channels)
    return np.moveaxis(codes.reshape(n, channels, -1), 1, 2).reshape(-1, channels)


def from_beats(beats: np.ndarray, node: Node, n: int) -> np.ndarray:
    """The inverse of :func:`beats_of`: beats back to ``(n, *shape)``."""
    if not node.spatial_size:
        return beats.reshape(n, *node.shape)
    channels = node.channels
    if node.layout is not None and node.layout.channels_last:
        return beats.reshape(n, *node.shape)
    return np.moveaxis(beats.reshape(n, -1, channels), 2, 1).reshape(n, *node.shape)


def finish(b: Builder) -> Netlist:
    """The netlist after the walk: its output the beat of the last hardware node's stream, on its handshake."""
    netlist = b.netlist
    stream = b.values[b.cut]
    assert isinstance(stream, Stream)
    netlist.output_ids = stream.ids
    netlist.output_node = b.flattened.get(b.cut, b.cut)
    netlist.latency = sum(1 for s in netlist.stages if not isinstance(s, PadStage))
    netlist.last, netlist.out_beats = stream.handshake, stream.beats
    return netlist


def _refuse(node: Node, what: str) -> HDLError:
    msg = (
        f"style 'streaming' cannot build node {node.name!r} ({node.kind.value}): {what}; export with "
        "style='unrolled', or leave the layers from there on to software (host=)"
    )
    return HDLError(msg)


def _stream_of(b: Builder, node: Node, stream: Any) -> Stream:
    """The stream a node reads, refusing a frame that a reshape flattened into one vector."""
    producer = b.graph.inputs(node.name)[0]
    if producer in b.flattened:
        raise _refuse(node, f"it reads node {producer!r}, a whole frame as one vector (a frame buffer)")
    assert isinstance(stream, Stream)
    return stream


def _input(b: Builder, node: Node, inputs: Sequence[Any]) -> Stream:
    widths = _pixel_widths(node)
    ids = b.netlist.signal("in_data", widths, stage=0)
    b.netlist.input_ids, b.netlist.input_node = ids, node.name
    frame = _frame(node)
    b.netlist.beats[0] = frame[0] * frame[1]
    return Stream(0, ids, frame)


def _reshape(b: Builder, node: Node, inputs: Sequence[Any]) -> Stream:
    stream = inputs[0]
    assert isinstance(stream, Stream)
    producer = b.graph.inputs(node.name)[0]
    if stream.beats > 1 or producer in b.flattened:
        b.flattened[node.name] = b.flattened.get(producer, producer)
    return stream


def _duplicate(b: Builder, node: Node, inputs: Sequence[Any]) -> Stream:
    raise _refuse(node, "a stream read by several consumers needs buffers that keep them in step")


def _join(b: Builder, node: Node, inputs: Sequence[Any]) -> Stream:
    raise _refuse(node, "joining streams needs buffers that keep them in step")


def _pad(b: Builder, node: Node, inputs: Sequence[Any]) -> Stream:
    meta = node.meta
    assert isinstance(meta, PadMeta)  # a checked graph
    stream = _stream_of(b, node, inputs[0])
    if meta.mode is not PaddingMode.ZEROS or meta.pad_codes is None:
        raise _refuse(
            node, f"padding mode {meta.mode.value!r} copies pixels that have not arrived yet; only 'zeros' streams"
        )
    before = _axes2(tuple(b for b, _ in meta.padding), 0)
    after = _axes2(tuple(a for _, a in meta.padding), 0)
    widths = b.netlist.width[stream.ids]
    return _pad_stage(b, node.name, stream, before, after, tuple(int(c) for c in meta.pad_codes), widths)


def _pad_stage(
    b: Builder,
    node: str,
    stream: Stream,
    before: tuple[int, int],
    after: tuple[int, int],
    codes: tuple[int, ...],
    widths: np.ndarray,
) -> Stream:
    (rows, columns), index = stream.frame, b.pad_count
    b.pad_count += 1
    frame = (before[0] + rows + after[0], before[1] + columns + after[1])
    target = b.handshake(frame[0] * frame[1])
    ids = b.netlist.signal(f"pad{index}_y", widths, stage=0)
    b.netlist.stages.append(
        PadStage(
            name=f"{b.netlist.top}_pad{index}",
            node=node,
            source=stream.handshake,
            target=target,
            x_ids=stream.ids,
            output=len(b.netlist.signals) - 1,
            frame=frame,
            rows=tuple(before[0] <= r < before[0] + rows for r in range(frame[0])),
            columns=tuple(before[1] <= c < before[1] + columns for c in range(frame[1])),
            widths=tuple(int(w) for w in widths),
            codes=codes,
        )
    )
    return Stream(target, ids, frame)


def _window(b: Builder, node: Node, inputs: Sequence[Any]) -> Stream:
    meta = node.meta
    assert isinstance(meta, WindowMeta)  # a checked graph
    stream = _stream_of(b, node, inputs[0])
    if meta.buffer_depth % max(meta.channels, 1) or meta.channels != len(stream.ids):
        raise _refuse(node, f"its {meta.channels} channels are not the {len(stream.ids)} codes of a pixel")
    return _window_stage(
        b, node.name, stream, meta.kernel, meta.stride, meta.dilation, meta.element_order, meta.buffer_depth
    )


def _window_stage(
    b: Builder,
    node: str,
    stream: Stream,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
    order: ElementOrder,
    buffer_depth: int,
) -> Stream:
    channels = len(stream.ids)
    (kh, kw), (sh, sw), (dh, dw) = _axes2(kernel, 1), _axes2(stride, 1), _axes2(dilation, 1)
    rows, columns = stream.frame
    depth = buffer_depth // channels
    if depth != (kh - 1) * dh * columns + (kw - 1) * dw + 1:
        raise HDLError(f"node {node!r} has a buffer depth {buffer_depth} that does not fit its frame")
    index = b.window_count
    b.window_count += 1
    pixel = b.netlist.width[stream.ids]
    taps = b.netlist.signal(f"window{index}_taps", np.tile(pixel, depth), stage=0)
    out_rows = (rows - dh * (kh - 1) - 1) // sh + 1
    out_columns = (columns - dw * (kw - 1) - 1) // sw + 1
    target = b.handshake(out_rows * out_columns)
    b.netlist.stages.append(
        WindowStage(
            name=f"{b.netlist.top}_window{index}",
            node=node,
            source=stream.handshake,
            target=target,
            x_ids=stream.ids,
            output=len(b.netlist.signals) - 1,
            frame=stream.frame,
            rows=_completing(rows, kh, sh, dh),
            columns=_completing(columns, kw, sw, dw),
            depth=depth,
            pixel=int(pixel.sum()),
        )
    )
    # Tap (ky, kx), row-major over the kernel, is the pixel (kh-1-ky)*dh rows and (kw-1-kx)*dw columns
    # before the one that completed the window.
    ky, kx = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    back = ((kh - 1 - ky) * dh * columns + (kw - 1 - kx) * dw).reshape(-1)  # (T,)
    place = back[None, :] * channels + np.arange(channels)[:, None]  # (C, T)
    vector = place.reshape(-1) if order is ElementOrder.CHANNEL_MAJOR else place.T.reshape(-1)
    return Stream(target, taps[vector], (out_rows, out_columns))


def _table(b: Builder, node: Node, inputs: Sequence[Any]) -> Stream:
    meta = node.meta
    assert isinstance(meta, TableMeta)  # a checked graph
    stream = _stream_of(b, node, inputs[0])
    producer = b.graph.producers(node.name)[0]
    if stream.beats > 1 and producer.kind is not NodeKind.WINDOW:
        raise _refuse(node, "a table over a frame streams only behind a window")
    index = b.table_count
    b.table_count += 1
    local = np.arange(len(stream.ids), dtype=np.int64).reshape(1, -1)
    ids, block = b.layer_block(node, index, stream.ids, local, stage=0, streamed=True)
    result = Stream(stream.handshake, ids, stream.frame)
    if b.pipeline and (index + 1) % b.pipeline == 0:
        result = _register(b, node.name, result, f"layer{index}")
        block.register_bits = int(b.netlist.width[result.ids].sum())
    return result


def _register(b: Builder, node: str, stream: Stream, name: str) -> Stream:
    target = b.handshake(b.netlist.beats[stream.handshake])
    ids = b.netlist.signal(f"{name}_q", b.netlist.width[stream.ids], stage=0)
    b.netlist.stages.append(
        RegisterStage(
            name=f"{b.netlist.top}_{name}_reg",
            node=node,
            source=stream.handshake,
            target=target,
            x_ids=stream.ids,
            output=len(b.netlist.signals) - 1,
        )
    )
    return Stream(target, ids, stream.frame)


def _pool(b: Builder, node: Node, inputs: Sequence[Any]) -> Stream:
    meta = node.meta
    assert isinstance(meta, PoolMeta)  # a checked graph
    stream = _stream_of(b, node, inputs[0])
    if meta.ceil_mode:
        raise _refuse(node, "ceil_mode windows may start past the frame's end")
    channels, index = len(stream.ids), b.pool_count
    b.pool_count += 1
    widths = b.netlist.width[stream.ids]
    if any(meta.padding):
        # Code 0 is the smallest value, and every window of a max-pool holds an input element (torch
        # bounds the padding by half the kernel): padding with code 0 leaves every maximum as it is.
        pad = _axes2(meta.padding, 0)
        stream = _pad_stage(b, node.name, stream, pad, pad, (0,) * channels, widths)
    kernel = _axes2(meta.kernel_size, 1)
    dilation = _axes2(meta.dilation, 1)
    depth = window_buffer_depth(kernel, dilation, stream.frame, channels)
    window = _window_stage(
        b, node.name, stream, meta.kernel_size, meta.stride, meta.dilation, ElementOrder.CHANNEL_MAJOR, depth
    )
    taps = math.prod(meta.kernel_size)
    maxima = [list(range(c * taps, (c + 1) * taps)) for c in range(channels)]
    ids = b.netlist.signal(f"pool{index}_y", widths, stage=0)
    for c in range(channels):
        b.netlist.origin[int(ids[c])] = f"node '{node.name}' channel {c}"
    b.netlist.blocks.append(
        Pool(f"{b.netlist.top}_pool{index}", node.name, window.ids, b.netlist.width[window.ids], maxima,
             widths, len(b.netlist.signals) - 1)
    )  # fmt: skip
    return Stream(window.handshake, ids, window.frame)


def _pixel_widths(node: Node) -> np.ndarray:
    """Bits of each code of one beat of ``node``: its channels (a whole flat tensor: all its elements)."""
    widths = element_widths(node)
    if not node.spatial_size:
        return widths.reshape(-1)
    axis = widths.ndim - 1 if node.layout is not None and node.layout.channels_last else 0
    return np.moveaxis(widths, axis, 0).reshape(widths.shape[axis], -1)[:, 0]


#: The streaming builder of each node kind.
BUILDERS: Mapping[NodeKind, NodeBuilder] = {
    NodeKind.INPUT: _input,
    NodeKind.RESHAPE: _reshape,
    NodeKind.DUPLICATE: _duplicate,
    NodeKind.JOIN: _join,
    NodeKind.PAD: _pad,
    NodeKind.WINDOW: _window,
    NodeKind.TABLE: _table,
    NodeKind.POOL: _pool,
}
