"""The ``threshold`` node: a monotone step function of each code as comparisons against constants (FINN's
``MultiThreshold``): a quantizer after a sum, where that costs less than a table."""

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
from ..graph.nodes import Edge, Node, ThresholdMeta


def _check_threshold(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    producer, where, meta = producers[0], node_where(node), node.meta
    assert isinstance(meta, ThresholdMeta)  # _check_fields
    codes_in(node, producer)
    if node.shape != producer.shape or node.layout != producer.layout or not isinstance(node.domain, Domain):
        msg = (
            f"{where}: thresholds each element of {producer.name!r}: shape {producer.shape} and layout "
            f"{producer.layout} with codes of one Domain, received {node.shape}, {node.layout}, {node.domain!r}"
        )
        raise GraphError(msg)
    elements = math.prod(node.shape)
    steps = meta.thresholds.shape[1] if isinstance(meta.thresholds, np.ndarray) and meta.thresholds.ndim == 2 else -1
    thresholds = index_array(meta.thresholds, f"{where}: meta.thresholds", (elements, max(steps, 0)))
    start = index_array(meta.start, f"{where}: meta.start", (elements,))
    direction = index_array(meta.direction, f"{where}: meta.direction", (elements,))
    if np.any(np.diff(thresholds, axis=1) < 0) or not np.all(np.isin(direction, (-1, 1))):
        msg = f"{where}: every row of meta.thresholds must ascend and meta.direction be 1 or -1"
        raise GraphError(msg)
    radix, _ = element_radix_bits(producer)
    reached = (thresholds <= np.asarray(radix, np.int64)[:, None] - 1).sum(axis=1)
    low = np.minimum(start, start + direction * reached)
    high = np.maximum(start, start + direction * reached)
    bad = np.flatnonzero((low < 0) | (high >= len(node.domain)))
    if bad.size:
        msg = f"{where}: element(s) {short_list(bad.tolist())} reach codes outside 0 .. {len(node.domain) - 1}"
        raise GraphError(msg)


def step_function(table: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """A monotone step function of the codes ``0 .. len(table) - 1`` as ``(thresholds, start, direction)``, or
    ``None`` where ``table`` (the output code of each input code) is not monotone in unit steps.

    Example:
        >>> step_function(np.array([0, 0, 1, 1, 2]))
        (array([2, 4]), 0, 1)
        >>> step_function(np.array([0, 2])) is None
        True
    """
    table = np.asarray(table, np.int64)
    steps = np.diff(table)
    for direction in (1, -1):
        if np.all((steps == 0) | (steps == direction)):
            return np.flatnonzero(steps) + 1, int(table[0]), direction
    return None


def threshold_rows(
    thresholds: np.ndarray, start: np.ndarray, direction: np.ndarray, radix: np.ndarray
) -> list[tuple[int, tuple[int, ...], tuple[int, ...], int]]:
    """Per element ``k`` (reading element ``k`` of codes ``0 .. radix[k] - 1``), its step function as
    ``(k, thresholds, codes, base)``: the code is ``codes[j]`` for the last ``j`` with ``x >= thresholds[j]``,
    else ``base``. Thresholds every code reaches (``<= 0``) are in ``base``; those none reaches are left out.

    Example:
        >>> threshold_rows(np.array([[0, 2, 4]]), np.array([1]), np.array([1]), np.array([4]))
        [(0, (2,), (3,), 2)]
    """
    rows = []
    for k, row in enumerate(np.asarray(thresholds, np.int64)):
        always = int((row <= 0).sum())
        base = int(start[k] + direction[k] * always)
        steps = [int(t) for t in row if 0 < t < radix[k]]
        codes = tuple(base + int(direction[k]) * (j + 1) for j in range(len(steps)))
        rows.append((k, tuple(steps), codes, base))
    return rows


@register
class Threshold(NodeKindDef):
    """Per element, ``start + direction * (the number of thresholds at most the code)``."""

    name = "threshold"
    meta = ThresholdMeta
    dot_shape = "cds"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_threshold(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """Comparisons of every code with its element's thresholds, counted."""
        meta = node.meta
        thresholds = torch.tensor(meta.thresholds, dtype=torch.int64)
        start = torch.tensor(meta.start, dtype=torch.int64)
        direction = torch.tensor(meta.direction, dtype=torch.int64)
        shape = node.shape

        def kernel(xs: list[torch.Tensor]) -> torch.Tensor:
            x = xs[0].reshape(xs[0].shape[0], -1, 1).to(torch.int64)
            count = (x >= thresholds).sum(-1)
            return (start + direction * count).reshape(x.shape[0], *shape)

        return kernel

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """The same elements."""
        return [np.asarray(live, dtype=bool).reshape(producers[0].shape)]

    def label(self, node: Node) -> list[str]:
        return [f"{node.meta.thresholds.shape[1]} thresholds per element"]

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Per element, comparisons of its code with its thresholds as a chain from the highest."""
        meta = node.meta
        radix, _ = element_radix_bits(builder.graph.producers(node.name)[0])
        return builder.add_threshold(
            node, inputs[0], threshold_rows(meta.thresholds, meta.start, meta.direction, radix)
        )

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """The same comparisons on each beat (a flat tensor, or each pixel's channels where every position has
        its channel's thresholds); thresholds that differ between positions are refused by name."""
        meta = node.meta
        stream = builder.read(node, inputs[0])
        radix, _ = element_radix_bits(builder.graph.producers(node.name)[0])
        rows = np.arange(math.prod(node.shape)).reshape(-1, 1)
        fields = (meta.thresholds, meta.start, meta.direction, np.asarray(radix))
        local, (thresholds, start, direction, radix) = builder.beat_map(node, stream, rows, *fields)
        steps = threshold_rows(thresholds, start, direction, radix)
        return builder.add_threshold(node, stream, [(int(local[c, 0]), *row[1:]) for c, row in enumerate(steps)])
