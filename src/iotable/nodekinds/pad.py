"""The ``pad`` node: padding of the spatial axes before a window, as its index map says."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import bits as bitfields
from ..errors import GraphError, IOTableError, OptionError, SpecError
from ..graph.fields import codes_in, index_array, ints_field, node_where, same_fields, split_channels
from ..graph.kind import Kernel, MetaDecoder, NodeKindDef, register
from ..graph.nodes import Edge, Meta, Node, PadMeta, pad_index_map
from ..layout import PaddingMode
from ..runtime.codes import codes_dtype


def _check_pad(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    """Shape and index map from the padding and mode (:func:`pad_index_map`); zeros mode: each channel's code of 0."""
    producer, where, meta = producers[0], node_where(node), node.meta
    assert isinstance(meta, PadMeta)  # _check_fields
    codes_in(node, producer)
    same_fields(node, producer, "domain", "layout")
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
    padding = tuple(ints_field(pair, f"{where}: meta.padding", minimum=0, length=2) for pair in raw)
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
    index_map = index_array(meta.index_map, f"{where}: meta.index_map", expected.shape)
    if not np.array_equal(index_map, expected):
        at = tuple(int(i) for i in np.argwhere(index_map != expected)[0])
        msg = (
            f"{where}: index_map[{at}] is {int(index_map[at])}, but mode {meta.mode.value!r} with padding {padding} "
            f"copies {int(expected[at])} there (-1: the pad code); the map and the mode disagree: rebuild the map "
            "with iotable.graph.pad_index_map"
        )
        raise GraphError(msg)
    _check_pad_codes(node, meta, split_channels(producer.shape, layout)[0])


def _check_pad_codes(node: Node, meta: PadMeta, channels: int) -> None:
    where, codes = node_where(node), meta.pad_codes
    if meta.mode is not PaddingMode.ZEROS:
        if codes is not None:
            msg = f"{where}: meta.pad_codes is {codes!r}; mode {meta.mode.value!r} copies input elements and has none"
            raise GraphError(msg)
        return
    codes = ints_field(codes, f"{where}: meta.pad_codes", minimum=0, length=channels)
    for c, (code, domain) in enumerate(zip(codes, node.channel_domains() or ())):
        if domain.zero_code is None or code != domain.zero_code:
            msg = (
                f"{where}: meta.pad_codes[{c}] is {code}, but padding feeds real 0, code "
                f"{domain.zero_code} of channel {c}'s {domain!r}"
            )
            raise GraphError(msg)


def _compile(runtime: Any, node: Node) -> Kernel:
    """A pad node's kernel: exactly what its index map says each element holds.

    The maps pads produce (axis by axis, by :func:`~iotable.graph.pad_index_map`) run as a fill with the
    pad codes, one copy of the input and a slab copy per padded line; any other map runs as one gather.
    """
    meta = node.meta
    assert isinstance(meta, PadMeta)  # a checked graph
    in_shape = runtime.graph.producers(node.name)[0].shape
    channels_last = node.layout is not None and node.layout.channels_last
    index_map = np.asarray(meta.index_map, dtype=np.int64)
    channels = node.shape[-1] if channels_last else node.shape[0]
    fill = None
    if (index_map < 0).any():
        if meta.pad_codes is None:
            msg = f"graph: pad node {node.name!r} holds pad codes (index -1) but no pad_codes; see graph.check()"
            raise GraphError(msg)
        pad_codes = np.asarray(meta.pad_codes, dtype=np.int64)
        codes = torch.as_tensor(pad_codes).to(codes_dtype(int(pad_codes.min()), int(pad_codes.max())))
        fill_shape = [1] * (len(node.shape) + 1)
        fill_shape[-1 if channels_last else 1] = -1
        fill = codes.reshape(fill_shape)
    try:
        expected = pad_index_map(in_shape, meta.padding, meta.mode, channels_last=channels_last)
    except (SpecError, OptionError):
        expected = None
    if expected is not None and np.array_equal(expected, index_map):
        return _pad_by_axes(node, in_shape, fill, channels_last)
    return _pad_by_gather(node, in_shape, fill, channels, channels_last)


def _pad_by_axes(node: Node, in_shape: tuple[int, ...], fill: torch.Tensor | None, channels_last: bool) -> Kernel:
    padding, mode = node.meta.padding, node.meta.mode
    first = 1 if channels_last else 2  # the first spatial axis of a batch
    spatial = in_shape[:-1] if channels_last else in_shape[1:]
    interior = [slice(None)] * (len(in_shape) + 1)
    copies: list[list[tuple[int, int]]] = []  # per axis: (padded line, the padded line it copies)
    for axis, (n, (before, after)) in enumerate(zip(spatial, padding)):
        interior[first + axis] = slice(before, before + n)
        sources = mode.sources(n, before, after)
        edges = [q for q in range(len(sources)) if not before <= q < before + n and sources[q] >= 0]
        copies.append([(q, int(sources[q]) + before) for q in edges])

    def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
        x = xs[0]
        dtype = x.dtype if fill is None else torch.promote_types(x.dtype, fill.dtype)
        out = torch.empty((x.shape[0], *node.shape), dtype=dtype)
        if fill is not None:
            out.copy_(fill.expand(out.shape))
        out[tuple(interior)] = x
        # Axis by axis from the last: the lines an axis copies are complete along the later axes, and
        # the region is the input's along the earlier ones, so corners copy copies, as torch pads.
        # One slab copy per padded line (a few per axis), each over the whole batch.
        for axis in reversed(range(len(copies))):
            region = out[tuple(interior[: first + axis])]
            for target, source in copies[axis]:
                region.select(first + axis, target).copy_(region.select(first + axis, source))
        return out

    return kernel


def _pad_by_gather(
    node: Node, in_shape: tuple[int, ...], fill: torch.Tensor | None, channels: int, channels_last: bool
) -> Kernel:
    """One gather from the flat input followed by each channel's pad code (where the map holds ``-1``)."""
    index_map = np.asarray(node.meta.index_map, dtype=np.int64)
    n_in = math.prod(in_shape)
    channel = np.indices(index_map.shape)[-1 if channels_last else 0]
    flat = torch.as_tensor(np.where(index_map < 0, n_in + channel, index_map).reshape(-1))
    codes = None if fill is None else fill.reshape(1, -1)

    def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
        x = xs[0].reshape(xs[0].shape[0], -1)
        if codes is not None:
            dtype = torch.promote_types(x.dtype, codes.dtype)
            x = torch.cat([x.to(dtype), codes.to(dtype).expand(x.shape[0], channels)], dim=1)
        return x.index_select(1, flat).view(x.shape[0], *node.shape)

    return kernel


@register
class Pad(NodeKindDef):
    """Padding: each output element copies the input element its index map names, or holds its pad code."""

    name = "pad"
    pads = True
    meta = PadMeta
    dot_shape = "box"
    dot_style = 'style="rounded,dashed"'

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_pad(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        return _compile(runtime, node)

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """The input elements the live elements copy (a pad code reads nothing)."""
        meta, producer = node.meta, producers[0]
        assert isinstance(meta, PadMeta)  # a checked graph
        sources = np.asarray(meta.index_map)[np.asarray(live, dtype=bool)]
        read = np.zeros(math.prod(producer.shape), dtype=bool)
        read[sources[sources >= 0]] = True
        return [read.reshape(producer.shape)]

    def decode(self, record: Any, where: str, codec: MetaDecoder) -> Meta:
        values = codec.fields(record, {"padding", "mode", "pad_codes", "index_map"}, where)
        values["mode"] = codec.choice(PaddingMode, values["mode"], f"{where}.mode", "a padding mode")
        values["index_map"] = codec.index_array(values["index_map"], f"{where}.index_map")
        return PadMeta(**values)

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Wiring: the input's elements gathered through the index map, the pad codes' constants at ``-1``."""
        meta = node.meta
        assert isinstance(meta, PadMeta)  # a checked graph
        source = np.asarray(inputs[0]).reshape(-1)
        index = np.asarray(meta.index_map)
        if not (index < 0).any():
            return source[index]
        channels_last = node.layout is not None and node.layout.channels_last
        domains = node.channel_domains() or ()
        assert meta.pad_codes is not None  # a checked graph: -1 entries come with pad codes
        widths = np.array(bitfields.widths(domains), dtype=np.int64)
        constants = builder.constants(widths, np.asarray(meta.pad_codes))
        channel = np.indices(index.shape)[-1 if channels_last else 0]
        return np.where(index < 0, constants[channel], source[np.maximum(index, 0)])

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """A pad stage around the frame (zeros padding only: the other modes copy pixels not received yet)."""
        meta = node.meta
        assert isinstance(meta, PadMeta)  # a checked graph
        stream = builder.read(node, inputs[0])
        if meta.mode is not PaddingMode.ZEROS or meta.pad_codes is None:
            raise builder.refuse(
                node, f"padding mode {meta.mode.value!r} copies pixels that have not arrived yet; only 'zeros' streams"
            )
        before = tuple(b for b, _ in meta.padding)
        after = tuple(a for _, a in meta.padding)
        widths = builder.netlist.width[stream.ids]
        return builder.pad_stage(node.name, stream, before, after, tuple(int(c) for c in meta.pad_codes), widths)
