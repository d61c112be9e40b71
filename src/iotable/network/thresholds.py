"""Quantizers after sums as comparisons against constants (``threshold`` nodes), where that costs less.

After the tables are built, a table layer that reads a ``sum`` node one element per table (batch norm, an
activation and a quantizer on each sum) is a monotone step function of each sum's code wherever its tables
are; :func:`thresholds` reads each table's steps (:func:`iotable.nodekinds.threshold.step_function`) and replaces
the layer by a ``threshold`` node when its LUT estimate (:func:`iotable.lutcount.threshold_luts`) is below
the tables' (:func:`iotable.lutcount.lut_estimate`), and drops its tables (the comparisons were read from them,
exactly); the summary says which form each layer took.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..domain import Domain
from ..graph.graph import Graph, Node
from ..graph.nodes import TableMeta, ThresholdMeta
from ..lutcount import lut_estimate, threshold_luts
from ..nodekinds.threshold import step_function
from ..tabulate.layers import LayerTables

__all__ = ["thresholds"]


def thresholds(graph: Graph, layers: dict[str, LayerTables]) -> tuple[Graph, dict[str, LayerTables]]:
    """``graph`` with every table layer over a sum's codes that is cheaper as comparisons made a threshold node,
    and ``layers`` without those layers."""
    layers = dict(layers)
    for node in graph.nodes:
        if not node.kind.tabulated or not isinstance(node.domain, Domain):
            continue
        producer = graph[graph.inputs(node.name)[0]] if graph.inputs(node.name) else None
        if producer is None or not producer.kind.sums or node.meta.layer not in layers:
            continue
        replacement = _threshold_node(node, producer, layers[node.meta.layer])
        if replacement is not None:
            graph = graph.replace(replacement)
            del layers[node.meta.layer]
    return graph, layers


def _threshold_node(node: Node, producer: Node, tables: LayerTables) -> Node | None:
    meta = node.meta
    assert isinstance(meta, TableMeta)
    size = int(np.prod(node.shape))
    if len(node.shape) != 1 or node.shape != producer.shape or len(meta.units) != size:
        return None
    if any(u.fan_in != 1 or u.out_channels != (u.index,) for u in meta.units):
        return None
    if not np.array_equal(meta.index_map[:, 0], np.arange(size)):
        return None
    radix = len(producer.domain) if isinstance(producer.domain, Domain) else 0
    rows, starts, directions = [], [], []
    in_bits = max(1, (radix - 1).bit_length())
    out_bits = max(1, (len(node.domain) - 1).bit_length()) if isinstance(node.domain, Domain) else 1
    table_cost = step_cost = 0
    for table in tables:  # one table per output element
        if not table.is_dense or table.rows != radix:
            return None
        steps = step_function(table.outputs[:, 0])
        if steps is None:
            return None
        rows.append(steps[0])
        starts.append(steps[1])
        directions.append(steps[2])
        table_cost += int(lut_estimate(in_bits, out_bits))
        step_cost += threshold_luts(in_bits, len(steps[0]), output_bits=out_bits)
    if step_cost >= table_cost:
        return None
    width = max((len(r) for r in rows), default=0)
    padded = np.full((size, width), radix, np.int64)
    for k, r in enumerate(rows):  # one row per element
        padded[k, : len(r)] = r
    record = ThresholdMeta(padded, np.array(starts, np.int64), np.array(directions, np.int64), modules=meta.modules)
    return dataclasses.replace(node, kind=record.kind, meta=record)
