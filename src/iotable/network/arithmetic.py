"""Arithmetic nodes from the model: sums of codes (with the affine arithmetic after them) and argmax.

A sum becomes a ``sum`` node only where the integer hardware provably gives the model's own values:

- the elements it adds have values affine in their codes (``v = v0 + d * code``), so the sum of values is an
  integer sum of codes times small integer weights plus a constant, on one grid ``g`` for all outputs;
- the model's float32 sum of those values is exact: every value is a multiple of a power of two ``q`` and the
  sum of their magnitudes stays below ``2**24 * q``, so no partial sum rounds, in any order;
- the arithmetic after the sum (``/ tau``, ``+ bias``: a scalar function of each output's sum) is run in
  float32 on *every* sum each output can reach, and the node's domain holds exactly those float32 results, one
  value per code for all outputs, ascending.

Anything else stays what it was before: a table of the sum's inputs (:class:`SumHead`, exact by enumeration,
where it fits), with a warning that says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import torch
from torch import nn

from ..domain import Domain
from ..errors import ModelError
from ..front.segment import Step
from ..graph.fields import element_domains
from ..graph.nodes import ArgmaxMeta, Node, SumMeta
from ..nodekinds.argmax import argmax_shape
from ..nodekinds.sum import MAX_CODES, MAX_WEIGHT, code_layout, sum_range

__all__ = [
    "Inexact", "IntegerSum", "SumHead", "affine_codes", "argmax_node", "dyadic_grid", "integer_sum", "sum_node",
]  # fmt: skip

#: float32 adds integers exactly below this many grid steps.
_EXACT = 2**24
#: The most (output, sum) pairs the arithmetic after a sum is checked on.
_CHECKED = 2**24
#: Elements of one batch of that check.
_CHUNK = 2**22


class Inexact(ModelError):
    """A sum whose integer form would not give the model's values (the message says why)."""


class SumHead(nn.Module):
    """A sum step as a module: the codes' values viewed as ``in_shape``, summed over ``dims``, then the arithmetic
    after it (what a sum that is no ``sum`` node tabulates)."""

    def __init__(self, in_shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool, after: list[nn.Module]) -> None:
        super().__init__()
        self.in_shape, self.dims, self.keepdim = in_shape, dims, keepdim
        self.after = nn.ModuleList(after)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.reshape(x.shape[0], *self.in_shape).sum(dim=tuple(d + 1 for d in self.dims), keepdim=self.keepdim)
        return _post(list(self.after), s)


def sum_groups(step: Step) -> np.ndarray:
    """The flat input elements each output of a sum step adds, one row per output."""
    in_shape, dims = tuple(step.meta["in_shape"]), tuple(step.meta["dims"])
    kept = [a for a in range(len(in_shape)) if a not in dims]
    elements = np.arange(math.prod(in_shape)).reshape(in_shape).transpose(*kept, *dims)
    return elements.reshape(math.prod([in_shape[a] for a in kept]), -1)


def affine_codes(src: Node, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(v0, d, radix)`` of every element of ``src``: its value is ``v0 + d * code``, ``radix`` codes."""
    domains = element_domains(src)
    size = math.prod(src.shape)
    firsts, steps, radix = [], [], []
    for domain in set(domains):
        values = domain.values
        step = float(values[1] - values[0]) if len(values) > 1 else 0.0
        if len(values) > 2 and not np.all(np.diff(values) == step):
            msg = (
                f"{where}: the values of {src.name!r} ({domain!r}) are not equally spaced, so their sum is no integer "
                "sum of codes; quantize them uniformly (a power-of-two scale) before the sum"
            )
            raise Inexact(msg)
    for domain in domains:
        values = domain.values
        firsts.append(float(values[0]))
        steps.append(float(values[1] - values[0]) if len(values) > 1 else 0.0)
        radix.append(len(values))
    v0, d, r = (np.asarray(a) for a in (firsts, steps, radix))
    if len(domains) == 1:
        v0, d, r = (np.broadcast_to(a, (size,)) for a in (v0, d, r))
    return v0.astype(np.float64), d.astype(np.float64), r.astype(np.int64)


@dataclass(frozen=True)
class IntegerSum:
    """Sums of values as integer sums of codes: ``meta`` (weights and constants; codes from 0), the value of one
    code step (``grid``, negative where values fall as codes rise) and each output's lowest and highest code."""

    meta: SumMeta
    grid: float
    low: np.ndarray
    high: np.ndarray

    def values(self) -> np.ndarray:
        """The value of every code, where the sums are exact: the first output's value at its constant, plus
        the steps (one grid for all outputs)."""
        codes = np.arange(int(self.high.max()) + 1)
        return self.base + (codes - int(self.meta.constant[0])) * self.grid

    base: float = 0.0


def integer_sum(
    index: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
    radix: np.ndarray,
    where: str,
    *,
    modules: tuple[str, ...] = (),
) -> IntegerSum:
    """Output ``k`` is worth ``beta[k] + sum_j alpha[k, j] * code(index[k, j])`` (``-1`` pads ``index``): the same as
    integer weights on one grid, and constants that put every output's lowest code at 0 or above. Raises
    :class:`Inexact` where no grid holds the weights and constants as small integers."""
    live = index >= 0
    terms = [Fraction(float(v)) for v in alpha[live].reshape(-1)]
    g = _grid(terms + [Fraction(float(v - beta[0])) for v in beta])
    g_float = float(g)  # codes ascend with values
    weights = np.where(live, np.rint(alpha / g_float), 0).astype(np.int64)
    offsets = (beta - beta[0]) / g_float
    exact = np.all(weights[live] * g_float == alpha[live]) and np.all(np.rint(offsets) * g_float == beta - beta[0])
    if not exact or np.abs(weights).max(initial=0) > MAX_WEIGHT or np.abs(offsets).max(initial=0) > MAX_CODES:
        msg = (
            f"{where}: the weights and constants of the sum have no common grid (grid {float(g):g}); the constants "
            "after the sum (a bias) must be on the grid of the summed values"
        )
        raise Inexact(msg)
    index = np.where(live, index, -1).astype(np.int64)
    constant = np.rint(offsets).astype(np.int64)
    low, _ = sum_range(SumMeta(index, weights, constant), radix)
    shift = int(low.min())
    meta = SumMeta(index, weights, constant - shift, modules=modules)
    low, high = sum_range(meta, radix)
    if int(high.max()) + 1 > MAX_CODES:
        msg = f"{where}: the sum reaches {int(high.max()) + 1:,} codes; at most {MAX_CODES:,} are supported"
        raise Inexact(msg)
    return IntegerSum(meta, g_float, low, high, base=float(beta[0]))


def dyadic_grid(values: np.ndarray) -> float:
    """The largest power of two of which every value is an integer multiple (``0`` for none: a value is no
    finite binary fraction, which no float is not).

    Example:
        >>> dyadic_grid(np.array([0.75, 3.0, -1.5])), dyadic_grid(np.array([0.0]))
        (0.25, 1.0)
    """
    nonzero = [Fraction(float(v)) for v in np.unique(np.abs(values)) if v]
    if not nonzero:
        return 1.0
    exponent = min(_two_adic(v.numerator) - _two_adic(v.denominator) for v in nonzero)
    return math.ldexp(1.0, exponent)


def _two_adic(n: int) -> int:
    return (n & -n).bit_length() - 1


def _grid(values: list[Fraction]) -> Fraction:
    """The largest ``g`` of which every value is an integer multiple (``1`` when all are zero)."""
    nonzero = [abs(v) for v in values if v]
    if not nonzero:
        return Fraction(1)
    denominator = math.lcm(*(v.denominator for v in nonzero))
    return Fraction(math.gcd(*(int(v * denominator) for v in nonzero)), denominator)


def _post(modules: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for m in modules:
        x = m(x)
    return x


def sum_node(name: str, step: Step, src: Node) -> Node:
    """The ``sum`` node of a sum step reading ``src`` (see the module's docstring); :class:`Inexact` naming the
    step and the reason where the integer sum would not be the model's."""
    where = step.meta.get("where") or step.name
    in_shape, dims = tuple(step.meta["in_shape"]), tuple(step.meta["dims"])
    if src.domain is None:
        msg = (
            f"{where}: sums the raw (unquantized) outputs of {src.name!r}; put a Quantize before the sum, or declare "
            f"the layer's output domain (iotable.decompose(..., output_domain=...))"
        )
        raise ModelError(msg)
    if in_shape != src.shape:
        msg = f"{where}: a sum reads codes of shape {in_shape}; {src.name!r} gives {src.shape}"
        raise ModelError(msg)
    v0, d, radix = affine_codes(src, where)
    index = sum_groups(step)
    outputs = len(index)
    # The arithmetic after the sum: out = a * s + b per output (checked affine on two more sums).
    summed = _sum_shape(in_shape, dims, step.meta["keepdim"])
    probe = torch.tensor([0.0, 1.0, 2.0, -3.0], dtype=torch.float64).reshape(4, *([1] * len(summed)))
    with torch.no_grad():
        y = _post(step.modules, probe.expand(4, *summed)).reshape(4, -1)
    if y.shape[1] != outputs:
        got = tuple(y.shape[1:])
        msg = f"{where}: the arithmetic after the sum changes its shape to {got}; expected {outputs} outputs"
        raise Inexact(msg)
    probed = y.numpy()
    b, a = probed[0], probed[1] - probed[0]
    affine = np.allclose(probed[2], b + 2 * a, rtol=1e-12, atol=0) and np.allclose(
        probed[3], b - 3 * a, rtol=1e-12, atol=0
    )
    if not affine:
        msg = f"{where}: the arithmetic after the sum is not affine in it"
        raise Inexact(msg)
    alpha = a[:, None] * d[index]  # value per code of each term
    beta = a * v0[index].sum(axis=1) + b
    exact_q = dyadic_grid(np.concatenate([v0, d]))
    magnitude = float(np.abs(np.stack([v0, v0 + d * (radix - 1)])).max(axis=0)[index].sum(axis=1).max(initial=0))
    if exact_q == 0 or magnitude > _EXACT * exact_q:
        msg = (
            f"{where}: the model's float32 sum of values of {src.name!r} may round (values on a grid of "
            f"{exact_q:g} up to {magnitude:g} in magnitude: float32 adds at most 2**24 steps exactly); quantize "
            "them on a power-of-two grid or sum fewer"
        )
        raise Inexact(msg)
    form = integer_sum(index, alpha, beta, radix, where, modules=tuple(step.module_names))
    meta, low, high = form.meta, form.low, form.high
    if int((high - low + 1).sum()) > _CHECKED:
        msg = f"{where}: the sum's outputs reach {int((high - low + 1).sum()):,} codes in all; at most {_CHECKED:,}"
        raise Inexact(msg)
    weights, constant, g_float = meta.weights, meta.constant, form.grid
    values = _values(step, meta, low, high, beta, a, g_float, v0[index].sum(axis=1), where)
    checked = int((high - low + 1).sum())
    exact = (
        f"float32 sums of multiples of {float(exact_q):g} below 2**24 of them are exact; the arithmetic after them "
        f"checked on all {checked:,} reachable sums"
    )
    meta = SumMeta(meta.index_map, weights, constant, exact=exact, modules=meta.modules)
    shape = tuple(step.shape)
    return Node(name, meta.kind, shape, code_layout(shape), Domain(values), meta)


def _sum_shape(in_shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    return tuple(1 if a in dims else n for a, n in enumerate(in_shape) if keepdim or a not in dims)


def _values(
    step: Step,
    meta: SumMeta,
    low: np.ndarray,
    high: np.ndarray,
    beta: np.ndarray,
    a: np.ndarray,
    g: float,
    first_sum: np.ndarray,
    where: str,
) -> np.ndarray:
    """The model's float32 value of every code: the arithmetic after the sum run in float32 on every sum each
    output reaches; the same value for a code whatever the output, ascending."""
    codes = int(high.max()) + 1
    value = np.full(codes, np.nan)
    shape = _sum_shape(tuple(step.meta["in_shape"]), tuple(step.meta["dims"]), step.meta["keepdim"])
    span = high - low + 1
    m = np.concatenate([np.arange(lo, hi + 1) for lo, hi in zip(low.tolist(), high.tolist())])
    k = np.repeat(np.arange(len(low)), span)
    # code m of output k: value g * (m - constant[k]) + beta[k]; its sum before the arithmetic, exactly:
    raw = first_sum[k] + (m - meta.constant[k]) * (g / a[k])
    if not np.array_equal(raw.astype(np.float32).astype(np.float64), raw):
        msg = f"{where}: a sum of the model's values is not a float32 number"
        raise Inexact(msg)
    got = np.empty(len(m))
    rows = max(1, _CHUNK // max(1, len(low)))
    for start in range(0, len(m), rows):  # chunks of sums, every output in each (the arithmetic broadcasts)
        part = slice(start, start + rows)
        n = len(m[part])
        batch = np.zeros((n, len(low)), np.float32)
        batch[np.arange(n), k[part]] = raw[part]
        with torch.no_grad():
            out = _post(step.modules, torch.from_numpy(batch).reshape(n, *shape)).reshape(n, -1)
        got[part] = out.numpy()[np.arange(n), k[part]]
    codes_seen, first = np.unique(m, return_index=True)
    value[codes_seen] = got[first]
    clash = got != value[m]
    if clash.any():
        j = int(np.flatnonzero(clash)[0])
        msg = (
            f"{where}: the arithmetic after the sum gives output {int(k[j])} the value {got[j]!r} where another output "
            f"of the same sum has {value[m[j]]!r}; outputs whose arithmetic rounds differently cannot share codes"
        )
        raise Inexact(msg)
    gaps = np.isnan(value)
    value[gaps] = (np.flatnonzero(gaps) - meta.constant[0]) * g + beta[0]  # codes no output reaches
    if not np.all(np.diff(value) > 0):
        msg = f"{where}: the model's values of the sum do not ascend with it (float32 rounding merges two sums)"
        raise Inexact(msg)
    return value


def argmax_node(name: str, step: Step, src: Node) -> Node:
    """The ``argmax`` node of an argmax step reading the codes of ``src``."""
    where = step.meta.get("where") or step.name
    if src.domain is None or len(set(element_domains(src))) != 1:
        msg = (
            f"{where}: an argmax compares codes of one domain; {src.name!r} gives "
            f"{'raw values' if src.domain is None else 'elements of different domains'}; quantize its input with "
            f"one quantizer, or list the module in host= to decide with torch"
        )
        raise ModelError(msg)
    dim, keepdim = int(step.meta["dim"]), bool(step.meta["keepdim"])
    shape = argmax_shape(src.shape, dim, keepdim)
    meta = ArgmaxMeta(dim, keepdim, modules=(step.name,))
    return Node(name, meta.kind, shape, code_layout(shape), Domain(range(src.shape[dim])), meta)


def describe(meta: Any) -> str:
    """One line on an arithmetic node's exactness, for summaries."""
    return getattr(meta, "exact", "") or ""
