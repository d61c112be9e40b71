"""The ``pool`` node: max-pooling of codes (codes ascend with values, so the max of codes is the code of
the max)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import GraphError
from ..graph.fields import codes_in, ints_field, node_where, same_fields
from ..graph.kind import Kernel, NodeKindDef, register
from ..graph.liveness import pool_sources
from ..graph.nodes import Edge, ElementOrder, Node, PoolMeta


def _check_pool(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    producer, where, meta = producers[0], node_where(node), node.meta
    assert isinstance(meta, PoolMeta)  # _check_fields
    codes_in(node, producer)
    same_fields(node, producer, "layout", "domain")
    if node.layout is None or node.layout.spatial_rank not in (1, 2) or node.layout.channels_last:
        msg = f"{where}: max-pools read channels-first codes of 1 or 2 spatial axes, received layout {node.layout}"
        raise GraphError(msg)
    rank = node.layout.spatial_rank
    args: dict[str, Any] = {}
    for key, low in (("kernel_size", 1), ("stride", 1), ("padding", 0), ("dilation", 1)):
        args[key] = ints_field(getattr(meta, key), f"{where}: meta.{key}", minimum=low, length=rank)
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


def _compile(runtime: Any, node: Node) -> Kernel:
    """Max-pooling of codes: strided maxima where the windows tile the input, else torch's max-pool."""
    meta = node.meta
    rank = len(node.shape) - 1
    fn = F.max_pool1d if rank == 1 else F.max_pool2d
    args = {k: getattr(meta, k) for k in ("kernel_size", "stride", "padding", "dilation", "ceil_mode")}
    size = meta.kernel_size
    if (
        size == meta.stride
        and set(meta.padding) == {0}
        and set(meta.dilation) == {1}
        and not (node.layout is not None and node.layout.channels_last)
    ):
        out = node.shape[1:]

        def tiles(xs: list[torch.Tensor]) -> torch.Tensor:
            # Windows that tile the input: the maximum of the strided views of each tap, in the codes' own
            # dtype (codes ascend with values, so the max of codes is the code of the max).
            x = xs[0]
            whole: tuple[Any, ...] = (Ellipsis, *(slice(0, o * k) for o, k in zip(out, size)))
            x = x[whole]
            if rank == 1:
                taps = [x[..., j :: size[0]] for j in range(size[0])]
            else:
                taps = [x[..., i :: size[0], j :: size[1]] for i in range(size[0]) for j in range(size[1])]
            result = taps[0]
            for tap in taps[1:]:
                result = torch.maximum(result, tap)
            return result.contiguous()

        return tiles

    def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
        # Codes ascend with values, so the max of codes is the code of the max (exact below 2**24).
        return fn(xs[0].to(torch.float32), **args).to(xs[0].dtype)

    return kernel


@register
class Pool(NodeKindDef):
    """Max-pooling of channels-first codes over 1 or 2 spatial axes, as ``torch.nn.MaxPool1d/2d``."""

    name = "pool"
    meta = PoolMeta
    dot_shape = "trapezium"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_pool(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        return _compile(runtime, node)

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """The input elements the windows of the live outputs cover."""
        meta, producer = node.meta, producers[0]
        assert isinstance(meta, PoolMeta)  # a checked graph
        channels_last = node.layout is not None and node.layout.channels_last
        sources = pool_sources(producer.shape, node.shape, meta, channels_last)
        read = np.zeros(math.prod(producer.shape), dtype=bool)
        for k in np.flatnonzero(np.asarray(live, dtype=bool)):
            read[sources[k]] = True
        return [read.reshape(producer.shape)]

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """A module of comparator trees: each output element the largest of the elements its window covers."""
        meta = node.meta
        assert isinstance(meta, PoolMeta)  # a checked graph
        source = np.asarray(inputs[0])
        channels_last = node.layout is not None and node.layout.channels_last
        x_ids, stage = builder.align(source)
        maxima = builder.pool_sources(source.shape, node.shape, meta, channels_last)
        widths = builder.netlist.width[x_ids][[m[0] for m in maxima]]
        return builder.add_pool(node, x_ids, maxima, widths, stage=stage, per="element").reshape(node.shape)

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """A pad stage (padding), a line buffer, and comparator trees over each window's channel."""
        meta = node.meta
        assert isinstance(meta, PoolMeta)  # a checked graph
        stream = builder.read(node, inputs[0])
        if meta.ceil_mode:
            raise builder.refuse(node, "ceil_mode windows may start past the frame's end")
        channels = len(stream.ids)
        widths = builder.netlist.width[stream.ids]
        if any(meta.padding):
            # Code 0 is the smallest value, and every window of a max-pool holds an input element (torch
            # bounds the padding by half the kernel): padding with code 0 leaves every maximum as it is.
            stream = builder.pad_stage(node.name, stream, meta.padding, meta.padding, (0,) * channels, widths)
        window = builder.window_stage(
            node.name, stream, meta.kernel_size, meta.stride, meta.dilation, ElementOrder.CHANNEL_MAJOR
        )
        taps = math.prod(meta.kernel_size)
        maxima = [list(range(c * taps, (c + 1) * taps)) for c in range(channels)]
        ids = builder.add_pool(node, window.ids, maxima, widths, stage=0, per="channel")
        return builder.stream(window.handshake, ids, window.frame)
