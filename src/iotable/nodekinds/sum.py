"""The ``sum`` node: weighted sums of codes in exact integer arithmetic (an adder tree in hardware).

GroupSum's popcounts, a class's tree scores plus its bias, a neuron's per-edge outputs and partial sums are
sums of codes times small integers: the builder (:mod:`iotable.network.arithmetic`) shows that the model's
float arithmetic gives the same values before it makes one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..domain import Domain
from ..errors import GraphError
from ..graph.fields import codes_in, element_radix_bits, index_array, node_where, short_list
from ..graph.kind import Kernel, NodeKindDef, register
from ..graph.nodes import Edge, Node, SumMeta
from ..layout import Layout

#: The largest weight magnitude a sum term may have (a few shifts and adds in hardware).
MAX_WEIGHT = 2**16
#: The most codes a sum's domain may hold (codes travel exactly as float32 below it).
MAX_CODES = 2**24


def code_layout(shape: tuple[int, ...]) -> Layout | None:
    """The layout of a node of codes of per-sample ``shape`` made by arithmetic (``NC``, ``NCL``, ``NCHW``)."""
    return Layout.channels_first(len(shape) + 1) if 1 <= len(shape) <= 3 else None


def sum_range(meta: SumMeta, radix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The smallest and largest code of every output of a sum reading elements of ``radix`` codes each."""
    index, weights = meta.index_map, meta.weights
    top = np.where(index >= 0, radix[np.maximum(index, 0)] - 1, 0) * weights
    low = meta.constant + np.minimum(top, 0).sum(axis=1)
    high = meta.constant + np.maximum(top, 0).sum(axis=1)
    return low, high


def _check_sum(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    producer, where, meta = producers[0], node_where(node), node.meta
    assert isinstance(meta, SumMeta)  # _check_fields
    codes_in(node, producer)
    if not isinstance(node.domain, Domain) or len(node.domain) > MAX_CODES:
        msg = f"{where}: a sum's codes are of one Domain of at most {MAX_CODES:,} values, received {node.domain!r}"
        raise GraphError(msg)
    if node.layout != code_layout(node.shape):
        expected = code_layout(node.shape)
        msg = f"{where}: layout {node.layout} differs from {expected}, the layout of codes of shape {node.shape}"
        raise GraphError(msg)
    outputs = math.prod(node.shape)
    if not isinstance(meta.index_map, np.ndarray) or meta.index_map.ndim != 2 or len(meta.index_map) != outputs:
        got = getattr(meta.index_map, "shape", type(meta.index_map).__name__)
        msg = f"{where}: meta.index_map must be an integer array of {outputs} rows (one per output), received {got}"
        raise GraphError(msg)
    index = index_array(meta.index_map, f"{where}: meta.index_map", meta.index_map.shape)
    weights = index_array(meta.weights, f"{where}: meta.weights", index.shape)
    index_array(meta.constant, f"{where}: meta.constant", (outputs,))
    size = math.prod(producer.shape)
    if index.size and (index.min() < -1 or index.max() >= size):
        msg = f"{where}: meta.index_map names elements outside the {size} of {producer.name!r} (or below -1)"
        raise GraphError(msg)
    if np.any((index < 0) & (weights != 0)) or np.any(np.abs(weights) > MAX_WEIGHT):
        msg = f"{where}: meta.weights must be 0 where meta.index_map pads and at most {MAX_WEIGHT} in magnitude"
        raise GraphError(msg)
    if not isinstance(meta.exact, str):
        msg = f"{where}: meta.exact must be a string (why the sum is exact), received {meta.exact!r}"
        raise GraphError(msg)
    radix, _ = element_radix_bits(producer)
    low, high = sum_range(meta, np.asarray(radix, np.int64))
    bad = np.flatnonzero((low < 0) | (high >= len(node.domain)))
    if bad.size:
        k = int(bad[0])
        msg = (
            f"{where}: output(s) {short_list(bad.tolist())} reach codes {int(low[k])} .. {int(high[k])} (output {k}); "
            f"its domain holds codes 0 .. {len(node.domain) - 1}"
        )
        raise GraphError(msg)


def _compile(node: Node) -> Kernel:
    """Gathered codes times their weights, summed, plus the constant: integers, exact."""
    meta = node.meta
    index = torch.tensor(np.maximum(meta.index_map, 0))
    weights = torch.tensor(meta.weights, dtype=torch.int64)
    constant = torch.tensor(meta.constant, dtype=torch.int64)
    shape = node.shape

    def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
        x = xs[0].reshape(xs[0].shape[0], -1).to(torch.int64)
        out = (x[:, index] * weights).sum(-1) + constant
        return out.reshape(x.shape[0], *shape)

    return kernel


@register
class Sum(NodeKindDef):
    """Weighted sums of the producer's codes plus constants (see :class:`~iotable.graph.nodes.SumMeta`)."""

    name = "sum"
    sums = True
    meta = SumMeta
    dot_shape = "octagon"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_sum(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        return _compile(node)

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """The elements the terms of the live outputs name."""
        meta = node.meta
        read = np.zeros(math.prod(producers[0].shape), dtype=bool)
        rows = meta.index_map[np.asarray(live, dtype=bool).reshape(-1)]
        read[rows[rows >= 0]] = True
        return [read.reshape(producers[0].shape)]

    def label(self, node: Node) -> list[str]:
        meta = node.meta
        terms = int((meta.index_map >= 0).sum(axis=1).max(initial=0))
        ones = bool(np.all(np.abs(meta.weights[meta.index_map >= 0]) == 1))
        codes = len(node.domain) if isinstance(node.domain, Domain) else 0
        return [f"{'popcount' if ones else 'weighted sum'} of up to {terms} terms", f"{codes} codes"]

    def row(self, node: Node) -> dict[str, Any]:
        meta = node.meta
        return {"fan_in": str(int((meta.index_map >= 0).sum(axis=1).max(initial=0)))}

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Adder trees of exactly the bits each sum needs (split into levels for ``pipeline`` when deep)."""
        meta = node.meta
        return builder.add_sum(node, inputs[0], meta.index_map, meta.weights, meta.constant)

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Adder trees on each beat: the sums of a flat tensor (after the last frame), or of each pixel's
        channels where every position sums its own pixel alike; any other sum is refused by name."""
        meta = node.meta
        stream = builder.read(node, inputs[0])
        index, (weights, constant) = builder.beat_map(node, stream, meta.index_map, meta.weights, meta.constant)
        return builder.add_sum(node, stream, index, weights, constant)
