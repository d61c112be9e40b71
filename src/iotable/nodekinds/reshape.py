"""The ``reshape`` node: a flatten or view of the codes, elements in C order."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import GraphError
from ..graph.fields import element_domains, node_where
from ..graph.kind import Kernel, NodeKindDef, register
from ..graph.nodes import Edge, Node, ReshapeMeta
from ..layout import Layout


def _check_reshape(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    producer, where = producers[0], node_where(node)
    if math.prod(node.shape) != math.prod(producer.shape):
        msg = (
            f"{where}: shape {node.shape} holds {math.prod(node.shape)} elements, {producer.name!r} gives "
            f"{math.prod(producer.shape)}"
        )
        raise GraphError(msg)
    expected = _reshaped_domain(node, producer)
    if node.domain != expected:
        msg = f"{where}: domain {node.domain!r} differs from {expected!r}, what reshaping {producer.name!r} gives"
        raise GraphError(msg)
    layout = Layout.channels_first(len(node.shape) + 1) if expected is not None and 1 <= len(node.shape) <= 3 else None
    if node.layout != layout:
        msg = f"{where}: layout {node.layout} differs from {layout}, the layout of reshaped codes of shape {node.shape}"
        raise GraphError(msg)


def _reshaped_domain(node: Node, producer: Node) -> Any:
    domain = producer.domain
    if not isinstance(domain, tuple) or node.shape == producer.shape:
        return domain
    if len(set(domain)) == 1:
        return domain[0]
    if len(node.shape) == 1:  # flatten: every element keeps its channel's domain
        return element_domains(producer)
    msg = f"{node_where(node)}: reshapes channels of different domains from {producer.shape} into {node.shape}"
    raise GraphError(msg)


@register
class Reshape(NodeKindDef):
    """Flatten / view: the node's shape is the new shape; its domain follows the elements."""

    name = "reshape"
    reshapes = True
    meta = ReshapeMeta
    passes_through = True
    dot_shape = "oval"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_reshape(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """A view of the codes in the node's shape."""
        shape = node.shape
        return lambda xs: xs[0].reshape(xs[0].shape[0], *shape)

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """The same elements, in the producer's shape."""
        return [np.asarray(live, dtype=bool).reshape(producers[0].shape)]

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Wiring: the same elements in the node's shape."""
        return np.asarray(inputs[0]).reshape(node.shape)

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """The same stream; a frame of several beats viewed as one vector is marked flattened (its readers are
        refused: that needs a frame buffer)."""
        stream = inputs[0]
        producer = builder.graph.inputs(node.name)[0]
        if stream.beats > 1 or producer in builder.flattened:
            builder.flattened[node.name] = builder.flattened.get(producer, producer)
        return stream
