"""A loaded network checked against itself: its tables against its graph, and golden vectors."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import torch
from torch import nn

from ..errors import BundleError
from ..graph.checks import element_domains
from ..graph.graph import (
    Graph,
    Node,
    TableMeta,
    WindowMeta,
)
from ..layerplan import LayerPlan
from ..network.network import TableNetwork
from ..runtime.runtime import Runtime, decode
from ..tabulate.layers import LayerTables
from ._format import _GOLDEN_ELEMENTS, GOLDEN_SAMPLES

# -- the network as a whole -------------------------------------------------------------------------------


def _check_network(graph: Graph, layers: dict[str, LayerTables], hosts: dict[str, nn.Module], where: str) -> Graph:
    """What the runtime relies on beyond :meth:`Graph.check`: the graph and the tables describe one network.

    Each layer has one table node, in layer order, with its plan's units, layout, output domain and window;
    the codes the graph feeds each unit's inputs are of the domains its table was built for; each host
    record has its host node. Returns the graph with each table node holding its plan's units (one copy).
    """
    tables = graph.table_nodes()
    order = [n.meta.layer for n in tables]
    if order != list(layers):
        msg = f"{where}: the table nodes use the layers {order}; expected each of {list(layers)} once, in that order"
        raise BundleError(msg)
    shared = []
    for node in tables:
        plan = layers[node.meta.layer].plan
        _check_table_node(graph, node, plan, f"{where}: table node {node.name!r}")
        shared.append(dataclasses.replace(node, meta=dataclasses.replace(node.meta, units=plan.units)))
    named = [n.name for n in graph.host_nodes()]
    if named != list(hosts):
        msg = f"{where}: the host nodes are {named}, but the host list names {list(hosts)}, in that order"
        raise BundleError(msg)
    for node in graph.host_nodes():
        if node.meta.module is not hosts[node.name]:
            msg = f"{where}: host node {node.name!r}'s meta.module must be {{'$host': {node.name!r}}}"
            raise BundleError(msg)
    return graph.replace(*shared)


def _check_table_node(graph: Graph, node: Node, plan: LayerPlan, here: str) -> None:
    """A table node has its plan's units, layout, output domain, window and padding, and is fed the codes of
    the domains its tables were built for."""
    meta = node.meta
    assert isinstance(meta, TableMeta)  # the graph passed its checks
    if meta.units != plan.units:
        msg = f"{here}: meta.units disagrees with the units of layer {plan.name!r}"
        raise BundleError(msg)
    if node.layout != plan.layout or node.domain != plan.output_domain or node.channels != plan.out_channels:
        msg = f"{here}: its layout, output domain or channels disagree with the plan of layer {plan.name!r}"
        raise BundleError(msg)
    producer = graph.producers(node.name)[0]
    if producer.kind.windowed != (plan.geometry.rank > 0):
        msg = (
            f"{here}: reads a {producer.kind.value} node, but the plan of layer {plan.name!r} has rank "
            f"{plan.geometry.rank}"
        )
        raise BundleError(msg)
    if isinstance(producer.meta, WindowMeta):
        _check_window_plan(graph, producer, plan, here)
    elif node.shape != plan.frame_out:
        msg = f"{here}: shape {node.shape} differs from its plan's output {plan.frame_out}"
        raise BundleError(msg)
    domains = element_domains(producer)
    index_map = meta.index_map
    for unit in plan.units:  # units reading the same channels share their domains: checked once per channel set
        reads = index_map[unit.index, : unit.fan_in]
        fed = tuple(domains[i] for i in reads) if len(domains) > 1 else domains * unit.fan_in
        if fed != plan.unit_domains(unit):
            msg = (
                f"{here}: unit {unit.index} is fed codes of {fed} but its table was built for {plan.unit_domains(unit)}"
            )
            raise BundleError(msg)


def _check_window_plan(graph: Graph, window: Node, plan: LayerPlan, here: str) -> None:
    """The window a table reads and the pad before it are its plan's kernel, stride, dilation and padding."""
    g, meta = plan.geometry, window.meta
    assert isinstance(meta, WindowMeta)
    if (meta.kernel, meta.stride, meta.dilation) != (g.kernel, g.stride, g.dilation):
        msg = f"{here}: the window {window.name!r} disagrees with the kernel, stride or dilation of its plan"
        raise BundleError(msg)
    source = graph.producers(window.name)[0]
    if source.kind.pads:
        padding, mode = source.meta.padding, source.meta.mode
    else:
        padding, mode = tuple((0, 0) for _ in g.padding), g.padding_mode
    if padding != g.padding or mode is not g.padding_mode:
        msg = (
            f"{here}: the padding before its window is {padding} in mode {mode.value!r}; its plan pads "
            f"{g.padding} in mode {g.padding_mode.value!r}"
        )
        raise BundleError(msg)


# -- golden vectors ---------------------------------------------------------------------------------------


class _Zeros(nn.Module):
    """Stands in for a host module while golden vectors are computed: zeros of the host node's shape."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros((x.shape[0], *self.shape), dtype=torch.float32)


def _probe_nodes(graph: Graph) -> list[str]:
    """Where golden values are taken: what each host node reads, and the output unless a host node makes it.

    Host modules run the caller's code on floats (their last bits may differ across machines); what the
    tables make is exact everywhere.
    """
    hosted: set[str] = set()
    for node in graph.nodes:
        if node.kind.hosted or any(p in hosted for p in graph.inputs(node.name)):
            hosted.add(node.name)
    probes = [graph.inputs(n.name)[0] for n in graph.nodes if n.kind.hosted and graph.inputs(n.name)[0] not in hosted]
    if graph.nodes[-1].name not in hosted:
        probes.append(graph.nodes[-1].name)
    return list(dict.fromkeys(probes))


def _run_probes(net: TableNetwork, values: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """Float32 values of the ``names`` nodes for input ``values``, from the tables alone.

    Host modules are replaced by zeros, and a row a partial table lacks (with no don't-care of its own)
    reads as code 0, or 0.0 for raw outputs: every generated input runs, and what it gives depends on the
    bundle only.
    """
    hosts = any(n.kind.hosted for n in net.graph.nodes)
    layers, filled = {}, False
    for name, layer in net.layers.items():
        tables = []
        for table in layer.tables:
            if not table.is_dense and table.dont_care is None:
                table = copy.copy(table)
                table._dont_care = np.zeros(table.fan_out, dtype=table.outputs.dtype)
                filled = True
            tables.append(table)
        layers[name] = dataclasses.replace(layer, tables=tuple(tables))
    if hosts or filled:
        zeros = [
            dataclasses.replace(n, meta=dataclasses.replace(n.meta, module=_Zeros(n.shape)))
            for n in net.graph.host_nodes()
        ]
        runtime = Runtime(net.graph.replace(*zeros), layers)
    else:
        runtime = net.runtime  # compiled once, for the golden run and every run after it
    codes = runtime.encode(torch.from_numpy(values), codes=False, input_shape=net.input_shape)
    _, env = runtime.run(codes, capture=True)
    return {name: decode(env[name], net.graph[name]).to(torch.float32).numpy() for name in names}


def _golden(net: TableNetwork) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Generated inputs of the network's input domain and the values the network's table part makes of them.

    Sample 0 holds every input's first code, sample 1 its last, the rest random codes (a fixed seed); at most
    :data:`GOLDEN_SAMPLES` samples, fewer for large inputs.
    """
    node = net.input_node
    shape = net.input_shape
    per_sample = max(1, math.prod(shape))
    count = max(1, min(GOLDEN_SAMPLES, _GOLDEN_ELEMENTS // per_sample))
    domains = element_domains(node)
    sizes = np.asarray([len(d) for d in domains], dtype=np.int64)
    radix = np.broadcast_to(sizes, (per_sample,)) if len(domains) == 1 else sizes
    codes = (np.random.default_rng(0).random((count, per_sample)) * radix).astype(np.int64)
    codes[0] = 0
    if count > 1:
        codes[1] = radix - 1
    values = np.empty(codes.shape, dtype=np.float64)
    for d in dict.fromkeys(domains):
        columns = np.asarray([k for k, e in enumerate(domains) if e == d]) if len(domains) > 1 else slice(None)
        values[:, columns] = d.values[codes[:, columns]]
    values = values.reshape(count, *shape)
    return values, _run_probes(net, values, _probe_nodes(net.graph))
