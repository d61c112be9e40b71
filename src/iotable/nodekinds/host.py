"""The ``host`` node: a torch module run on decoded values (not tabulated); its output is raw values."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from torch import nn

from ..errors import GraphError
from ..graph.fields import node_where
from ..graph.kind import Kernel, MetaDecoder, MetaEncoder, NodeKindDef, register
from ..graph.nodes import Edge, HostMeta, Meta, Node
from ..runtime.host import host_kernel


def _check_host(node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
    where, meta = node_where(node), node.meta
    assert isinstance(meta, HostMeta)  # _check_fields
    if node.domain is not None or node.layout is not None:
        msg = (
            f"{where}: a host node outputs raw values (domain and layout None), received {node.domain!r}, {node.layout}"
        )
        raise GraphError(msg)
    if not isinstance(meta.module, nn.Module):
        msg = f"{where}: meta.module must be the torch module it runs, received {type(meta.module).__name__}"
        raise GraphError(msg)


@register
class Host(NodeKindDef):
    """A module the runtime runs with torch; a bundle stores its class name and weights."""

    name = "host"
    hosted = True
    meta = HostMeta
    dot_shape = "component"
    dot_style = 'style="filled,dashed", fillcolor="#e6e6e6", color="#666666", fontcolor="#333333"'

    def check(self, node: Node, producers: Sequence[Node], incoming: Sequence[Edge], outgoing: Sequence[Edge]) -> None:
        _check_host(node, producers, incoming, outgoing)

    def compile(self, runtime: Any, node: Node) -> Kernel:
        """The host module on decoded values."""
        return host_kernel(runtime.graph, node)

    def encode(self, meta: Meta, codec: MetaEncoder) -> dict[str, Any]:
        fields = dataclasses.fields(meta)
        return {
            f.name: codec.host_module() if f.name == "module" else codec.field(f.name, getattr(meta, f.name))
            for f in fields
        }

    def decode(self, record: Any, where: str, codec: MetaDecoder) -> Meta:
        values = codec.fields(record, {"module", "modules"}, where, hosts=True)
        return HostMeta(**values)

    def row(self, node: Node) -> dict[str, Any]:
        return {"host": "host (torch)"}

    def title(self, node: Node) -> str:
        return "host (torch)"
