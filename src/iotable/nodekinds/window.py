"""The ``window`` node: a sliding window, one window vector per output position."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..errors import GraphError
from ..graph.fields import codes_in, int_field, ints_field, is_int, node_where, split_channels
from ..graph.graph import dims
from ..graph.kind import Kernel, MetaDecoder, NodeKindDef, register
from ..graph.liveness import window_gather
from ..graph.nodes import Edge, ElementOrder, Meta, Node, WindowMeta, window_buffer_depth
from ..runtime.codes import FLOAT32_EXACT


def _check_window(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    producer, where, meta = producers[0], node_where(node), node.meta
    assert isinstance(meta, WindowMeta)  # _check_fields
    codes_in(node, producer)
    layout = node.layout
    if layout is None or layout.spatial_rank == 0 or layout != producer.layout:
        msg = (
            f"{where}: layout {layout} must be the spatial layout of the input it reads, {producer.name!r}'s "
            f"{producer.layout}"
        )
        raise GraphError(msg)
    rank = layout.spatial_rank
    kernel = ints_field(meta.kernel, f"{where}: meta.kernel", minimum=1, length=rank)
    stride = ints_field(meta.stride, f"{where}: meta.stride", minimum=1, length=rank)
    dilation = ints_field(meta.dilation, f"{where}: meta.dilation", minimum=1, length=rank)
    channels = int_field(meta.channels, f"{where}: meta.channels", minimum=1)
    order = ElementOrder.of(layout)
    if meta.element_order is not order:
        got = getattr(meta.element_order, "value", meta.element_order)
        msg = f"{where}: meta.element_order is {got!r}; a {layout.value} window is {order.value!r}"
        raise GraphError(msg)
    if split_channels(producer.shape, layout)[0] != channels:
        msg = f"{where}: reads {producer.name!r} of shape {producer.shape} as {layout.value} with {channels} channel(s)"
        raise GraphError(msg)
    size = split_channels(producer.shape, layout)[1]
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
    if not is_int(meta.buffer_depth) or meta.buffer_depth != depth:
        msg = (
            f"{where}: meta.buffer_depth is {meta.buffer_depth!r}; a kernel {kernel} with dilation {dilation} over "
            f"{size} x {channels} channel(s) buffers {depth} elements (iotable.graph.window_buffer_depth)"
        )
        raise GraphError(msg)


def _compile(runtime: Any, node: Node) -> Kernel:
    """Window vectors at every position, in the window's element order, copied once from unfold views."""
    meta = node.meta
    assert isinstance(meta, WindowMeta) and node.layout is not None  # a checked graph
    kernel_size, stride, dilation = meta.kernel, meta.stride, meta.dilation
    channels_last = node.layout.channels_last
    channel_major = meta.element_order is ElementOrder.CHANNEL_MAJOR
    rank, width = len(kernel_size), node.shape[-1]
    spatial_axes, kernel_axes = tuple(range(2, 2 + rank)), tuple(range(2 + rank, 2 + 2 * rank))
    vector_axes = (1, *kernel_axes) if channel_major else (*kernel_axes, 1)
    domains = runtime.graph.producers(node.name)[0].channel_domains() or ()
    narrow = max((len(d) for d in domains), default=0) <= FLOAT32_EXACT

    def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
        x = xs[0]
        if channels_last:
            x = torch.movedim(x, -1, 1)
        if narrow and x.element_size() > 4:  # int64 input codes: half the bytes to copy, exactly
            x = x.to(torch.float32)
        n = x.shape[0]
        for axis in range(rank):
            span = (kernel_size[axis] - 1) * dilation[axis] + 1
            x = x.unfold(2 + axis, span, stride[axis])
        taps: tuple[Any, ...] = (Ellipsis, *(slice(None, None, d) for d in dilation))
        x = x[taps]  # (N, C, *P, *K)
        positions = x.shape[2 : 2 + rank]
        # Copied vector-major, positions innermost (where the unfolded views are contiguous, many times
        # faster than a vector-innermost copy); the graph's (N, *P, vector) layout is a view of it, and
        # the table's product reads the vector-major copy in place.
        vectors = x.permute(0, *vector_axes, *spatial_axes).reshape(n, width, *positions)
        return torch.movedim(vectors, 1, -1)

    return kernel


@register
class Window(NodeKindDef):
    """A sliding window: kernel, stride, dilation, channels, element order and line-buffer depth."""

    name = "window"
    windowed = True
    meta = WindowMeta
    dot_shape = "parallelogram"
    dot_style = "margin=0.02"  # a parallelogram is wide already: no margin on top

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_window(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        return _compile(runtime, node)

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """The input elements of the live elements of window vectors."""
        meta, producer = node.meta, producers[0]
        assert isinstance(meta, WindowMeta) and node.layout is not None  # a checked graph
        gather = window_gather(producer.shape, meta, channels_last=node.layout.channels_last)
        read = np.zeros(math.prod(producer.shape), dtype=bool)
        read[gather[np.asarray(live, dtype=bool)]] = True
        return [read.reshape(producer.shape)]

    def decode(self, record: Any, where: str, codec: MetaDecoder) -> Meta:
        names = {"kernel", "stride", "dilation", "channels", "element_order", "buffer_depth"}
        values = codec.fields(record, names, where)
        values["element_order"] = codec.choice(
            ElementOrder, values["element_order"], f"{where}.element_order", "an element order"
        )
        return WindowMeta(**values)

    def row(self, node: Node) -> dict[str, Any]:
        return {"buffer": node.meta.buffer_depth, "stride": node.meta.stride}

    def label(self, node: Node) -> list[str]:
        meta = node.meta
        return [f"kernel {dims(meta.kernel)}, stride {dims(meta.stride)}"]

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Wiring: the input's elements gathered into every position's window vector."""
        meta = node.meta
        assert isinstance(meta, WindowMeta) and node.layout is not None  # a checked graph
        source = np.asarray(inputs[0])
        gather = builder.window_gather(source.shape, meta, channels_last=node.layout.channels_last)
        return source.reshape(-1)[gather]

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """A line buffer of the window's buffer depth; a window vector a beat where a window completes."""
        meta = node.meta
        assert isinstance(meta, WindowMeta)  # a checked graph
        stream = builder.read(node, inputs[0])
        if meta.buffer_depth % max(meta.channels, 1) or meta.channels != len(stream.ids):
            raise builder.refuse(node, f"its {meta.channels} channels are not the {len(stream.ids)} codes of a pixel")
        return builder.window_stage(
            node.name, stream, meta.kernel, meta.stride, meta.dilation, meta.element_order, meta.buffer_depth
        )
