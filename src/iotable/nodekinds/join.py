"""The ``join`` node: operands concatenated along the channel axis (also the two operands of an add)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..domain import Domain
from ..errors import GraphError
from ..graph.fields import codes_in, node_where, split_channels
from ..graph.kind import Kernel, NodeKindDef, register
from ..graph.nodes import Edge, JoinMeta, Node


def _check_join(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    where, meta = node_where(node), node.meta
    assert isinstance(meta, JoinMeta)  # _check_fields
    if meta.op != "concat" or not isinstance(meta.for_add, bool):
        msg = (
            f"{where}: meta.op must be 'concat' and meta.for_add True or False, received {meta.op!r}, {meta.for_add!r}"
        )
        raise GraphError(msg)
    if meta.for_add and len(producers) != 2:
        msg = f"{where}: gathers the operands of an add (meta.for_add), so joins 2 operands, not {len(producers)}"
        raise GraphError(msg)
    layout = node.layout
    if layout is None or node.domain is None:
        msg = f"{where}: joins codes along a channel axis, so needs a layout and a domain"
        raise GraphError(msg)
    channels, size = split_channels(node.shape, layout)
    total = 0
    domains: list[Domain] = []
    for producer in producers:
        codes_in(node, producer)
        if len(producer.shape) != len(node.shape) or split_channels(producer.shape, layout)[1] != size:
            msg = (
                f"{where}: operand {producer.name!r} of shape {producer.shape} does not join {node.shape} along its "
                f"channels"
            )
            raise GraphError(msg)
        total += split_channels(producer.shape, layout)[0]
        domains += list(producer.channel_domains() or ())
    if total != channels or tuple(node.channel_domains() or ()) != tuple(domains):
        msg = (
            f"{where}: {channels} channel(s) of domains {node.domain!r}, but its operands give {total} of "
            f"{tuple(domains)!r}"
        )
        raise GraphError(msg)


@register
class Join(NodeKindDef):
    """Concatenation of its operands (input ports in order) along the channel axis."""

    name = "join"
    meta = JoinMeta
    reads = None
    dot_shape = "invtriangle"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_join(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """Operands concatenated along the channel axis."""
        axis = -1 if node.layout is not None and node.layout.channels_last else 1
        return lambda xs: torch.cat(xs, dim=axis)

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """Each operand's part of the live elements, along the channel axis."""
        axis = -1 if node.layout is not None and node.layout.channels_last else 0
        sizes = [p.shape[axis] for p in producers]
        parts = np.split(np.asarray(live, dtype=bool), np.cumsum(sizes)[:-1], axis=axis)
        return list(parts)

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Wiring: the inputs' elements concatenated along the channels."""
        axis = -1 if node.layout is not None and node.layout.channels_last else 0
        return np.concatenate([np.asarray(x) for x in inputs], axis=axis)

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Refused: streams to join would need buffers to stay in step."""
        raise builder.refuse(node, "joining streams needs buffers that keep them in step")
