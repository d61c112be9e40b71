"""The ``duplicate`` node: one producer fanned out to several consumers, one output port each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import GraphError
from ..graph.fields import int_field, node_where, same_fields
from ..graph.kind import Kernel, NodeKindDef, register
from ..graph.nodes import DuplicateMeta, Edge, Node
from ..runtime.codes import identity


def _check_duplicate(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    same_fields(node, producers[0], "shape", "layout", "domain")
    outputs = int_field(node.meta.outputs, f"{node_where(node)}: meta.outputs", minimum=1)
    ports = sorted(e.producer_port for e in outgoing)
    if ports != list(range(outputs)):
        msg = f"{node_where(node)}: has {outputs} output port(s), but edges leave port(s) {ports}; expected each once"
        raise GraphError(msg)


@register
class Duplicate(NodeKindDef):
    """Fan-out: every consumer reads the producer's output, each from its own output port."""

    name = "duplicate"
    meta = DuplicateMeta
    passes_through = True
    dot_shape = "triangle"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_duplicate(node, producers, incoming, outgoing)

    def output_ports(self, meta: Any) -> Any:
        return meta.outputs

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """Its producer's output, as it is (every consumer reads the same tensor)."""
        return identity

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """The same elements: what any consumer reads."""
        return [np.asarray(live, dtype=bool).reshape(producers[0].shape)]

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Wiring: the same elements, read by every consumer."""
        return np.asarray(inputs[0])

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Refused: consumers of one stream would need buffers to stay in step."""
        raise builder.refuse(node, "a stream read by several consumers needs buffers that keep them in step")
