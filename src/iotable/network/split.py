"""Layers too large for one table, split into exact arithmetic: partial sums, an adder tree and a threshold.

A linear layer (``nn.Linear``, brevitas' ``QuantLinear``) on quantized inputs computes, per output,
``sum_i W[o, i] * x[i] + b[o]``. Where its fan-in makes one table per neuron too large, and the float32 sum is
exact (every weight and input value a multiple of a power of two, and the sum of the magnitudes of the products
below ``2**24`` steps of their grid, so no product and no partial sum rounds, in any order), the layer becomes:

- tables of *partial sums* over groups of ``g`` inputs (each table the integer sum of its group's weighted codes),
  or, for ``g = 1``, the weights folded into the adder (shifts and adds, the pairs the outputs have in common
  shared: :mod:`iotable.subexpressions`);
- a ``sum`` node adding the partial sums and the bias (its values the layer's float32 outputs, exactly);
- the rest of the layer (batch norm, activation, its quantizer) as one table per output over the sum's codes,
  which becomes a ``threshold`` node where that is cheaper (:mod:`.thresholds`).

``g`` is chosen from the LUT estimates of the forms (:mod:`iotable.lutcount`), before any row is computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..brevitas import is_brevitas
from ..domain import Domain
from ..front.spec import decompose
from ..graph.fields import element_domains
from ..graph.nodes import Node, SumMeta
from ..lutcount import adder_tree_luts, lut_estimate
from ..nodekinds.sum import code_layout, sum_range
from ..subexpressions import shared_sum_luts
from .arithmetic import Inexact, affine_codes, dyadic_grid, integer_sum

__all__ = ["PartialSums", "Split", "linear_split"]

_EXACT = 2**24
#: Group sizes of partial-sum tables tried (1: the weights folded into the adder).
_GROUPS = (1, 2, 3, 4)


class PartialSums(nn.Module):
    """Integer partial sums of codes: output ``j`` is ``sum_t weights[j, t] * code(x[index[j, t]]) - low[j]`` with
    ``code(x) = (x - v0) / d`` (``-1`` pads ``index``; ``low[j]`` the smallest partial sum of group ``j``, so each
    group's codes start at 0). What a partial-sum table layer tabulates."""

    index: torch.Tensor
    weights: torch.Tensor
    v0: torch.Tensor
    step: torch.Tensor
    low: torch.Tensor

    def __init__(self, index: np.ndarray, weights: np.ndarray, v0: np.ndarray, d: np.ndarray, low: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float64))
        self.register_buffer("index", torch.as_tensor(np.maximum(index, 0), dtype=torch.int64))
        self.register_buffer("weights", torch.as_tensor(np.where(index >= 0, weights, 0), dtype=torch.float64))
        self.register_buffer("v0", torch.as_tensor(v0, dtype=torch.float64))
        self.register_buffer("step", torch.as_tensor(np.where(d == 0, 1.0, d), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        codes = torch.round((x.to(torch.float64) - self.v0) / self.step)
        return ((codes[:, self.index] * self.weights).sum(-1) - self.low).to(torch.float32)


@dataclass
class Split:
    """A layer as arithmetic: the partial-sum tables (``None`` for ``g = 1``), the sum node, the estimates."""

    group: int
    partial: PartialSums | None
    partial_domain: Domain | None
    sum_node: Node
    estimate: int
    table_estimate: int


def affine_weights(layer: nn.Module, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(W, b)`` a linear layer computes with, as float64 arrays: ``nn.Linear``'s, or brevitas' quantized ones."""
    module: Any = layer
    if is_brevitas(module):
        for flag in ("is_input_quant_enabled", "is_output_quant_enabled"):
            if getattr(module, flag, False):
                msg = f"{where}: quantizes its {flag.split('_')[1]} itself; put that quantizer in its own module"
                raise Inexact(msg)
        weight = module.quant_weight().value
        bias = module.quant_bias().value if getattr(module, "is_bias_quant_enabled", False) else module.bias
    elif type(module) is nn.Linear:
        weight, bias = module.weight, module.bias
    else:
        msg = f"{where}: a {type(module).__name__} is not a linear layer iotable reads the weights of"
        raise Inexact(msg)
    w = weight.detach().to(torch.float64).numpy()
    b = np.zeros(w.shape[0]) if bias is None else bias.detach().to(torch.float64).numpy().reshape(-1)
    return w, b


def linear_split(step_name: str, module: nn.Module, src: Node, where: str, *, k: int = 6) -> Split:
    """The arithmetic form of a linear layer reading ``src`` (see the module docstring); :class:`Inexact` naming the
    layer and why where its float32 sums may round."""
    if len(src.shape) != 1 or src.domain is None:
        msg = f"{where}: splits a layer of flat quantized features; {src.name!r} gives {src.shape} ({src.domain!r})"
        raise Inexact(msg)
    w, b = affine_weights(module, where)
    v0, d, radix = affine_codes(src, where)
    _check_exact(w, b, v0, d, radix, where)
    _check_weights(module, w, b, src, where)
    index = _rows(w != 0)
    alpha = np.where(index >= 0, w[np.arange(w.shape[0])[:, None], np.maximum(index, 0)] * d[np.maximum(index, 0)], 0)
    beta = b + w @ v0
    form = integer_sum(index, alpha, beta, radix, where)
    bits = np.array([max(1, int(r - 1).bit_length()) for r in radix])
    out_bits = max(1, int(form.high.max()).bit_length())
    table = sum(_table_estimate(int(bits[row[row >= 0]].sum()), out_bits, k) for row in index)
    options = [_option(g, form, index, bits, v0, d, radix, where) for g in _GROUPS]
    best = min((o for o in options if o is not None), key=lambda o: o.estimate)  # g = 1 always gives one
    best.table_estimate = table
    partial, domain = best.partial, best.partial_domain
    radix_in = np.full(len(partial.index), len(domain)) if partial is not None and domain is not None else radix
    _, high = sum_range(best.sum_node.meta, np.asarray(radix_in, np.int64))
    codes = np.arange(int(high.max()) + 1)  # a partial sum's codes may reach past its group's (unreachable codes)
    values = form.base + (codes - int(form.meta.constant[0])) * form.grid
    exact = (
        f"float32 products and sums on a grid of {dyadic_grid(np.concatenate([w.reshape(-1), b, v0, d])):g} "
        "below 2**24 steps are exact"
    )
    meta = best.sum_node.meta
    meta = SumMeta(meta.index_map, meta.weights, meta.constant, exact=exact, modules=(step_name,))
    shape = (w.shape[0],)
    best.sum_node = Node(f"{step_name}_sum", meta.kind, shape, code_layout(shape), Domain(values), meta)
    return best


def _rows(live: np.ndarray) -> np.ndarray:
    """Per row, the columns where ``live`` holds, padded with ``-1`` to the longest row."""
    width = max(int(live.sum(axis=1).max(initial=1)), 1)
    index = np.full((live.shape[0], width), -1, np.int64)
    for o in range(live.shape[0]):  # one row per neuron
        nz = np.flatnonzero(live[o])
        index[o, : len(nz)] = nz
    return index


def _table_estimate(input_bits: int, output_bits: int, k: int) -> int:
    """:func:`~iotable.lutcount.lut_estimate` of one table, past 64-bit integers in Python's (LogicNets' formula)."""
    if input_bits <= 60:
        return int(lut_estimate(input_bits, output_bits, k=k))
    return output_bits * (2 ** (input_bits - 4) - (-1) ** input_bits) // 3


def _check_exact(w: np.ndarray, b: np.ndarray, v0: np.ndarray, d: np.ndarray, radix: np.ndarray, where: str) -> None:
    """Raise :class:`Inexact` unless the float32 sums of products are exact (see the module docstring)."""
    gw, gx = dyadic_grid(w), dyadic_grid(np.concatenate([v0, d]))
    largest = np.maximum(np.abs(v0), np.abs(v0 + d * (radix - 1)))
    steps = (np.abs(w) / gw) @ (largest / gx) + np.abs(b) / (gw * gx)
    biased = np.all(np.mod(b, gw * gx) == 0)
    if gw == 0 or gx == 0 or not biased or float(steps.max(initial=0)) >= _EXACT:
        msg = (
            f"{where}: its float32 sums may round: weights on a grid of {gw:g}, inputs on {gx:g}, bias on "
            f"{dyadic_grid(b):g}, up to {float(steps.max(initial=0)):g} steps of the products' grid (float32 is "
            "exact below 2**24); quantize its weights and bias with power-of-two scales (brevitas: a fixed-point "
            "weight quantizer, e.g. Int8WeightPerTensorFixedPoint) so the sums are exact"
        )
        raise Inexact(msg)


def _check_weights(module: nn.Module, w: np.ndarray, b: np.ndarray, src: Node, where: str) -> None:
    """The layer computes ``W x + b`` with the weights read: on random inputs of its domain, exactly."""
    domains = element_domains(src)
    domains = domains * src.shape[0] if len(domains) == 1 else domains
    generator = np.random.default_rng(0)
    x = np.stack([generator.choice(d.values, 64) for d in domains], axis=1).astype(np.float32)
    with torch.no_grad():
        out = module(torch.from_numpy(x))
    got = getattr(out, "value", out).detach().to(torch.float64).numpy()
    if not np.array_equal(got, x.astype(np.float64) @ w.T + b):
        msg = f"{where}: its outputs differ from W x + b with the weights it holds; iotable cannot read it as linear"
        raise Inexact(msg)


def _option(
    g: int, form: Any, index: np.ndarray, bits: np.ndarray, v0: np.ndarray, d: np.ndarray, radix: np.ndarray, where: str
) -> Split | None:
    """The form with partial-sum tables over groups of ``g`` terms (``g = 1``: none), and its estimate."""
    meta = form.meta
    if g == 1:
        live = index >= 0
        out_bits = max(1, int(form.high.max()).bit_length())
        terms = [list(zip(index[o][live[o]].tolist(), meta.weights[o][live[o]].tolist())) for o in range(len(index))]
        estimate = shared_sum_luts(terms, [0] * len(index), bits.tolist(), [out_bits] * len(index))
        return Split(1, None, None, Node("sum", meta.kind, (len(index),), None, None, meta), estimate, 0)
    outputs, terms = index.shape
    groups = -(-terms // g)
    padded = np.full((outputs, groups * g), -1, np.int64)
    padded[:, :terms] = index
    weights = np.zeros_like(padded)
    weights[:, :terms] = meta.weights
    grouped, gweights = padded.reshape(outputs * groups, g), weights.reshape(outputs * groups, g)
    used = (grouped >= 0).any(axis=1)
    grouped, gweights = grouped[used], gweights[used]
    if len(grouped) == 0:
        return None
    low, high = sum_range(SumMeta(grouped, gweights, np.zeros(len(grouped), np.int64)), radix)
    span = int((high - low).max()) + 1
    if span > 2**16:
        return None
    in_bits = np.where(grouped >= 0, bits[np.maximum(grouped, 0)], 0).sum(axis=1)
    part_bits = max(1, (span - 1).bit_length())
    tables = int(lut_estimate(in_bits, part_bits).sum())
    owner = np.repeat(np.arange(outputs), groups)[used]
    per_output = [np.flatnonzero(owner == o) for o in range(outputs)]
    out_bits = max(1, int(form.high.max()).bit_length())
    adders = sum(adder_tree_luts([part_bits] * len(p), [1] * len(p), output_bits=out_bits) for p in per_output)
    # The sum node over the partial sums' codes (code = partial - its group's lowest): weights 1.
    width = max(len(p) for p in per_output)
    sum_index = np.full((outputs, width), -1, np.int64)
    for o, p in enumerate(per_output):  # one row per neuron
        sum_index[o, : len(p)] = p
    constant = meta.constant + np.array([int(low[p].sum()) for p in per_output], np.int64)
    sum_meta = SumMeta(sum_index, (sum_index >= 0).astype(np.int64), constant)
    partial = PartialSums(grouped, gweights, v0, d, low)
    domain = Domain(np.arange(span, dtype=np.float64))
    node = Node("sum", sum_meta.kind, (outputs,), None, None, sum_meta)
    del where
    return Split(g, partial, domain, node, tables + adders, 0)


def fan_ins(partial: PartialSums) -> list[tuple[int, ...]]:
    """The inputs each partial-sum table reads (its group's elements)."""
    index = partial.index.numpy()
    weights = partial.weights.numpy()
    return [tuple(int(i) for i, w in zip(row, ws) if w != 0) or (int(row[0]),) for row, ws in zip(index, weights)]


def declare(partial: PartialSums, domain: Domain) -> PartialSums:
    """``partial`` decorated as a table layer: each output one table of its group, codes of ``domain``."""
    decompose(partial, fan_in=fan_ins(partial), output_domain=domain)
    return partial
