"""A table network as a streaming netlist: pixels in raster order, line buffers, units shared across positions.

:class:`StreamingBuilder` (sharing :class:`~iotable.hdl.builder.Builder`'s element store, table modules and
layer modules with the unrolled style) calls each node kind's
:meth:`~iotable.graph.kind.NodeKindDef.streaming`, which gives the node a :class:`Stream`: the element ids of
**one beat** (one pixel: a position's channels, or a window vector, or a whole flat tensor)
and the handshake that beat moves on. Between handshakes sit *stages*, clocked blocks with a valid/ready
pair on each side:

- a :class:`~iotable.hdl.netlist.PadStage` per pad node: it emits the padded frame in raster order, taking a
  pixel from its input inside the frame and sending the pad codes outside it (zeros padding: each channel's
  code of 0);
- a :class:`~iotable.hdl.netlist.WindowStage` per window node (and per max-pool): a line buffer of exactly
  the window's buffer depth (a shift register when small, else each kernel row's span in registers and the
  pixels between rows in a memory addressed by a counter); when the pixel it takes completes a window at an
  output position (the stride and dilation say which), the window is valid, its elements read from the
  buffer's taps;
- a :class:`~iotable.hdl.netlist.RegisterStage` after every ``pipeline``-th table layer.

Table layers (:meth:`StreamingBuilder.lookup`), pool nodes and arithmetic (sums, argmax, thresholds on a flat
tensor or per pixel: :meth:`StreamingBuilder.beat_map`) are combinational blocks on the beat of the stage
before them: a layer module with one instance of every unit (shared by all positions), a module of comparator
trees, of adder trees, of comparisons. A flat tensor is a frame
of one position; a 1-D sequence a frame of one row. What a stream cannot carry without a frame-sized buffer
(fan-out, joins, reading a whole frame as one vector, padding that copies pixels not yet received) is
refused by name (:meth:`StreamingBuilder.refuse`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import HDLError
from ..graph.graph import Node
from ..graph.kind import NodeKindDef
from ..graph.nodes import ElementOrder, window_buffer_depth
from ..table import IOTable
from .builder import Builder, element_widths
from .netlist import MEMORY_WORDS, Netlist, PadStage, RegisterStage, Style, WindowStage

__all__ = ["Stream", "StreamingBuilder", "beats_of", "from_beats"]


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


class StreamingBuilder(Builder):
    """The walk of the streaming style: node results are :class:`Stream` s.

    Besides :class:`~iotable.hdl.builder.Builder`'s, what a kind streams with: :meth:`stream` (a stream value),
    :meth:`read` (the stream a node reads, refusing a flattened frame), :meth:`refuse`, :meth:`frame`,
    :meth:`pixel_widths`, :meth:`pad_stage`, :meth:`window_stage`, :meth:`register_stage`, :meth:`beat_map`
    (an arithmetic node's per-output reads as reads of one beat), and
    :attr:`flattened` (the streams that a reshape turned into one vector of a whole frame).
    """

    style: ClassVar[Style] = Style.STREAMING

    def __init__(self, graph: Any, layers: dict[str, Any], *, top: str, pipeline: int, **options: Any) -> None:
        super().__init__(graph, layers, top=top, pipeline=pipeline, **options)
        self.flattened: dict[str, str] = {}  # node -> the node whose frame it stands for as one vector
        self.window_count = 0
        self.pad_count = 0

    def build(self, kind: NodeKindDef, node: Node, inputs: Sequence[Any]) -> Any:
        return kind.streaming(self, node, inputs)

    def finish(self) -> Netlist:
        """The netlist after the walk: its output the beat of the last hardware node's stream, on its handshake."""
        netlist = self.netlist
        stream = self.values[self.cut]
        assert isinstance(stream, Stream)
        netlist.output_ids = stream.ids
        netlist.output_node = self.flattened.get(self.cut, self.cut)
        netlist.latency = sum(1 for s in netlist.stages if not isinstance(s, PadStage))
        netlist.last, netlist.out_beats = stream.handshake, stream.beats
        return netlist

    def handshake(self, beats: int) -> int:
        """A new handshake moving ``beats`` words per sample; returns its index."""
        self.netlist.beats.append(beats)
        return len(self.netlist.beats) - 1

    # -- what a kind streams with ------------------------------------------------------------------------

    def stream(self, handshake: int, ids: np.ndarray, frame: tuple[int, int]) -> Stream:
        """A :class:`Stream`: one beat's element ids, the handshake they move on, the frame."""
        return Stream(handshake, ids, frame)

    def refuse(self, node: Node, what: str) -> HDLError:
        """The refusal of a node this style cannot build because of ``what`` (raise it)."""
        msg = (
            f"style 'streaming' cannot build node {node.name!r} ({node.kind.value}): {what}; export with "
            "style='unrolled', or leave the layers from there on to software (host=)"
        )
        return HDLError(msg)

    def read(self, node: Node, stream: Any) -> Stream:
        """The stream a node reads, refusing a frame that a reshape flattened into one vector."""
        producer = self.graph.inputs(node.name)[0]
        if producer in self.flattened:
            raise self.refuse(node, f"it reads node {producer!r}, a whole frame as one vector (a frame buffer)")
        assert isinstance(stream, Stream)
        return stream

    def frame(self, node: Node) -> tuple[int, int]:
        """The frame of ``node``'s output: (rows, columns) of positions; ``(1, L)`` in 1-D, ``(1, 1)`` flat."""
        return _frame(node)

    def pixel_widths(self, node: Node) -> np.ndarray:
        """Bits of each code of one beat of ``node``: its channels (a whole flat tensor: all its elements)."""
        return _pixel_widths(node)

    def pad_stage(
        self,
        node: str,
        stream: Stream,
        before: tuple[int, ...],
        after: tuple[int, ...],
        codes: tuple[int, ...],
        widths: np.ndarray,
    ) -> Stream:
        """A :class:`~.netlist.PadStage`: ``before``/``after`` pad positions per axis (1-D: the columns')
        around the frame of ``stream``, each channel's pad code ``codes``; the padded stream."""
        return _pad_stage(self, node, stream, _axes2(before, 0), _axes2(after, 0), codes, widths)

    def window_stage(
        self,
        node: str,
        stream: Stream,
        kernel: tuple[int, ...],
        stride: tuple[int, ...],
        dilation: tuple[int, ...],
        order: ElementOrder,
        buffer_depth: int | None = None,
    ) -> Stream:
        """A :class:`~.netlist.WindowStage`, a line buffer of ``buffer_depth`` codes (default: the least the
        window needs over the frame); the stream of window vectors, in ``order``."""
        if buffer_depth is None:
            channels = len(stream.ids)
            buffer_depth = window_buffer_depth(_axes2(kernel, 1), _axes2(dilation, 1), stream.frame, channels)
        return _window_stage(self, node, stream, kernel, stride, dilation, order, buffer_depth)

    def register_stage(self, node: str, stream: Stream, name: str) -> Stream:
        """A :class:`~.netlist.RegisterStage` on ``stream`` (its signal ``<name>_q``); the registered stream."""
        target = self.handshake(self.netlist.beats[stream.handshake])
        ids = self.netlist.signal(f"{name}_q", self.netlist.width[stream.ids], stage=0)
        self.netlist.stages.append(
            RegisterStage(
                name=f"{self.netlist.top}_{name}_reg",
                node=node,
                source=stream.handshake,
                target=target,
                x_ids=stream.ids,
                output=len(self.netlist.signals) - 1,
            )
        )
        return Stream(target, ids, stream.frame)

    def beat_map(
        self, node: Node, stream: Stream, rows: np.ndarray, *fields: np.ndarray
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """For a node whose output element ``k`` reads the elements ``rows[k]`` of its producer (flat indices,
        ``-1`` pads): the rows of one beat, as indices into a beat of ``stream``, one per channel of the node's
        beat, and each of ``fields`` (per output element, like ``rows``) at the first position. Refuses the
        node (raises) where an output reads another position than its own (that needs a frame buffer), or
        where positions differ in what they read or in a field (one instance serves every position)."""
        producer = self.graph.producers(node.name)[0]
        if self.frame(node) != stream.frame:
            what = f"its outputs gather a frame of {stream.frame} positions into {self.frame(node)} (a frame buffer)"
            raise self.refuse(node, what)
        size = int(np.prod(producer.shape))
        if stream.beats == 1 and len(stream.ids) == size:  # one word holds the whole tensor, whatever its view
            inside = np.arange(size).reshape(1, size)
        else:
            inside = beats_of(np.arange(size).reshape(1, *producer.shape), producer)
        outside = beats_of(np.arange(int(np.prod(node.shape))).reshape(1, *node.shape), node)
        position = np.empty(inside.size, np.int64)
        channel = np.empty(inside.size, np.int64)
        position[inside] = np.arange(inside.shape[0])[:, None]
        channel[inside] = np.arange(inside.shape[1])[None, :]
        rows = np.asarray(rows, np.int64)[outside]  # (positions, channels, terms)
        pads = rows < 0
        safe = np.where(pads, 0, rows)
        if np.any((position[safe] != np.arange(rows.shape[0])[:, None, None]) & ~pads):
            raise self.refuse(node, "an output reads elements of other positions than its own (a frame buffer)")
        local = np.where(pads, -1, channel[safe])
        if np.any(local != local[:1]):
            raise self.refuse(node, "its positions read their pixels' channels differently (one instance serves all)")
        values = [np.asarray(f)[outside] for f in fields]
        if any(np.any(v != v[:1]) for v in values):
            raise self.refuse(node, "its constants differ between positions (one instance serves all)")
        return local[0], [v[0] for v in values]

    # -- the style's side of the arithmetic blocks -----------------------------------------------------

    def output_widths(self, node: Node) -> np.ndarray:
        return _pixel_widths(node)

    def arith_in(self, x: Any) -> tuple[np.ndarray, Any]:
        assert isinstance(x, Stream)
        return x.ids, x

    def arith_align(self, ids: np.ndarray) -> tuple[np.ndarray, int]:
        return ids, 0

    def arith_step(self, node: Node, operands: np.ndarray, ids: np.ndarray, carry: Any) -> tuple[np.ndarray, Any]:
        """A register stage on the whole beat (the block's output and the operands passed on)."""
        if not self.layer_done():
            return operands, carry
        name = self.netlist.signals[int(self.netlist.sig[ids[0]])].name[: -len("_y")] if ids.size else node.name
        stream = self.register_stage(node.name, Stream(carry.handshake, operands, carry.frame), name)
        return stream.ids, stream

    def arith_out(self, node: Node, ids: np.ndarray, carry: Any) -> Any:
        return Stream(carry.handshake, ids, carry.frame)

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
        if positions is not None:
            msg = f"lookup for node {node.name!r}: a stream's positions are its beats; pass no positions"
            raise HDLError(msg)
        stream = x
        assert isinstance(stream, Stream)
        units = self.lookup_units(node, tables, index_map, channels, layer)
        self.check_reads(node, units, len(stream.ids))
        local = np.arange(len(stream.ids), dtype=np.int64).reshape(1, -1)
        ids, block = self.layer_block(node, units, stream.ids, local, stage=0, streamed=True)
        result = Stream(stream.handshake, ids, stream.frame)
        if self.layer_done():
            result = self.register_stage(node.name, result, f"layer{units.index}")
            block.register_bits = int(self.netlist.width[result.ids].sum())
        return result


def _pad_stage(
    b: StreamingBuilder,
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


def _window_stage(
    b: StreamingBuilder,
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
    taps = b.netlist.signal(f"window{index}_taps", np.tile(pixel, kh * kw), stage=0)
    out_rows = (rows - dh * (kh - 1) - 1) // sh + 1
    out_columns = (columns - dw * (kw - 1) - 1) // sw + 1
    target = b.handshake(out_rows * out_columns)
    span = (kw - 1) * dw + 1
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
            kernel=(kh, kw),
            dilation=(dh, dw),
            memory=kh > 1 and dh * columns - span >= MEMORY_WORDS,
        )
    )
    # The stage's output holds tap t (row-major over the kernel) at pixel t, channel c at element t*C + c.
    place = np.arange(kh * kw)[None, :] * channels + np.arange(channels)[:, None]  # (C, T)
    vector = place.reshape(-1) if order is ElementOrder.CHANNEL_MAJOR else place.T.reshape(-1)
    return Stream(target, taps[vector], (out_rows, out_columns))


def _pixel_widths(node: Node) -> np.ndarray:
    """Bits of each code of one beat of ``node``: its channels (a whole flat tensor: all its elements)."""
    widths = element_widths(node)
    if not node.spatial_size:
        return widths.reshape(-1)
    axis = widths.ndim - 1 if node.layout is not None and node.layout.channels_last else 0
    return np.moveaxis(widths, axis, 0).reshape(widths.shape[axis], -1)[:, 0]
