"""The network's ends: the ``input`` node (the batch of input codes) and the ``output`` node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import GraphError
from ..graph.fields import node_where, same_fields
from ..graph.kind import Kernel, NodeKindDef, register
from ..graph.nodes import Edge, InputMeta, Node, OutputMeta
from ..runtime.codes import identity


@register
class Input(NodeKindDef):
    """The network input: reads nothing; its shape, layout and domain are the network's input codes'."""

    name = "input"
    is_input = True
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

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """The top module's ``in_data``: one element per input code, in the node's shape."""
        netlist = builder.netlist
        ids = netlist.signal("in_data", builder.element_widths(node), stage=0).reshape(node.shape)
        netlist.input_ids, netlist.input_node = ids.reshape(-1), node.name
        return ids

    def streaming(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """``in_data`` carries one pixel (a flat tensor: all of it) a beat, on handshake 0."""
        netlist = builder.netlist
        ids = netlist.signal("in_data", builder.pixel_widths(node), stage=0)
        netlist.input_ids, netlist.input_node = ids, node.name
        frame = builder.frame(node)
        netlist.beats[0] = frame[0] * frame[1]
        return builder.stream(0, ids, frame)


@register
class Output(NodeKindDef):
    """The network output: its producer's output, passed on unchanged."""

    name = "output"
    is_output = True
    meta = OutputMeta
    passes_through = True
    dot_shape = "house"

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        same_fields(node, producers[0], "shape", "layout", "domain")

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """The output: its producer's, as it is."""
        return identity

    def live_reads(self, node: Node, producers: Sequence[Node], live: Any) -> list[Any]:
        """Every element of its producer: the network's outputs."""
        return [np.ones(producers[0].shape, dtype=bool)]

    # -- hardware -----------------------------------------------------------------------------------------

    def unrolled(self, builder: Any, node: Node, inputs: Sequence[Any]) -> Any:
        """Its producer's elements (the hardware part ends at the output's producer or before)."""
        return np.asarray(inputs[0])
