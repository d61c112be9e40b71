"""The network's ends: the ``input`` node (the batch of input codes) and the ``output`` node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import GraphError
from ..graph.fields import node_where, same_fields
from ..graph.kind import Kernel, NodeKindDef, register
from ..graph.nodes import Edge, InputMeta, Node, OutputMeta
from ..runtime.codes import identity


@register
class Input(NodeKindDef):
    """The network input: reads nothing; its shape, layout and domain are the network's input codes'."""

    name = "input"
    meta = InputMeta
    reads = 0
    dot_shape = "invhouse"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        if node.domain is None or node.layout is None:
            msg = (
                f"{node_where(node)}: needs a domain and a layout (the network's input codes), received "
                f"{node.domain!r}, {node.layout}"
            )
            raise GraphError(msg)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """The input codes, as they are."""
        return identity


@register
class Output(NodeKindDef):
    """The network output: its producer's output, passed on unchanged."""

    name = "output"
    meta = OutputMeta
    passes_through = True
    dot_shape = "house"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        same_fields(node, producers[0], "shape", "layout", "domain")

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """The output: its producer's, as it is."""
        return identity
