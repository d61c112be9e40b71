"""``precompute`` of a QONNX model: the graph read and cut into planned layers (every check made first), then
every unit's rows computed exactly in float64 (in float32 from an average pool's or a residual add's sum on, as
the model computes them) and quantized by QONNX's rules."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from ..domain import Domain
from ..errors import ModelError, SpecOptionError
from ..graph.graph import DuplicateMeta, Graph, Node, wire
from ..network.network import TableNetwork
from ..network.thresholds import thresholds
from ..table import IOTable
from ..tabulate.layers import LayerTables
from ..units import DEFAULT_MAX_ROWS
from . import joins, pooling  # noqa: F401  (register their operations)
from .layers import Planned, Walk
from .quant import Thresholds
from .read import OnnxGraph, read_graph
from .state import node_of

__all__ = ["is_onnx_model", "plan_onnx", "precompute_onnx", "tabulate_layer", "unit_rows"]


def is_onnx_model(model: Any) -> bool:
    """Whether ``model`` is what this front end reads: a path (a string or path-like) or an ``onnx.ModelProto``."""
    if isinstance(model, (str, os.PathLike)):
        return True
    kind = type(model)
    return kind.__name__ == "ModelProto" and kind.__module__.startswith("onnx")


def precompute_onnx(
    model: Any,
    *,
    input_domain: Domain | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    what: str = "precompute",
    **ignored: Any,
) -> TableNetwork:
    """The table network of a QONNX model (a path to an ``.onnx`` file or an ``onnx.ModelProto``).

    The input domain is the first quantizer's; ``input_domain=``, when given, must be the same. Options of the
    torch front end that mean nothing here (``example_input``, ``host``, ``input_layout``) must be left unset.
    """
    for option in ("example_input", "input_layout", "cache_dir"):
        if ignored.get(option) is not None:
            msg = f"{what}: {option}= has no meaning for a QONNX model (the file fixes it); leave it unset"
            raise SpecOptionError(msg)
    if tuple(ignored.get("host") or ()):
        msg = f"{what}: host= has no meaning for a QONNX model; leave it unset"
        raise SpecOptionError(msg)
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        msg = f"{what}: max_rows must be a positive integer, received {max_rows!r}"
        raise SpecOptionError(msg)
    parsed, walk = plan_onnx(model, what=what, max_rows=max_rows)
    given = walk.nodes[0].domain
    if input_domain is not None and input_domain != given:
        msg = (
            f"{what}: input_domain={input_domain!r}, but the model's first quantizer gives {given!r}; leave "
            "input_domain unset (the file fixes it) or pass the same domain"
        )
        raise ModelError(msg)
    layers = {name: tabulate_layer(planned) for name, planned in walk.planned.items()}
    graph, layers = thresholds(_graph(walk), layers)  # quantizers after split layers' sums, as the torch route's
    return TableNetwork(graph=graph, layers=layers, input_shape=parsed.input_shape)


def _graph(walk: Walk) -> Graph:
    """The walk's nodes and edges, with a duplicate node after each node that several nodes read (a branch)."""

    def duplicate(node: Node, outputs: int) -> Node:
        dup = node_of(f"{node.name}:dup", DuplicateMeta(outputs=outputs), node.shape, node.domain)
        return replace(dup, layout=node.layout)

    return wire(walk.nodes, walk.reads, duplicate)


def plan_onnx(model: Any, *, what: str, max_rows: int = DEFAULT_MAX_ROWS) -> tuple[OnnxGraph, Walk]:
    """The parsed graph and its walk (nodes and planned layers, every check made), before any row."""
    parsed = read_graph(model, what=what)
    walk = Walk(parsed, what, max_rows)
    walk.run()
    return parsed, walk


def _codes(rows: int, radices: list[int]) -> np.ndarray:
    """Every row of a table of ``radices`` in address order (first input most significant)."""
    grid = np.indices(radices, dtype=np.int64).reshape(len(radices), rows)
    return grid.T


def unit_rows(planned: Planned, index: int, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Output codes, near-tie mask and values of unit ``index`` of a planned layer on rows ``codes``
    ``(rows, fan_in)``: the codes decoded, the layer's arithmetic in float64 (in float32 from an average pool's or
    a residual add's sum on, as the model computes it), the closing quantizer's rules.

    The arithmetic reads every input element of one unit's view: the features, or one window in channel-major
    order (channel, then kernel position); the unit's elements are its channels' (the others hold a fill value,
    which weights of 0 ignore)."""
    plan = planned.plan
    unit = plan.units[index]
    taps = plan.geometry.window
    fill = np.array([d.values[c] for d, c in zip(plan.input_domains, plan.fill_codes)], np.float64)
    x = np.repeat(np.repeat(fill, taps)[None, :], len(codes), axis=0)
    for column in range(codes.shape[1]):
        channel, tap = unit.in_channels[column // taps], column % taps
        values = np.asarray(plan.input_domains[channel].values, np.float64)
        x[:, channel * taps + tap] = values[codes[:, column]]
    y = x
    for step in planned.steps:
        y = step(y)
    values = y[:, unit.out_channels[0]]
    if not np.all(np.isfinite(values)):
        msg = f"{plan.name}: unit {unit.index} computes values that are not finite; check the model's constants"
        raise ModelError(msg)
    closing = planned.closing
    if isinstance(closing, Thresholds):
        out, near = closing.codes(values, unit.out_channels[0])
    else:
        out, near = closing.codes(values, float32=planned.float32)
    return out, near, values


def tabulate_layer(planned: Planned) -> LayerTables:
    """Every unit's dense table: its input codes decoded, the layer's arithmetic on them (:func:`unit_rows`), the
    closing quantizer's rules (QONNX's rounding, ``>=`` thresholds) giving the output codes."""
    plan = planned.plan
    output = plan.output_domain
    assert isinstance(output, Domain)
    tables = []
    near_ties = 0
    for unit in plan.units:
        domains = [plan.input_domains[c] for c in unit.in_channels for _ in range(plan.geometry.window)]
        out, near, _ = unit_rows(planned, unit.index, _codes(unit.rows, [len(d) for d in domains]))
        near_ties += int(near.sum())
        dtype = np.uint8 if len(output) <= 256 else np.int64
        tables.append(
            IOTable.dense(
                out.astype(dtype)[:, None],
                input_domains=domains,
                output_domain=output,
                layer=plan.name,
                unit=unit.index,
            )
        )
    return LayerTables(plan=plan, tables=tuple(tables), method="QONNX exact", near_ties=near_ties)
