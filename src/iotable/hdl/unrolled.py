"""The unrolled style: every unit instantiated at every position, a whole sample per cycle.

One function per node kind (:data:`BUILDERS`), each giving the node's output tensor as an array of element
ids in the node's shape. Structural nodes are wiring, so they only rearrange ids: a reshape reshapes, a join
concatenates, a duplicate repeats, a pad gathers through its index map with the pad codes' constants, a window
gathers its vectors. Only table and pool nodes make hardware: a table node becomes a *layer module* whose
input port ``x`` is the tensor it reads (the window's input when a window feeds it) and whose output port ``y``
is its output tensor, a pool node a module of comparator trees. Pipeline registers follow table layers (every
``pipeline``-th one); an element's *stage* is the registers it has passed, and a consumer that reads elements
of different stages reads the earlier ones through delay registers, so that every path from the input has the
same latency.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import bits as bitfields
from ..graph.graph import Node, NodeKind
from ..graph.nodes import PadMeta, PoolMeta, TableMeta, WindowMeta
from .builder import Builder, NodeBuilder, element_widths, pool_sources, window_gather
from .netlist import Netlist, Pool, ValidPipeline

__all__ = ["BUILDERS", "finish"]


def finish(b: Builder) -> Netlist:
    """The netlist after the walk: its output aligned to one stage (the latency), the valid pipeline."""
    netlist = b.netlist
    out = b.values[b.cut]
    stage = int(max(netlist.stage_of(out.reshape(-1)).max(), 0)) if out.size else 0
    netlist.output_ids = netlist.aligned(out.reshape(-1), stage)
    netlist.output_node = b.cut
    netlist.latency = stage
    netlist.valid = ValidPipeline(stage)
    return netlist


def _input(b: Builder, node: Node, inputs: Sequence[Any]) -> np.ndarray:
    widths = element_widths(node)
    ids = b.netlist.signal("in_data", widths, stage=0).reshape(node.shape)
    b.netlist.input_ids, b.netlist.input_node = ids.reshape(-1), node.name
    return ids


def _reshape(b: Builder, node: Node, inputs: Sequence[Any]) -> np.ndarray:
    return np.asarray(inputs[0]).reshape(node.shape)


def _duplicate(b: Builder, node: Node, inputs: Sequence[Any]) -> np.ndarray:
    return np.asarray(inputs[0])


def _join(b: Builder, node: Node, inputs: Sequence[Any]) -> np.ndarray:
    axis = -1 if node.layout is not None and node.layout.channels_last else 0
    return np.concatenate([np.asarray(x) for x in inputs], axis=axis)


def _pad(b: Builder, node: Node, inputs: Sequence[Any]) -> np.ndarray:
    meta = node.meta
    assert isinstance(meta, PadMeta)  # a checked graph
    source = np.asarray(inputs[0]).reshape(-1)
    index = np.asarray(meta.index_map)
    if not (index < 0).any():
        return source[index]
    channels_last = node.layout is not None and node.layout.channels_last
    domains = node.channel_domains() or ()
    assert meta.pad_codes is not None  # a checked graph: -1 entries come with pad codes
    widths = np.array(bitfields.widths(domains), dtype=np.int64)
    constants = b.netlist.constants(widths, np.asarray(meta.pad_codes))
    channel = np.indices(index.shape)[-1 if channels_last else 0]
    return np.where(index < 0, constants[channel], source[np.maximum(index, 0)])


def _window(b: Builder, node: Node, inputs: Sequence[Any]) -> np.ndarray:
    meta = node.meta
    assert isinstance(meta, WindowMeta) and node.layout is not None  # a checked graph
    source = np.asarray(inputs[0])
    return source.reshape(-1)[window_gather(source.shape, meta, channels_last=node.layout.channels_last)]


def _output(b: Builder, node: Node, inputs: Sequence[Any]) -> np.ndarray:
    return np.asarray(inputs[0])


def _table(b: Builder, node: Node, inputs: Sequence[Any]) -> np.ndarray:
    meta = node.meta
    assert isinstance(meta, TableMeta)  # a checked graph
    netlist, index = b.netlist, b.table_count
    b.table_count += 1
    producer = b.graph.producers(node.name)[0]
    if producer.kind is NodeKind.WINDOW:
        window = producer.meta
        assert isinstance(window, WindowMeta) and producer.layout is not None
        port = b.values[b.graph.inputs(producer.name)[0]]
        local = window_gather(port.shape, window, channels_last=producer.layout.channels_last)
        local = local.reshape(-1, local.shape[-1])
    else:
        port = np.asarray(inputs[0])
        local = np.arange(port.size, dtype=np.int64).reshape(1, -1)
    x_ids = port.reshape(-1)
    stage = int(max(netlist.stage_of(x_ids).max(), 0)) if x_ids.size else 0
    x_ids = netlist.aligned(x_ids, stage)
    ids, block = b.layer_block(node, index, x_ids, local, stage=stage)
    if b.pipeline and (index + 1) % b.pipeline == 0:
        signal = block.output
        registered = netlist.register(signal, f"layer{index}_q")
        block.register, block.register_bits = registered, netlist.signals[registered].width
        ids = netlist.moved(ids, signal, registered)
    return ids.reshape(node.shape)


def _pool(b: Builder, node: Node, inputs: Sequence[Any]) -> np.ndarray:
    meta = node.meta
    assert isinstance(meta, PoolMeta)  # a checked graph
    netlist, index = b.netlist, b.pool_count
    b.pool_count += 1
    source = np.asarray(inputs[0])
    channels_last = node.layout is not None and node.layout.channels_last
    x_ids = source.reshape(-1)
    stage = int(max(netlist.stage_of(x_ids).max(), 0)) if x_ids.size else 0
    x_ids = netlist.aligned(x_ids, stage)
    maxima = pool_sources(source.shape, node.shape, meta, channels_last)
    widths = netlist.width[x_ids][[m[0] for m in maxima]]
    ids = netlist.signal(f"pool{index}_y", widths, stage=stage)
    for k in range(len(maxima)):
        netlist.origin[int(ids[k])] = f"node '{node.name}' element {k}"
    netlist.blocks.append(
        Pool(f"{netlist.top}_pool{index}", node.name, x_ids, netlist.width[x_ids], maxima, widths,
             len(netlist.signals) - 1)
    )  # fmt: skip
    return ids.reshape(node.shape)


#: The unrolled builder of each node kind.
BUILDERS: Mapping[NodeKind, NodeBuilder] = {
    NodeKind.INPUT: _input,
    NodeKind.RESHAPE: _reshape,
    NodeKind.DUPLICATE: _duplicate,
    NodeKind.JOIN: _join,
    NodeKind.PAD: _pad,
    NodeKind.WINDOW: _window,
    NodeKind.OUTPUT: _output,
    NodeKind.TABLE: _table,
    NodeKind.POOL: _pool,
}
