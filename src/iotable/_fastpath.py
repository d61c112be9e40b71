"""Structured fast paths for linear layers: ``Linear`` or ``Conv1d``/``Conv2d``, elementwise modules, ``Quantize``.

The black-box enumerator runs the whole layer once per colour of units; for a LogicNets-style sparse layer
most of that work multiplies zeros. Here each output channel is a *column*: its pre-activation over all rows
of its unit's table is a sum of one term per input (the weight times the input's value), so rows are outer
sums of small per-input tables, and the codes follow from the tail (batch norm, clamps, the quantizer).

Exactness (``docs/exactness.md``). A float32 sum of ``f`` products and a bias, in whatever order a kernel adds
them (adding the exact zeros of pruned weights changes nothing), lies within
``E = (f + 2) * u * (sum |w x| + |b|)`` of the exact sum (``u = 2**-24``; twice that for convolutions). Two
kernels turn pre-activations into codes:

- *Affine tails* (batch norm, ReLU, ReLU6, hardtanh, identity, dropout, any number of them, then
  ``Quantize``) are a per-channel affine map between two clamps, so the quantizer's rounding argument is
  ``phi = gain * z + offset`` and the code is ``floor(phi)`` clamped to the channel's reachable codes.
  ``phi`` is summed in fixed point (int32, ``F`` fraction bits) as outer sums of per-input terms. A row is
  proved when ``phi`` lies further than a margin ``mu`` from every integer, where ``mu`` covers the float32
  error of the layer (``E`` through the gain), the float32 error of the tail's own arithmetic (bounded per
  module) and the fixed-point rounding: then every float32 evaluation of the layer, on any batch, gives
  that code. The few rows within ``mu`` of an integer are recomputed in float64 with their own bounds;
  those still within them lie within float rounding of a quantization boundary and are computed through the
  module itself, exactly as the black-box path would (``LayerTables.near_ties``). The analytic tail is checked
  against the modules themselves on both sides of every boundary before it is used.
- *Other monotone tails* (sigmoid, tanh, leaky ReLU): the tail modules run on the pre-activation at both
  ends of ``[exact - E, exact + E]``; where the two codes agree the row is proved, the rest go through the
  module.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import prune

from .errors import EnumerationError
from .nn import Quantize
from .plan import LayerPlan, Unit, window_mismatch
from .spec import ELEMENTWISE
from .table import place_values

__all__ = ["CodeBlock", "FastPath", "recognize"]

_EPS32 = float(np.finfo(np.float32).eps)
_U32 = _EPS32 / 2  # unit roundoff of float32
# Elements of one fixed-point chunk (two int32 buffers): large enough that the few microseconds each torch call
# costs stay small next to its work (measured: 2**19-2**20 best, 2**14 four times slower), within L3 cache.
_CHUNK = 2**19
# Fraction bits of the fixed-point rounding argument; fewer when the argument's range needs them.
_MAX_FRACTION_BITS = 16
_MIN_FRACTION_BITS = 8
# Modules of an affine tail: per-channel affine maps and clamps (their float32 error is bounded below).
_CLAMPS: dict[type[nn.Module], Callable[[nn.Module], tuple[float, float]]] = {
    nn.ReLU: lambda m: (0.0, math.inf),
    nn.ReLU6: lambda m: (0.0, 6.0),
    nn.Hardtanh: lambda m: (float(m.min_val), float(m.max_val)),
}
_IDENTITIES = (nn.Identity, nn.Dropout)


def _parts(module: nn.Module) -> list[nn.Module]:
    if isinstance(module, nn.Sequential):
        return [p for m in module for p in _parts(m)]
    return [module]


def _weight(layer: nn.Module) -> torch.Tensor:
    # With torch.nn.utils.prune the effective weight is weight_orig * weight_mask (recomputed at forward).
    if hasattr(layer, "weight_orig") and hasattr(layer, "weight_mask"):
        return layer.weight_orig * layer.weight_mask
    return layer.weight


def _ieee_float32() -> bool:
    """Whether float32 matrix products and convolutions run in float32 (no TF32 / bfloat16 shortcuts)."""
    if torch.get_float32_matmul_precision() != "highest":
        return False
    settings = [getattr(torch.backends, "fp32_precision", "none")]
    mkldnn = getattr(torch.backends, "mkldnn", None)
    for part in (mkldnn, getattr(mkldnn, "matmul", None), getattr(mkldnn, "conv", None)):
        settings.append(getattr(part, "fp32_precision", "none"))
    return all(s in ("none", "ieee") for s in settings)


def _hooked(modules: list[nn.Module]) -> bool:
    """Whether a forward hook (other than torch's pruning) could change what the modules compute."""
    from torch.nn.modules import module as torch_module

    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return True
    for m in modules:
        if m._forward_hooks or getattr(m, "_forward_hooks_with_kwargs", None):
            return True
        if any(not isinstance(h, prune.BasePruningMethod) for h in m._forward_pre_hooks.values()):
            return True
    return False


@dataclass(frozen=True)
class _Group:
    """Units whose inputs have the same domains: one combination set, one column per output channel."""

    units: tuple[Unit, ...]
    channels: np.ndarray  # (K,) output channel of each column
    reads: np.ndarray  # (K, channels per unit) input channels of each column's unit
    domains: tuple[Any, ...]  # the shared input domains, in input order
    radices: np.ndarray  # (f,) codes per input
    values: tuple[np.ndarray, ...]  # per input, its domain's values (float64)
    value_matrix: np.ndarray | None  # (f, n) the same values when every input has n of them
    peak: np.ndarray  # (f,) largest magnitude of each input's values
    place: np.ndarray  # (f,) place value of each input's code in a row number
    frame_inputs: np.ndarray  # (K, f) each column's inputs in a frame sample (first slot)
    frame_outputs: np.ndarray  # (K,) each column's output in a frame output (first slot)

    @classmethod
    def of(cls, layer: LayerPlan, units: list[Unit]) -> list[_Group]:
        groups: dict[tuple[Any, ...], list[Unit]] = {}
        for unit in units:
            groups.setdefault(layer.unit_domains(unit), []).append(unit)
        found = []
        for domains, members in groups.items():
            channels = np.asarray([c for u in members for c in u.out_channels], dtype=np.int64)
            reads = np.asarray([u.in_channels for u in members for _ in u.out_channels], dtype=np.int64)
            radices = np.asarray([len(d) for d in domains], dtype=np.int64)
            found.append(
                cls(
                    units=tuple(members),
                    channels=channels,
                    reads=reads,
                    domains=domains,
                    radices=radices,
                    values=tuple(d.values for d in domains),
                    value_matrix=np.stack([d.values for d in domains]) if len(set(radices.tolist())) == 1 else None,
                    peak=np.asarray([np.abs(d.values).max() for d in domains]),
                    place=place_values(radices),
                    frame_inputs=layer.input_indices(reads)[:, 0],
                    frame_outputs=layer.output_indices(channels)[0],
                )
            )
        return found

    @property
    def rows(self) -> int:
        return math.prod(len(d) for d in self.domains)

    @property
    def split(self) -> int:
        """How many leading inputs form the prefix: the trailing ones give at least 256 rows when they can."""
        radices = [len(d) for d in self.domains]
        split = len(radices)
        while split > 0 and math.prod(radices[split:]) < 256:
            split -= 1
        return split


@dataclass(frozen=True)
class _Structure:
    """What makes a layer eligible, read once per plan: its modules and its column groups."""

    head: nn.Module
    tail: tuple[nn.Module, ...]  # elementwise modules, the last one the quantizer
    kind: str  # "linear" or "conv"
    groups: list[_Group]  # of all the layer's units
    read_index: np.ndarray  # flat indices of the (output, input) pairs some unit reads
    fill: np.ndarray  # (frame elements,) float32: each element's value of real 0 (code 0 without one)


def _structure(module: nn.Module, layer: LayerPlan) -> _Structure | None:
    """The layer's :class:`_Structure` if its module types and plan fit a fast path (kept on the plan)."""
    memo = layer.memo
    key = ("fast path", id(module))
    if key not in memo:
        memo[key] = _read_structure(module, layer)
    return memo[key]


def _read_structure(module: nn.Module, layer: LayerPlan) -> _Structure | None:
    parts = _parts(module)
    if layer.output_domain is None or len(parts) < 2:
        return None
    head, tail = parts[0], tuple(parts[1:])
    if type(head) not in (nn.Linear, nn.Conv1d, nn.Conv2d) or type(tail[-1]) is not Quantize:
        return None
    # Every built-in elementwise module is monotone per channel; subclasses may override forward.
    if not all(type(m) in ELEMENTWISE for m in tail):
        return None
    g = layer.geometry
    if type(head) is nn.Linear:
        if g.rank or (head.out_features, head.in_features) != (layer.out_channels, layer.in_channels):
            return None
    else:
        # The fast path reads the kernel's weights, not the window, so every declared field (kernel, stride,
        # dilation, padding before and after, padding mode, channels-first layout) must be the convolution's
        # own: `plan` refuses any other, and a plan made otherwise is left to the black box and the probe.
        # Units finer than the conv's groups leave non-zero weights unread and are caught by `_weights`;
        # coarser ones read exact zeros.
        if not isinstance(head, (nn.Conv1d, nn.Conv2d)) or window_mismatch(head, layer.layout, g) is not None:
            return None
        if (head.out_channels, head.in_channels) != (layer.out_channels, layer.in_channels):
            return None
    kind = "linear" if type(head) is nn.Linear else "conv"
    read_index = np.flatnonzero(layer.reads)
    fill = np.asarray([d.values[c] for d, c in zip(layer.input_domains, layer.fill_codes)], dtype=np.float32)
    frame = fill[_frame_channels(layer)]
    return _Structure(head, tail, kind, _Group.of(layer, list(layer.units)), read_index, frame)


def _weights(structure: _Structure, layer: LayerPlan) -> tuple[torch.Tensor, np.ndarray] | None:
    """The head's effective weight, and as float32 ``(out channels, in channels, window)``; ``None`` when not
    trusted (another dtype or device, or a non-zero weight outside the units' declared inputs)."""
    head = structure.head
    effective = _weight(head).detach()
    if effective.dtype != torch.float32 or effective.device.type != "cpu":
        return None
    w = effective.numpy()
    if structure.kind == "linear":
        full = w[:, :, None]
    else:
        out, per_group = w.shape[:2]
        window = layer.geometry.window
        full = np.zeros((out, per_group * head.groups, window), dtype=np.float32)
        first = (np.arange(out) // (out // head.groups)) * per_group  # first input channel of each output's group
        full[np.arange(out)[:, None], first[:, None] + np.arange(per_group)[None, :]] = w.reshape(out, per_group, -1)
    # Read positions are distinct, so every non-zero weight is read exactly when the counts agree.
    flat = full.reshape(full.shape[0] * full.shape[1], -1)
    if np.count_nonzero(full) != np.count_nonzero(flat[structure.read_index]):
        return None  # the declared fan-in leaves out a non-zero weight: the probe or black box decides
    return effective, full


@dataclass(frozen=True)
class _Columns:
    """A group's columns with this call's weights (over each unit's inputs, in its input order) and biases."""

    group: _Group
    weight: np.ndarray  # (K, f) float64
    bias: np.ndarray  # (K,) float64
    error_factor: float  # the layer's float32 error bound in units of (f + 2) * u * magnitude

    @property
    def units(self) -> tuple[Unit, ...]:
        return self.group.units

    @property
    def channels(self) -> np.ndarray:
        return self.group.channels

    @property
    def reads(self) -> np.ndarray:
        return self.group.reads

    @property
    def domains(self) -> tuple[Any, ...]:
        return self.group.domains

    @property
    def radices(self) -> np.ndarray:
        return self.group.radices

    @property
    def rows(self) -> int:
        return self.group.rows

    @property
    def split(self) -> int:
        return self.group.split

    def error(self, magnitude: np.ndarray) -> np.ndarray:
        """Bound of the distance between any float32 evaluation of a sum and the exact sum.

        ``f`` products and a bias, added in any order (with or without fused multiply-adds), are within
        ``gamma(f + 1) * magnitude`` of the exact sum, ``gamma(n) = n u / (1 - n u) < (f + 2) u``.
        """
        return self.error_factor * (len(self.domains) + 2) * _U32 * magnitude

    def terms(self, gain: np.ndarray | None = None) -> list[np.ndarray]:
        """Per input ``j``, ``(K, n_j)``: weight times each value (times ``gain`` per column)."""
        w = self.weight if gain is None else self.weight * gain[:, None]
        matrix = self.group.value_matrix
        if matrix is not None:  # one product for all inputs, then a view per input
            return list((w[:, :, None] * matrix[None, :, :]).transpose(1, 0, 2))
        return [w[:, j, None] * v[None, :] for j, v in enumerate(self.group.values)]

    def reach(self) -> np.ndarray:
        """``sum_j max |w_j x_j|`` per column, ``|w_j|`` times input ``j``'s largest value."""
        return (np.abs(self.weight) * self.group.peak).sum(axis=1)


@dataclass(frozen=True)
class FastPath:
    """A recognized layer: its structure (modules, column groups) and this call's weights and bias."""

    structure: _Structure
    effective: torch.Tensor  # the head's weight as its forward uses it (after pruning's mask)
    weight: np.ndarray  # (out, in channels, window) float32
    bias: np.ndarray  # (out,) float64

    @property
    def kind(self) -> str:
        return self.structure.kind

    @property
    def tail(self) -> tuple[nn.Module, ...]:
        return self.structure.tail

    @property
    def method(self) -> str:
        """How ``LayerTables.method`` names this path."""
        return f"{self.kind} fast path"

    def columns(self, layer: LayerPlan, units: list[Unit]) -> list[_Columns]:
        """The units' columns grouped by the domains of their inputs, with this call's weights."""
        whole = len(units) == len(layer.units)
        groups = self.structure.groups if whole else _Group.of(layer, units)
        # Convolutions get twice the bound of a plain sum: their kernels block and vectorize the sums.
        factor = 1.0 if self.kind == "linear" else 2.0
        result = []
        for group in groups:
            weight = self.weight[group.channels[:, None], group.reads].reshape(len(group.channels), -1)
            result.append(_Columns(group, weight.astype(np.float64), self.bias[group.channels], factor))
        return result

    def tables(
        self,
        layer: LayerPlan,
        units: list[Unit],
        *,
        memory_budget: int,
        sink: Callable[[Unit], Any],
        progress: Callable[[int], None] = lambda rows: None,
    ) -> tuple[list[CodeBlock], dict[int, np.ndarray], int]:
        """The units' codes, and how many rows were near a rounding boundary (computed by the module).

        Codes of whole units are computed in blocks of at most half of ``memory_budget``
        (:class:`CodeBlock`); a unit whose table alone is larger is computed in row segments written to
        ``sink(unit)`` (a file), and its finished array ``(rows, fan_out)`` is returned by unit index.
        ``progress(rows)`` is told the rows (per unit) of each block or segment when it is done.
        """
        blocks: list[CodeBlock] = []
        outputs: dict[int, np.ndarray] = {}
        near = 0
        itemsize = layer.output_domain.code_dtype.itemsize
        for cols in self.columns(layer, units):
            kernel = _AffineKernel.build(self, layer, cols)
            if kernel is None:
                codes, ties = _two_ends(self, layer, cols, memory_budget=memory_budget)
                near += ties
                blocks.append(CodeBlock(codes, cols.units))
                progress(cols.rows * len(cols.units))
                continue
            n_p, n_s = kernel.prefix.shape[1], kernel.suffix.shape[1]
            block = (memory_budget // 2) // (cols.rows * itemsize)  # columns per block (0: not even one)
            if block >= len(cols.channels):  # the whole group in one block
                codes, ties = kernel.codes(layer, self, (0, len(cols.channels)), (0, n_p), memory_budget=memory_budget)
                near += ties
                blocks.append(CodeBlock(codes, cols.units))
                progress(cols.rows * len(cols.units))
                continue
            start = 0
            while start < len(cols.units):
                stop, width = start + 1, cols.units[start].fan_out
                while stop < len(cols.units) and width + cols.units[stop].fan_out <= block:
                    width += cols.units[stop].fan_out
                    stop += 1
                k0 = sum(u.fan_out for u in cols.units[:start])
                if width <= block:
                    codes, ties = kernel.codes(layer, self, (k0, k0 + width), (0, n_p), memory_budget=memory_budget)
                    near += ties
                    blocks.append(CodeBlock(codes, cols.units[start:stop]))
                    progress(cols.rows * (stop - start))
                else:  # one unit larger than the budget: row segments into its file
                    unit = cols.units[start]
                    step = max(1, (memory_budget // 4) // (n_s * width * itemsize))
                    target = sink(unit)
                    for p0 in range(0, n_p, step):
                        prefixes = (p0, min(n_p, p0 + step))
                        codes, ties = kernel.codes(layer, self, (k0, k0 + width), prefixes, memory_budget=memory_budget)
                        near += ties
                        target.write(p0 * n_s, codes.T)
                        progress((prefixes[1] - p0) * n_s)
                    outputs[unit.index] = target.finish()
                start = stop
        return blocks, outputs, near

    def tail_codes(self, layer: LayerPlan, z: torch.Tensor) -> np.ndarray:
        """The layer's codes for pre-activations ``z`` ``(n, out channels)``: the tail modules, then encoding."""
        x = z.reshape((z.shape[0], layer.out_channels) + (1,) * layer.geometry.rank)
        return layer.output_domain.encode(self._run(layer, x, head=False).reshape(z.shape[0], -1).numpy())

    def _run(self, layer: LayerPlan, x: torch.Tensor, *, head: bool) -> torch.Tensor:
        """The layer's modules (the head when ``head``, then the tail) on ``x``, as in eval mode.

        Batch norm runs on its running statistics and dropout passes, without switching the model's own
        mode; the head runs its own functional form on this call's effective weights (what its pruning hook
        computes), as its forward does in either mode.
        """
        try:
            with torch.inference_mode():
                if head:
                    x = self._head(x)
                for m in self.tail:
                    if isinstance(m, nn.modules.batchnorm._BatchNorm):
                        x = F.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, False, 0.0, m.eps)
                    elif not isinstance(m, nn.Dropout):
                        x = m(x)
        except Exception as exc:  # the modules' own failure, reported as the black box would
            msg = f"{layer.name}: forward failed on an input of shape {tuple(x.shape)}: {type(exc).__name__}: {exc}"
            raise EnumerationError(msg) from exc
        return x

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        head = self.structure.head
        if isinstance(head, nn.Linear):
            return F.linear(x, self.effective, head.bias)
        return head._conv_forward(x, self.effective, head.bias)

    def through_module(self, layer: LayerPlan, cols: _Columns, rows: np.ndarray, which: np.ndarray) -> np.ndarray:
        """Codes of single ``(row, column)`` entries computed by the layer's modules, as the black box does.

        Each row's input codes sit at its unit's inputs (at the first slot of the enumeration frame) in a
        frame that holds each channel's code of real 0 elsewhere; the whole layer runs on these frames.
        """
        values = _values(cols, _digits(cols, rows)).astype(np.float32)
        frame = np.broadcast_to(self.structure.fill, (len(rows), len(self.structure.fill))).copy()
        np.put_along_axis(frame, cols.group.frame_inputs[which], values, axis=1)
        x = torch.from_numpy(frame).reshape(len(rows), *layer.frame_in)
        out = self._run(layer, x, head=True).reshape(len(rows), -1).numpy()
        return layer.output_domain.encode(out[np.arange(len(rows)), cols.group.frame_outputs[which]])


@dataclass(frozen=True)
class CodeBlock:
    """Codes ``(columns, rows)`` of consecutive units, each unit's columns adjacent, in unit order."""

    codes: np.ndarray
    units: tuple[Unit, ...]

    def entries(self) -> Iterator[tuple[int, np.ndarray]]:
        """Each unit's index and table outputs ``(rows, fan_out)`` (a view of the codes)."""
        column = 0
        for unit in self.units:
            yield unit.index, self.codes[column : column + unit.fan_out].T
            column += unit.fan_out


_SCRATCH = threading.local()


def _scratch(count: int, size: int) -> list[torch.Tensor]:
    """``count`` int32 work buffers of ``size`` elements, kept per thread from one call to the next.

    A fresh buffer of a few MiB costs a page fault per 4 KiB on its first pass; reusing the same memory
    keeps that cost out of every chunk of every layer.
    """
    held = getattr(_SCRATCH, "buffers", [])
    if len(held) < count or held[0].numel() < size:
        held = [torch.empty(size, dtype=torch.int32) for _ in range(count)]
        _SCRATCH.buffers = held
    return [b[:size] for b in held[:count]]


def _frame_channels(layer: LayerPlan) -> np.ndarray:
    """The input channel of every element of one enumeration frame."""
    elements = math.prod(layer.frame_in)
    flat = np.arange(elements)
    if layer.layout.channels_last:
        return flat % layer.in_channels
    return flat // (elements // layer.in_channels)


def _digits(cols: _Columns, rows: np.ndarray) -> np.ndarray:
    """Input codes ``(n, f)`` of table rows, the first input most significant."""
    return (rows[:, None] // cols.group.place) % cols.radices


def _values(cols: _Columns, digits: np.ndarray) -> np.ndarray:
    """Input values (float64) of code digits ``(n, f)``."""
    return np.stack([d.values[digits[:, j]] for j, d in enumerate(cols.domains)], axis=1)


def _outer_sums(terms: list[np.ndarray], width: int, dtype: Any = np.float64) -> np.ndarray:
    """``(width, prod n_j)``: one term per input summed over every code tuple, in lexicographic row order."""
    total = np.zeros((width, 1), dtype=dtype)
    for term in terms:
        total = (total[:, :, None] + term[:, None, :].astype(dtype)).reshape(width, -1)
    return total


# -- affine tails: fixed-point codes -----------------------------------------------------------------------


@dataclass(frozen=True)
class _AffineTail:
    """Per channel: the quantizer's rounding argument ``phi = gain * z + offset`` and the codes' range.

    The code of a float32 pre-activation ``z`` is ``clip(floor(phi(z)), low, high)`` wherever ``phi`` lies
    further than ``error_at(|z|)`` (code units) from an integer.
    """

    gain: np.ndarray
    offset: np.ndarray
    low: np.ndarray  # int64 codes
    high: np.ndarray
    error0: np.ndarray  # the tail's float32 error is at most error0 + error1 * |z|
    error1: np.ndarray

    def error_at(self, size: np.ndarray) -> np.ndarray:
        """Bound of the tail's float32 error (code units) for pre-activations up to ``size`` in magnitude."""
        return self.error0 + self.error1 * size


def _affine_tail(tail: tuple[nn.Module, ...], channels: np.ndarray) -> _AffineTail | None:
    """The tail as an affine map between clamps, with float32 error bounds, or ``None`` if it is not one.

    Each module maps ``v = clip(A z + B, L, H)`` to another such map: batch norm (eval, running statistics)
    is affine per channel, ReLU / ReLU6 / hardtanh clamp, identity and dropout (eval) pass. For
    ``|z| <= Z``, ``|v| <= bound0 + bound1 * Z`` and the float32 value lies within ``err0 + err1 * Z`` of
    the exact one.
    """
    n = len(channels)
    a, b = np.ones(n), np.zeros(n)
    low, high = np.full(n, -math.inf), np.full(n, math.inf)
    bound0, bound1, err0, err1 = np.zeros(n), np.ones(n), np.zeros(n), np.zeros(n)
    for m in tail[:-1]:
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and type(m) in ELEMENTWISE:
            if m.running_mean is None or m.running_var is None:
                return None  # batch statistics even in eval: not a per-element function
            mean, var, w, c = _norm_parameters(m, channels)
            alpha = w / np.sqrt(var + float(np.float32(m.eps)))
            beta = c - mean * alpha
            # float32 alpha = w / sqrt(var + eps) (3.5 roundings relative), beta = b - mean * alpha, then
            # x * alpha + beta, or (x - mean) * alpha + b: within 6u of |x alpha| + |mean alpha| + |b| + |beta|.
            size = np.abs(alpha)
            err0 = size * err0 + 8 * _U32 * (size * bound0 + np.abs(mean * alpha) + np.abs(c) + np.abs(beta))
            err1 = size * err1 + 8 * _U32 * size * bound1
            bound0, bound1 = size * bound0 + np.abs(beta), size * bound1
            a, b = alpha * a, alpha * b + beta
            with np.errstate(invalid="ignore"):  # 0 * inf: a zero gain maps everything to beta
                ends = np.where(alpha == 0, beta, alpha * np.stack([low, high]) + beta)
            low, high = ends.min(axis=0), ends.max(axis=0)
        elif type(m) in _CLAMPS:
            lo, hi = _CLAMPS[type(m)](m)
            low, high = np.clip(low, lo, hi), np.clip(high, lo, hi)
            bound0 = bound0 + max(lo, 0.0) + max(-hi, 0.0)  # a clamp away from 0 can lift small values
        elif not isinstance(m, _IDENTITIES):
            return None
    q = tail[-1]
    scale, zero = float(q.scale), float(q.zero_point)
    if not (math.isfinite(scale) and scale > 0 and math.isfinite(zero)):
        return None
    # Quantize: x / scale + zero_point, each rounded once (2u |x| / scale + u |zero_point|), clamp, round.
    err0 = err0 / scale + 3 * _U32 * (bound0 / scale + abs(zero) + 1)
    err1 = err1 / scale + 3 * _U32 * bound1 / scale
    low_q = np.clip(low / scale + zero, q.qmin, q.qmax)
    high_q = np.clip(high / scale + zero, q.qmin, q.qmax)
    # A saturated value within rounding of a half step: leave the layer to the modules.
    saturated = np.concatenate([low_q, high_q])
    if (np.abs(saturated - np.floor(saturated) - 0.5) <= np.concatenate([err0, err0]) + 1e-9).any():
        return None
    return _AffineTail(
        gain=a / scale,
        offset=b / scale + zero + 0.5 - q.qmin,
        low=(np.round(low_q) - q.qmin).astype(np.int64),
        high=(np.round(high_q) - q.qmin).astype(np.int64),
        error0=err0,
        error1=err1,
    )


def _norm_parameters(m: nn.Module, channels: np.ndarray) -> np.ndarray:
    """``(4, K)`` float64 of ``channels``: a batch norm's running mean and variance, weight and bias."""
    ones = torch.ones_like(m.running_mean)
    weight = ones if m.weight is None else m.weight
    bias = 0 * ones if m.bias is None else m.bias
    both = torch.stack([m.running_mean, m.running_var, weight, bias]).detach().numpy()
    whole = len(channels) == both.shape[1] and bool((channels == np.arange(len(channels))).all())
    return (both if whole else both[:, channels]).astype(np.float64)


@dataclass(frozen=True)
class _AffineKernel:
    """Fixed-point codes of one column group: ``phi`` as int32 outer sums, ``F`` fraction bits.

    Rows split into a prefix (leading inputs) and a suffix (trailing inputs, a contiguous block of a few
    hundred rows): ``phi_fx[k, p * n_s + s] = prefix[k, p] + suffix[k, s]``.
    """

    cols: _Columns
    tail: _AffineTail
    terms: list[np.ndarray]  # per input (K, n_j) float64 terms of phi
    constant: np.ndarray  # (K,) float64: phi's constant part
    margin: np.ndarray  # (K,) code units: float32 error of the layer and the tail
    bits: int  # F
    slack: int  # fixed-point units added to phi: a row is unproved when (phi_fx & mask) < 2 * slack
    prefix: torch.Tensor  # (K, n_p) int32, constant and slack included
    suffix: torch.Tensor  # (K, n_s) int32

    @classmethod
    def build(cls, fast: FastPath, layer: LayerPlan, cols: _Columns) -> _AffineKernel | None:
        """The kernel for ``cols``, or ``None`` when the tail is not affine or the margins do not fit."""
        spread = cols.reach()
        magnitude = np.abs(cols.bias) + spread  # bounds |z| and scales the float32 error
        fan_in = len(cols.domains)
        error = cols.error(magnitude)
        tail = _affine_tail(fast.tail, cols.channels)
        if tail is None or not _tail_agrees(fast, layer, cols, tail, magnitude):
            return None
        terms = cols.terms(tail.gain)
        constant = tail.gain * cols.bias + tail.offset
        margin = np.abs(tail.gain) * error + tail.error_at(magnitude + error)
        reach = np.abs(constant) + np.abs(tail.gain) * spread
        bits = min(_MAX_FRACTION_BITS, 29 - math.ceil(math.log2(float(reach.max()) + 2)))
        if bits < _MIN_FRACTION_BITS:
            return None
        # Fixed point: each of f terms and the constant rounds by half a unit; two units for float64 sums.
        slack = math.ceil(float(margin.max()) * 2**bits) + (fan_in + 2) // 2 + 2
        if 4 * slack >= 2**bits:
            return None
        fixed = [np.rint(t * 2.0**bits).astype(np.int64) for t in terms]
        base = np.rint(constant * 2.0**bits).astype(np.int64) + slack
        split = cols.split
        prefix = (_outer_sums(fixed[:split], len(base), np.int64) + base[:, None]).astype(np.int32)
        suffix = _outer_sums(fixed[split:], len(base), np.int64).astype(np.int32)
        return cls(cols, tail, terms, constant, margin, bits, slack, torch.from_numpy(prefix), torch.from_numpy(suffix))

    def codes(
        self,
        layer: LayerPlan,
        fast: FastPath,
        columns: tuple[int, int],
        prefixes: tuple[int, int],
        *,
        memory_budget: int,
    ) -> tuple[np.ndarray, int]:
        """Codes ``(k1 - k0, (p1 - p0) * n_s)`` of columns ``k0:k1`` over the rows of prefixes ``p0:p1``.

        Also returns the number of rows computed through the module. Each chunk is five passes over int32
        (sum, fraction bits, shift, clip, narrowing copy) and a minimum of the fraction bits per run of
        ``block`` rows; runs whose minimum is below the margin are searched once the codes are written.
        """
        (k0, k1), (q0, q1) = columns, prefixes
        n_s = self.suffix.shape[1]
        block = 64 if n_s % 64 == 0 else n_s
        dtype = layer.output_domain.code_dtype
        # torch copies int32 into uint8 directly; wider code types are converted once at the end.
        out = np.empty((k1 - k0, (q1 - q0) * n_s), dtype=np.uint8 if dtype == np.uint8 else np.int32)
        out3 = torch.from_numpy(out).view(k1 - k0, q1 - q0, n_s)
        minima = torch.empty((k1 - k0, q1 - q0, n_s // block), dtype=torch.int32)
        low, high = self.tail.low[k0:k1], self.tail.high[k0:k1]
        uniform = bool((low == low[0]).all() and (high == high[0]).all())
        lo_t = torch.from_numpy(low.astype(np.int32)).view(-1, 1, 1)
        hi_t = torch.from_numpy(high.astype(np.int32)).view(-1, 1, 1)
        mask, limit = (1 << self.bits) - 1, 2 * self.slack
        per_k = max(1, min(_CHUNK, memory_budget // 16) // n_s)
        k_step = max(1, min(k1 - k0, per_k))
        p_step = max(1, min(q1 - q0, per_k // k_step))
        work, bits_buf = _scratch(2, k_step * p_step * n_s)
        for a0 in range(k0, k1, k_step):
            a1 = min(k1, a0 + k_step)
            for p0 in range(q0, q1, p_step):
                p1 = min(q1, p0 + p_step)
                shape = (a1 - a0, p1 - p0, n_s)
                size = math.prod(shape)
                phi = work[:size].view(shape)
                torch.add(self.prefix[a0:a1, p0:p1, None], self.suffix[a0:a1, None, :], out=phi)
                frac = torch.bitwise_and(phi, mask, out=bits_buf[:size].view(shape))
                torch.bitwise_right_shift(phi, self.bits, out=phi)
                if uniform:
                    phi.clamp_(int(low[0]), int(high[0]))
                else:
                    torch.clamp(phi, lo_t[a0 - k0 : a1 - k0], hi_t[a0 - k0 : a1 - k0], out=phi)
                out3[a0 - k0 : a1 - k0, p0 - q0 : p1 - q0].copy_(phi)
                runs = frac.view(a1 - a0, p1 - p0, -1, block)
                torch.amin(runs, dim=3, out=minima[a0 - k0 : a1 - k0, p0 - q0 : p1 - q0])
        k, p, b = torch.nonzero(minima < limit, as_tuple=True)
        if not len(k):
            return out.astype(dtype, copy=False), 0
        # The flagged runs again, as int32 sums: the entries whose fraction bits lie within the margin.
        suffix = self.suffix.view(self.suffix.shape[0], -1, block)
        phi = self.prefix[k + k0, p + q0, None] + suffix[k + k0, b]
        run, offset = torch.nonzero(torch.bitwise_and(phi, mask) < limit, as_tuple=True)
        which = (k[run] + k0).numpy()
        rows = ((p[run] + q0) * n_s + b[run] * block + offset).numpy()
        ties = self._settle(layer, fast, out, which, rows, origin=(k0, q0 * n_s))
        return out.astype(dtype, copy=False), ties

    def _settle(
        self,
        layer: LayerPlan,
        fast: FastPath,
        out: np.ndarray,
        which: np.ndarray,
        rows: np.ndarray,
        *,
        origin: tuple[int, int],
    ) -> int:
        """Decide the flagged entries (column ``which``, table row ``rows``) of ``out``, whose first entry is
        ``origin``; return how many had to go through the module.

        In float64 with each row's own error bounds (the layer's sum and the tail at that row's size); the
        rows still within their margin lie within float rounding of a boundary and go through the module.
        """
        cols, tail = self.cols, self.tail
        products = cols.weight[which] * _values(cols, _digits(cols, rows))
        z = cols.bias[which] + products.sum(axis=1)
        error = cols.error(np.abs(cols.bias[which]) + np.abs(products).sum(axis=1))
        gain = tail.gain[which]
        phi = gain * z + tail.offset[which]
        low, high = tail.low[which], tail.high[which]
        nearest = np.round(phi)
        # Only integers low + 1 .. high are boundaries between codes; the clip settles the others.
        boundary = (nearest > low) & (nearest <= high)
        own = tail.error0[which] + tail.error1[which] * (np.abs(z) + error)
        margin = np.abs(gain) * error + own + 1e-9 * (1 + np.abs(phi))
        tie = np.flatnonzero(boundary & (np.abs(phi - nearest) <= margin))
        at = (which - origin[0], rows - origin[1])
        out[at] = np.clip(np.floor(phi), low, high)
        if len(tie):
            out[at[0][tie], at[1][tie]] = fast.through_module(layer, cols, rows[tie], which[tie])
        return len(tie)


def _tail_agrees(fast: FastPath, layer: LayerPlan, cols: _Columns, tail: _AffineTail, zmax: np.ndarray) -> bool:
    """Whether the analytic tail gives the modules' own codes on both sides of every boundary and at the ends.

    Pre-activations just outside each boundary's margin, and at ``+-zmax``, run through the tail modules;
    every proved analytic code must equal theirs.
    """
    margin = tail.error_at(zmax) + 1e-6
    steps = np.arange(1, int((tail.high - tail.low).max()) + 1)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero gain: one code, tested at the ends
        crossing = (tail.low + steps - tail.offset) / tail.gain  # (steps, K): where phi crosses each integer
        delta = 3 * margin / np.abs(tail.gain)
        points = np.concatenate([-zmax[None], zmax[None], crossing - delta, crossing + delta])
    points = np.clip(np.nan_to_num(points, nan=0.0, posinf=0.0, neginf=0.0), -zmax, zmax).astype(np.float32)
    channels = cols.channels
    if len(channels) == layer.out_channels and (channels == np.arange(len(channels))).all():
        full = torch.from_numpy(points)
    else:
        full = torch.zeros((len(points), layer.out_channels), dtype=torch.float32)
        full[:, torch.from_numpy(channels)] = torch.from_numpy(points)
    shape = (len(points), layer.out_channels) + (1,) * layer.geometry.rank
    got = fast._run(layer, full.reshape(shape), head=False).reshape(len(points), -1).numpy()[:, channels]
    phi = tail.gain * points.astype(np.float64) + tail.offset
    sure = np.abs(phi - np.round(phi)) > margin
    expected = np.clip(np.floor(phi), tail.low, tail.high).astype(np.int64)
    # The quantizer's outputs are exactly its domain's float32 values: compare values, not codes.
    return bool((got == layer.output_domain.values.astype(np.float32)[expected])[sure].all())


# -- other monotone tails: both ends of the rounding interval ----------------------------------------------


def _two_ends(fast: FastPath, layer: LayerPlan, cols: _Columns, *, memory_budget: int) -> tuple[np.ndarray, int]:
    """Codes ``(K, rows)`` through the tail modules at both ends of each row's float32 error interval."""
    radices = cols.radices
    fan_in, k = len(radices), len(cols.channels)
    rows = int(np.prod(radices))
    codes = np.empty((k, rows), dtype=layer.output_domain.code_dtype)
    terms = cols.terms()
    per_row = 8 * (layer.out_channels * 6 + k * 8)
    split = fan_in
    while split > 0 and int(np.prod(radices[split - 1 :])) * per_row <= memory_budget:
        split -= 1
    split = min(split, fan_in - 1) if fan_in > 1 else 0
    suffix = _outer_sums(terms[split:], k).T  # (rows of the trailing inputs, K)
    suffix_mag = _outer_sums([np.abs(t) for t in terms[split:]], k).T
    block = len(suffix)
    prefix_rows = int(np.prod(radices[:split]))
    place = place_values(radices[:split])
    near_rows, near_cols = [], []
    for p in range(prefix_rows):  # a loop over chunks of rows, each a whole block of trailing inputs
        digits = (p // place) % radices[:split]
        offset = cols.bias + sum((terms[j][:, digits[j]] for j in range(split)), np.zeros(k))
        offset_mag = np.abs(cols.bias) + sum((np.abs(terms[j][:, digits[j]]) for j in range(split)), np.zeros(k))
        exact = suffix + offset
        bound = cols.error(suffix_mag + offset_mag) + 4 * _EPS32 * np.abs(exact)
        low = _tail_columns(fast, layer, exact - bound, cols.channels)
        high = _tail_columns(fast, layer, exact + bound, cols.channels)
        codes[:, p * block : (p + 1) * block] = low.T
        rr, cc = np.nonzero(low != high)
        near_rows.append(rr + p * block)
        near_cols.append(cc)
    rr, cc = np.concatenate(near_rows), np.concatenate(near_cols)
    if len(rr):
        codes[cc, rr] = fast.through_module(layer, cols, rr, cc)
    return codes, len(rr)


def _tail_columns(fast: FastPath, layer: LayerPlan, pre: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """Tail codes ``(n, K)`` of pre-activations ``pre`` ``(n, K)`` of output ``channels``; other channels 0."""
    full = torch.zeros((len(pre), layer.out_channels), dtype=torch.float32)
    full[:, torch.from_numpy(channels)] = torch.from_numpy(pre.astype(np.float32))
    return fast.tail_codes(layer, full)[:, channels]


def recognize(module: nn.Module, layer: LayerPlan) -> FastPath | None:
    """The fast path for ``module`` if its structure proves the decomposition and the tables, else ``None``.

    Needs: one ``nn.Linear`` (pruned or not; a non-spatial layer) or ``nn.Conv1d``/``nn.Conv2d`` (channels
    first, the plan's window being the convolution's own) followed by elementwise modules of the built-in
    types ending in :class:`iotable.nn.Quantize`; float32 on the CPU with IEEE float32 products; no forward
    hooks other than pruning; batch norm on running statistics; every weight outside a unit's declared
    inputs exactly zero. Such a layer's units are independent by construction, so it needs no probe.
    """
    structure = _structure(module, layer)
    if structure is None or structure.tail[-1].domain != layer.output_domain:
        return None
    parts = (structure.head, *structure.tail)
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is None for m in parts):
        return None  # batch statistics even in eval: outputs would depend on the whole batch
    if not _ieee_float32() or _hooked(list(module.modules())):
        return None
    for m in parts:
        for t in (*m._parameters.values(), *m._buffers.values()):
            if t is not None and t.is_floating_point() and (t.dtype != torch.float32 or t.device.type != "cpu"):
                return None
    weights = _weights(structure, layer)
    if weights is None:
        return None
    effective, weight = weights
    head = structure.head
    bias = head.bias.detach().numpy().astype(np.float64) if head.bias is not None else np.zeros(weight.shape[0])
    return FastPath(structure=structure, effective=effective, weight=weight, bias=bias)
