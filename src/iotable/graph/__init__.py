"""The interlayer graph: the contract a hardware generator is written from.

Node kinds and their typed records (:mod:`.nodes`), the registry of kinds (:mod:`.kind`: each kind's checks,
runtime kernel, bundle codec and picture; the built-in kinds live in :mod:`iotable.nodekinds`), the graph and
its checks (:mod:`.graph`, :mod:`.checks`, :mod:`.fields`), the node-by-node interpreter (:mod:`.interpret`)
and pictures (:mod:`.diagram`). The names below are the graph's public surface, importable from here.
"""

from .graph import (
    META,
    ArgmaxMeta,
    DuplicateMeta,
    Edge,
    ElementOrder,
    Graph,
    HostMeta,
    InputMeta,
    JoinMeta,
    Meta,
    Node,
    NodeKind,
    NodeKindDef,
    OutputMeta,
    PadMeta,
    PoolMeta,
    ReshapeMeta,
    SumMeta,
    TableMeta,
    ThresholdMeta,
    WindowMeta,
    definition,
    pad_index_map,
    register,
    window_buffer_depth,
)
from .interpret import GraphInterpreter

__all__ = [
    "META",
    "ArgmaxMeta",
    "DuplicateMeta",
    "Edge",
    "ElementOrder",
    "Graph",
    "GraphInterpreter",
    "HostMeta",
    "InputMeta",
    "JoinMeta",
    "Meta",
    "Node",
    "NodeKind",
    "NodeKindDef",
    "OutputMeta",
    "PadMeta",
    "PoolMeta",
    "ReshapeMeta",
    "SumMeta",
    "TableMeta",
    "ThresholdMeta",
    "WindowMeta",
    "definition",
    "pad_index_map",
    "register",
    "window_buffer_depth",
]
