"""The front-end-neutral part of splitting a linear layer into exact arithmetic (:mod:`.split`): from its weights
``W`` (outputs × inputs) and bias ``b`` as arrays, the exactness check, the partial-sum groups as arrays, the sum
node and the LUT estimates. The torch route reads ``W`` and ``b`` off a module, the QONNX route off the graph's
constants; both then build the same tables and the same sum node from here."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..bits import width as bits_of
from ..domain import Domain
from ..graph.nodes import Node, SumMeta
from ..layerplan import LayerPlan
from ..lutcount import adder_tree_luts, lut_estimate, threshold_luts
from ..nodekinds.sum import code_layout, sum_range
from ..subexpressions import shared_sum_luts
from .arithmetic import Inexact, affine_codes, dyadic_grid, integer_sum

__all__ = ["SPLIT_ROWS", "Groups", "Sums", "cheaper_split", "check_exact", "linear_sums"]

#: Tables of more rows than this are compared with the layer's arithmetic form (a 16-input table takes ABC ~17 s).
SPLIT_ROWS = 2**16
_EXACT = 2**24
#: Group sizes of partial-sum tables tried (1: the weights folded into the adder).
_GROUPS = (1, 2, 3, 4)


@dataclass(frozen=True)
class Groups:
    """Partial sums of codes: group ``j`` is ``sum_t weights[j, t] * code(x[index[j, t]]) - low[j]`` with
    ``code(x) = (x - v0) / d`` (``-1`` pads ``index``; ``low[j]`` the smallest partial sum of group ``j``)."""

    index: np.ndarray
    weights: np.ndarray
    v0: np.ndarray
    d: np.ndarray
    low: np.ndarray

    def fan_ins(self) -> list[tuple[int, ...]]:
        """The inputs each partial-sum table reads (its group's elements)."""
        return [
            tuple(int(i) for i, w in zip(row, ws) if i >= 0 and w != 0) or (int(max(row[0], 0)),)
            for row, ws in zip(self.index, self.weights)
        ]

    def values(self, x: np.ndarray) -> np.ndarray:
        """Every group's partial-sum code on rows of input values ``x`` (float64, exact integers)."""
        step = np.where(self.d == 0, 1.0, self.d)
        codes = np.round((np.asarray(x, np.float64) - self.v0) / step)
        weights = np.where(self.index >= 0, self.weights, 0).astype(np.float64)
        return (codes[:, np.maximum(self.index, 0)] * weights).sum(-1) - self.low


@dataclass
class Sums:
    """A layer as arithmetic: the partial-sum groups (``None`` for ``g = 1``) and their codes' domain, the sum
    node, the estimates."""

    group: int
    partial: Groups | None
    partial_domain: Domain | None
    sum_node: Node
    estimate: int
    table_estimate: int


def check_exact(w: np.ndarray, b: np.ndarray, src: Node, where: str) -> None:
    """Raise :class:`Inexact` unless ``W x + b`` on ``src``'s values is exact in float32 (see :mod:`.split`)."""
    if len(src.shape) != 1 or src.domain is None:
        msg = f"{where}: splits a layer of flat quantized features; {src.name!r} gives {src.shape} ({src.domain!r})"
        raise Inexact(msg)
    v0, d, radix = affine_codes(src, where)
    _check_exact(w, b, v0, d, radix, where)


def linear_sums(step_name: str, w: np.ndarray, b: np.ndarray, src: Node, where: str, *, k: int = 6) -> Sums:
    """The arithmetic form of ``W x + b`` on ``src``'s values (see :mod:`.split`); :class:`Inexact` naming the layer
    and why where its float32 sums may round."""
    check_exact(w, b, src, where)
    v0, d, radix = affine_codes(src, where)
    index = _rows(w != 0)
    alpha = np.where(index >= 0, w[np.arange(w.shape[0])[:, None], np.maximum(index, 0)] * d[np.maximum(index, 0)], 0)
    beta = b + w @ v0
    form = integer_sum(index, alpha, beta, radix, where)
    bits = np.array([max(1, int(r - 1).bit_length()) for r in radix])
    out_bits = max(1, int(form.high.max()).bit_length())
    table = sum(_table_estimate(int(bits[row[row >= 0]].sum()), out_bits, k) for row in index)
    options = [_option(g, form, index, bits, v0, d, radix) for g in _GROUPS]
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


def cheaper_split(estimate: int, total: Node, plan: LayerPlan) -> bool:
    """Whether a split layer (partial sums and adders of ``estimate`` LUTs, the sum node ``total``, then a table or
    thresholds per sum) costs fewer LUTs, by the estimates, than ``plan``'s tables."""
    out_bits = bits_of(plan.output_domain) if isinstance(plan.output_domain, Domain) else 32  # raw: no codes
    tables = sum(lut_estimate(_address_bits(u), out_bits) for u in plan.units)
    return estimate + _tail_estimate(total, out_bits) < tables


def _address_bits(unit: Any) -> int:
    """The address bits of a unit's table (of ``rows`` rows)."""
    return max(1, (int(unit.rows) - 1).bit_length())


def _tail_estimate(total: Node, out_bits: int) -> int:
    """LUTs of the rest of a split layer: a table or thresholds per sum (whichever is less); 0 for raw outputs."""
    if out_bits >= 32 or not isinstance(total.domain, Domain):
        return 0
    in_bits = max(1, (len(total.domain) - 1).bit_length())
    per_output = min(lut_estimate(in_bits, out_bits), threshold_luts(in_bits, 2**out_bits - 1, output_bits=out_bits))
    return int(per_output) * math.prod(total.shape)


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
    """Raise :class:`Inexact` unless the float32 sums of products are exact (see :mod:`.split`)."""
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


def _option(
    g: int, form: Any, index: np.ndarray, bits: np.ndarray, v0: np.ndarray, d: np.ndarray, radix: np.ndarray
) -> Sums | None:
    """The form with partial-sum tables over groups of ``g`` terms (``g = 1``: none), and its estimate."""
    meta = form.meta
    if g == 1:
        live = index >= 0
        out_bits = max(1, int(form.high.max()).bit_length())
        terms = [list(zip(index[o][live[o]].tolist(), meta.weights[o][live[o]].tolist())) for o in range(len(index))]
        estimate = shared_sum_luts(terms, [0] * len(index), bits.tolist(), [out_bits] * len(index))
        return Sums(1, None, None, Node("sum", meta.kind, (len(index),), None, None, meta), estimate, 0)
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
    partial = Groups(grouped, gweights, v0, d, low)
    domain = Domain(np.arange(span, dtype=np.float64))
    node = Node("sum", sum_meta.kind, (outputs,), None, None, sum_meta)
    return Sums(g, partial, domain, node, tables + adders, 0)
