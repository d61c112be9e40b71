"""The ``argmax`` node: the index of the largest code along an axis, ties to the first (a comparator tree)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..domain import Domain
from ..errors import GraphError
from ..graph.fields import codes_in, element_domains, node_where
from ..graph.kind import Kernel, NodeKindDef, register
from ..graph.nodes import ArgmaxMeta, Edge, Node
from .sum import code_layout


def argmax_shape(shape: tuple[int, ...], dim: int, keepdim: bool) -> tuple[int, ...]:
    """The per-sample shape of an argmax along ``dim`` of ``shape``."""
    if keepdim:
        return (*shape[:dim], 1, *shape[dim + 1 :])
    return (*shape[:dim], *shape[dim + 1 :])


def argmax_groups(shape: tuple[int, ...], dim: int) -> np.ndarray:
    """For every output of an argmax along ``dim`` of ``shape`` (C order), the flat indices it compares, in
    index order.

    Example:
        >>> argmax_groups((2, 3), 1).tolist()
        [[0, 1, 2], [3, 4, 5]]
    """
    index = np.arange(math.prod(shape)).reshape(shape)
    return np.moveaxis(index, dim, -1).reshape(-1, shape[dim])


def _check_argmax(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    producer, where, meta = producers[0], node_where(node), node.meta
    assert isinstance(meta, ArgmaxMeta)  # _check_fields
    codes_in(node, producer)
    dim = meta.dim
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < len(producer.shape):
        msg = f"{where}: meta.dim must be an axis 0 .. {len(producer.shape) - 1} of {producer.shape}, received {dim!r}"
        raise GraphError(msg)
    if not isinstance(meta.keepdim, bool):
        msg = f"{where}: meta.keepdim must be True or False, received {meta.keepdim!r}"
        raise GraphError(msg)
    if len(set(element_domains(producer))) != 1:
        msg = (
            f"{where}: compares codes of {producer.name!r}, whose elements have different domains; the largest code "
            "is the largest value only within one domain"
        )
        raise GraphError(msg)
    shape = argmax_shape(producer.shape, dim, meta.keepdim)
    domain = Domain(range(producer.shape[dim]))
    if node.shape != shape or node.domain != domain or node.layout != code_layout(shape):
        msg = (
            f"{where}: shape {node.shape}, domain {node.domain!r} and layout {node.layout} differ from {shape}, "
            f"{domain!r} and {code_layout(shape)}, what an argmax along axis {dim} of {producer.shape} gives"
        )
        raise GraphError(msg)


@register
class Argmax(NodeKindDef):
    """The index of the largest code along ``meta.dim``, the first of equal ones (``torch.argmax``)."""

    name = "argmax"
    meta = ArgmaxMeta
    dot_shape = "diamond"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_argmax(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """``torch.argmax`` of the codes (codes ascend with values; torch returns the first of equal maxima)."""
        dim, keepdim = node.meta.dim + 1, node.meta.keepdim
        return lambda xs: torch.argmax(xs[0], dim=dim, keepdim=keepdim)

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """Every element along the axis of a live output."""
        meta = node.meta
        live = np.asarray(live, dtype=bool)
        if not meta.keepdim:
            live = np.expand_dims(live, meta.dim)
        return [np.broadcast_to(live, producers[0].shape).copy()]

    def label(self, node: Node) -> list[str]:
        return [f"along axis {node.meta.dim}, ties to the first"]

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Comparator trees carrying indices, one per output, ties to the lower index."""
        groups = argmax_groups(builder.graph.producers(node.name)[0].shape, node.meta.dim)
        return builder.add_argmax(node, inputs[0], groups)

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Comparator trees on each beat: along a flat tensor (after the last frame), or along a pixel's channels
        with ``keepdim`` (the positions stay a frame); any other axis is refused by name."""
        stream = builder.read(node, inputs[0])
        groups = argmax_groups(builder.graph.producers(node.name)[0].shape, node.meta.dim)
        local, _ = builder.beat_map(node, stream, groups)
        return builder.add_argmax(node, stream, local)
