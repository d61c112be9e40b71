"""The ``duplicate`` node: one producer fanned out to several consumers, one output port each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
