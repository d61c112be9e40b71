"""Layers that end in a sum of per-edge values (KANELÉ), split into edge tables and an adder tree.

A layer of the user's own whose output is ``edges.sum(dim)`` of a tensor ``edges`` in which every element depends
on one input (a KAN layer: per edge a 1-D function of one quantized input, per neuron the sum of its edges) is,
where one table per neuron would be too large:

- one table per edge (fan-in 1), tabulating ``edges`` as the module computes it (:class:`Edges` runs the module
  and returns the tensor its last sum reads), its codes on the grid of the edges' values;
- a ``sum`` node per neuron over its edges (edges that depend on no input are constants in it);
- the rest of the layer (its quantizer) as a table per neuron over the sum's codes, or a ``threshold`` node.

The edges' values must lie on one power-of-two grid (KANELÉ quantizes each edge's output to fixed point), so
that the model's float32 sum is exact; else the layer is refused with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ..bits import field_width
from ..domain import Domain
from ..front.dependence import dependence
from ..front.infer import units_of
from ..front.spec import decompose
from ..graph.fields import element_domains
from ..graph.nodes import Node, SumMeta
from ..lutcount import adder_tree_luts, lut_estimate
from ..nodekinds.sum import code_layout
from .arithmetic import Inexact, dyadic_grid, integer_sum

__all__ = ["EdgeSplit", "Edges", "edge_split"]

_SUMS = {torch.ops.aten.sum.dim_IntList}
_EXACT = 2**24
#: The most codes the edges' grid may hold.
_EDGE_CODES = 2**16


class _LastSum(TorchDispatchMode):
    """Keeps the operand, dims and result of the last ``sum`` over dims a forward runs."""

    def __init__(self) -> None:
        super().__init__()
        self.last: tuple[torch.Tensor, tuple[int, ...], torch.Tensor] | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in _SUMS and not (kwargs or {}).get("dtype") and len(args) >= 2:
            dims = tuple(int(d) % args[0].dim() for d in args[1])
            keep = bool(args[2]) if len(args) > 2 else bool((kwargs or {}).get("keepdim", False))
            self.last = (args[0], dims, out) if not keep else None
        return out


class Edges(nn.Module):
    """The per-edge values of a layer that sums them: the operand of its last ``sum``, flat per sample."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        edges, _, _ = _captured(self.layer, x)
        return edges.reshape(edges.shape[0], -1)


def _captured(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...], torch.Tensor]:
    mode = _LastSum()
    with mode:
        out = layer(x)
    if mode.last is None or mode.last[2].data_ptr() != out.data_ptr() or mode.last[2].shape != out.shape:
        msg = "its output is not the sum of a tensor over some of its axes"
        raise Inexact(msg)
    edges, dims, _ = mode.last
    if dims != tuple(range(edges.dim() - len(dims), edges.dim())) or 0 in dims:
        msg = f"its last sum runs over axes {dims} of the edges {tuple(edges.shape)}; expected the last axes"
        raise Inexact(msg)
    return edges, dims, out


class EdgeSplit:
    """A layer as edge tables, their output domain, the sum node over them, and the LUT estimate of both."""

    def __init__(self, edges: Edges, domain: Domain, live: np.ndarray, sum_node: Node, estimate: int) -> None:
        self.edges, self.domain, self.live, self.sum_node = edges, domain, live, sum_node
        self.estimate = estimate


def edge_split(step_name: str, layer: nn.Module, src: Node, where: str) -> EdgeSplit:
    """The edge form of ``layer`` reading ``src`` (see the module docstring); :class:`Inexact` naming the layer and
    why it has none."""
    if len(src.shape) != 1 or src.domain is None:
        raise Inexact(f"{where}: splits layers of flat quantized features; {src.name!r} gives {src.shape}")
    domains = element_domains(src)
    domains = domains * src.shape[0] if len(domains) == 1 else domains
    features = src.shape[0]
    generator = np.random.default_rng(0)
    example = torch.tensor(np.stack([[d.values[generator.integers(len(d))] for d in domains] for _ in range(2)]))
    try:
        with torch.no_grad():
            edges, dims, out = _captured(layer, example.float())
    except Inexact as exc:
        raise Inexact(f"{where}: {exc}") from None
    per_output = int(np.prod(edges.shape[edges.dim() - len(dims) :]))
    wrapper = Edges(layer)
    with torch.no_grad():
        found = dependence(wrapper, example.float())
    fan_in, _ = units_of(found)
    reads = [found.fan_in(e) for e in range(len(fan_in))]
    if any(len(r) > 1 for r in reads):
        raise Inexact(f"{where}: an edge of its sum depends on {max(len(r) for r in reads)} inputs; expected one")
    # Every edge's value at every value of its input: all inputs at the same code, one sample per code.
    if len(set(domains)) != 1:
        raise Inexact(f"{where}: its inputs have different domains; edges are split over one domain")
    values = torch.tensor(domains[0].values, dtype=torch.float32)[:, None].expand(-1, features).contiguous()
    with torch.no_grad():
        table = wrapper(values).to(torch.float64).numpy()  # (codes, edges)
    domain = _edge_domain(table, where)
    live = np.array([len(r) == 1 for r in reads])
    constant = table[0] * ~live  # an edge that reads no input: its value, in the sum's constant
    outputs = len(reads) // per_output
    index = np.where(live, np.arange(len(reads)), -1).reshape(outputs, per_output)
    step = float(domain.values[1] - domain.values[0]) if len(domain) > 1 else 1.0
    alpha = np.where(index >= 0, step, 0.0)
    beta = (np.where(index >= 0, domain.values[0], 0.0) + constant.reshape(outputs, per_output)).sum(axis=1)
    _check_exact(domain, per_output, where)
    form = integer_sum(index, alpha, beta, np.full(len(reads), len(domain), np.int64), where)
    exact = (
        f"float32 sums of {per_output} edges on a grid of {dyadic_grid(domain.values):g} below 2**24 steps are exact"
    )
    meta = SumMeta(form.meta.index_map, form.meta.weights, form.meta.constant, exact=exact, modules=(step_name,))
    shape = tuple(out.shape[1:])
    node = Node(f"{step_name}_sum", meta.kind, shape, code_layout(shape), Domain(form.values()), meta)
    decompose(wrapper, fan_in=[tuple(r) or (0,) for r in reads], output_domain=domain)
    in_bits, edge_bits = field_width(len(domains[0])), field_width(len(domain))
    estimate = int(live.sum()) * int(lut_estimate(in_bits, edge_bits))
    sum_bits = field_width(len(node.domain)) if isinstance(node.domain, Domain) else 1
    for row in index:  # one adder tree per neuron
        terms = int((row >= 0).sum())
        estimate += adder_tree_luts([edge_bits] * terms, [1] * terms, output_bits=sum_bits)
    return EdgeSplit(wrapper, domain, live, node, estimate)


def _edge_domain(table: np.ndarray, where: str) -> Domain:
    """The codes of the edges: every multiple of their power-of-two grid from the lowest value to the highest."""
    low, high = float(table.min()), float(table.max())
    grid = dyadic_grid(table.reshape(-1) - low) if high > low else 1.0
    if grid == 0 or (high - low) / grid + 1 > _EDGE_CODES or dyadic_grid(np.array([low])) < grid / 2**24:
        msg = (
            f"{where}: its edges' values ({low:g} .. {high:g}) are on no power-of-two grid of at most {_EDGE_CODES:,} "
            "steps; quantize each edge's output to fixed point (as KANELÉ does) so that their sum is exact"
        )
        raise Inexact(msg)
    return Domain(low + grid * np.arange(round((high - low) / grid) + 1))


def _check_exact(domain: Domain, terms: int, where: str) -> None:
    grid = dyadic_grid(domain.values)
    largest = float(np.abs(domain.values).max()) * terms
    if grid == 0 or largest / grid >= _EXACT:
        msg = f"{where}: the float32 sum of {terms} edges up to {largest:g} on a grid of {grid:g} may round"
        raise Inexact(msg)
