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

import itertools
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as torch_module
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils import prune

from .._util.order import frame_channels, unit_elements
from ..domain import Domain
from ..errors import EnumerationError
from ..front.plan import LayerPlan, Unit, window_mismatch
from ..front.registry import kind_of
from ..front.spec import ELEMENTWISE
from ..nn import Quantize
from ..table import place_values

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
# Each entry reads a module of its key's class (hence ``Any``: nn.Module states no min_val).
_CLAMPS: dict[type[nn.Module], Callable[[Any], tuple[float, float]]] = {
    nn.ReLU: lambda m: (0.0, math.inf),
    nn.ReLU6: lambda m: (0.0, 6.0),
    nn.Hardtanh: lambda m: (float(m.min_val), float(m.max_val)),
}
_IDENTITIES = (nn.Identity, nn.Dropout)
# The layers a fast path reads the weights of (exactly these classes, not subclasses).
_HEADS = (nn.Linear, nn.Conv1d, nn.Conv2d)
_Head = nn.Linear | nn.Conv1d | nn.Conv2d


def _groups(head: _Head) -> int:
    """A convolution's groups; 1 for a linear layer."""
    return 1 if isinstance(head, nn.Linear) else head.groups


def _codes_domain(layer: LayerPlan) -> Domain:
    """The output domain of a layer a fast path recognized (:func:`_read_structure` takes none without one)."""
    domain = layer.output_domain
    if domain is None:
        raise AssertionError(f"{layer.name}: a fast-path layer without an output domain")
    return domain


def _parts(module: nn.Module) -> list[nn.Module]:
    if isinstance(module, nn.Sequential):
        return [p for m in module for p in _parts(m)]
    return [module]


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
    pairs: np.ndarray  # (K, channels per unit) each column's (output, input) pairs among the layer's read pairs
    unit_starts: np.ndarray  # (units + 1,) first column of each unit, then the group's width
    whole: bool  # the columns are the layer's output channels in order

    @classmethod
    def of(cls, layer: LayerPlan, units: list[Unit]) -> list[_Group]:
        groups: dict[tuple[Any, ...], list[Unit]] = {}
        # Units with the same domains: by fan-in where every input shares one domain, else by channels read.
        shared = layer.input_domain
        known: dict[Any, tuple[Any, ...]] = {}
        for unit in units:
            key = unit.fan_in if shared is not None else unit.in_channels
            domains = known.get(key)
            if domains is None:
                domains = known[key] = layer.unit_domains(unit)
            groups.setdefault(domains, []).append(unit)
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
                    pairs=np.searchsorted(_read_index(layer), channels[:, None] * layer.in_channels + reads),
                    unit_starts=np.cumsum([0] + [len(u.out_channels) for u in members], dtype=np.int64),
                    whole=len(channels) == layer.out_channels and bool((channels == np.arange(len(channels))).all()),
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


def _read_index(layer: LayerPlan) -> np.ndarray:
    """Flat indices into ``(out channels, in channels)`` of the pairs some unit reads, ascending (kept on the plan)."""
    memo = layer.memo
    if "read index" not in memo:
        memo["read index"] = np.flatnonzero(layer.reads)
    return memo["read index"]


@dataclass(frozen=True)
class _Structure:
    """What makes a layer eligible, read once per plan: its modules and its column groups."""

    head: _Head
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
    head_kind = kind_of(head)
    if head_kind is None or head_kind.fast_path is None or type(head) not in head_kind.types:
        return None  # the fast paths read exactly the classes of their kinds (subclasses may override forward)
    if not isinstance(head, _HEADS) or type(tail[-1]) is not Quantize:
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
    kind = head_kind.fast_path
    read_index = _read_index(layer)
    fill = np.asarray([d.values[c] for d, c in zip(layer.input_domains, layer.fill_codes)], dtype=np.float32)
    frame = fill[_frame_channels(layer)]
    return _Structure(head, tail, kind, _Group.of(layer, list(layer.units)), read_index, frame)


def _effective(head: _Head, channels: torch.Tensor | slice | None = None) -> torch.Tensor:
    """The head's effective weight (of output ``channels``), as its forward uses it: with torch's pruning,
    ``weight_mask * weight_orig``, the product its hook computes (elementwise, so a block of rows of it is the
    same block of the whole)."""
    orig, mask = getattr(head, "weight_orig", None), getattr(head, "weight_mask", None)
    if orig is None or mask is None:
        weight = head.weight.detach()
        return weight if channels is None else weight[channels]
    orig, mask = orig.detach(), mask.detach()
    if channels is not None:
        orig, mask = orig[channels], mask[channels]
    return mask.to(dtype=orig.dtype) * orig


def _weights(structure: _Structure, layer: LayerPlan, *, memory_budget: int) -> np.ndarray | None:
    """The head's effective weight at every read pair, ``(pairs, window)`` float32; ``None`` when not trusted
    (another dtype or device, or a non-zero weight outside the units' declared inputs).

    A linear layer's effective weight is formed in blocks of output channels within the memory budget and only
    its read pairs are kept, so a wide sparse layer never holds a second dense copy of its weight.
    """
    head = structure.head
    for name in ("weight_orig", "weight_mask", "weight"):
        t = getattr(head, name, None)
        if isinstance(t, torch.Tensor) and (t.dtype != torch.float32 or t.device.type != "cpu"):
            return None
    read = structure.read_index
    if structure.kind == "linear":
        n_out, n_in = layer.out_channels, layer.in_channels
        step = max(1, (memory_budget // 8) // (4 * n_in))
        if step >= n_out:
            effective = _effective(head).numpy()
            nonzero = int(np.count_nonzero(effective))
            pairs = effective.reshape(-1)[read]
        else:
            pairs = np.empty(len(read), dtype=np.float32)
            bounds = np.searchsorted(read, np.arange(0, n_out + step, step) * n_in)
            nonzero = 0
            for k, r0 in enumerate(range(0, n_out, step)):
                block = _effective(head, slice(r0, r0 + step)).numpy()
                nonzero += int(np.count_nonzero(block))
                a, b = bounds[k], bounds[k + 1]
                pairs[a:b] = block.reshape(-1)[read[a:b] - r0 * n_in]
        pairs = pairs[:, None]
    else:
        effective = _effective(head).numpy()
        out, per_group = effective.shape[:2]
        nonzero = int(np.count_nonzero(effective))
        o, i = np.divmod(read, layer.in_channels)
        j = i - (o // (out // head.groups)) * per_group  # the input's place in its output's group
        inside = (j >= 0) & (j < per_group)
        pairs = np.zeros((len(read), layer.geometry.window), dtype=np.float32)
        pairs[inside] = effective.reshape(out, per_group, -1)[o[inside], j[inside]]
    # Read pairs are distinct weights, so every non-zero weight is read exactly when the counts agree.
    if nonzero != np.count_nonzero(pairs):
        return None  # the declared fan-in leaves out a non-zero weight: the probe or black box decides
    return pairs


@dataclass(frozen=True)
class FastPath:
    """A recognized layer: its structure (modules, column groups) and this call's weights and bias."""

    structure: _Structure
    pairs: np.ndarray  # (read pairs, window) float32: the effective weight where some unit reads
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

    def parts(self, job: _Job) -> list[_Part]:
        """The job's units as column groups (one per combination of input domains) with this call's weights."""
        layer, units = job.layer, job.units
        groups = self.structure.groups if len(units) == len(layer.units) else _Group.of(layer, units)
        found = []
        for group in groups:
            taps = self.pairs[group.pairs]  # (columns, channels per unit, window)
            channel, position = unit_elements(taps.shape[1], taps.shape[2], channels_last=layer.layout.channels_last)
            weight = taps[:, channel, position].astype(np.float64)  # one weight per input, in element order
            found.append(_Part(job, group, weight, self.bias[group.channels]))
        return found

    def tables(
        self,
        layer: LayerPlan,
        units: list[Unit],
        *,
        memory_budget: int,
        sink: Callable[[Unit], Any],
        progress: Callable[[int], None] = lambda rows: None,
    ) -> tuple[list[CodeBlock], dict[int, np.ndarray], int]:
        """The units' codes, and how many rows were near a rounding boundary (computed by the layer's operations).

        Codes of whole units are computed in blocks of at most half of ``memory_budget``
        (:class:`CodeBlock`); a unit whose table alone is larger is computed in row segments written to
        ``sink(unit)`` (a file), and its finished array ``(rows, fan_out)`` is returned by unit index.
        ``progress(rows)`` is told the rows (per unit) of each block or segment when it is done.
        """
        job = _Job(self, layer, list(units), sink, progress)
        build_tables([job], memory_budget=memory_budget)
        return job.blocks, job.outputs, job.near

    def head_weight(self, channels: np.ndarray) -> torch.Tensor:
        """The effective weight of output ``channels`` (ascending), as the head's forward computes it."""
        whole = len(channels) == self.structure.head.weight.shape[0]
        return _effective(self.structure.head, None if whole else torch.from_numpy(channels))

    def run_tail(self, layer: LayerPlan, x: torch.Tensor, channels: np.ndarray | None = None) -> torch.Tensor:
        """The tail modules on pre-activations ``x`` ``(n, len(channels), ...)`` of output ``channels`` (all
        when ``None``), as in eval mode.

        Batch norm runs on its running statistics of those channels (``F.batch_norm``, as its eval forward),
        dropout passes, every other tail module (per-element, no per-channel state) runs as itself; the
        model's own mode is not switched.
        """
        index = None if channels is None or len(channels) == layer.out_channels else torch.from_numpy(channels)
        try:
            with torch.inference_mode():
                for m in self.tail:
                    if isinstance(m, nn.modules.batchnorm._BatchNorm):
                        stats = [m.running_mean, m.running_var, m.weight, m.bias]
                        if index is not None:
                            stats = [None if t is None else t[index] for t in stats]
                        x = F.batch_norm(x, stats[0], stats[1], stats[2], stats[3], False, 0.0, m.eps)
                    elif not isinstance(m, nn.Dropout):
                        x = m.forward(x)  # no hooks on a recognized layer's modules: its forward is its call
        except Exception as exc:  # the modules' own failure, reported as the black box would
            msg = f"{layer.name}: forward failed on an input of shape {tuple(x.shape)}: {type(exc).__name__}: {exc}"
            raise EnumerationError(msg) from exc
        return x

    def tie_codes(
        self, layer: LayerPlan, group: _Group, which: np.ndarray, rows: np.ndarray, *, memory_budget: int
    ) -> np.ndarray:
        """Codes of single entries (column ``which`` of ``group``, table row ``rows``) computed by the layer's
        own operations, in work proportional to the entries and the units they belong to.

        Each row's input codes sit at its unit's inputs (at the first slot of the enumeration frame) in a full
        frame that holds each channel's value of real 0 elsewhere, as the black box builds it; the head runs
        its own functional form (``F.linear``, or the convolution with the layer's stride, padding, dilation)
        on that frame with the effective weights of the output channels the entries need (for a grouped
        convolution, of their whole groups), then the tail (:meth:`run_tail`) on those channels. Entries go in
        chunks of at most ``_TIE_CHANNELS`` channels and a quarter of ``memory_budget``.
        """
        n = len(rows)
        codes = np.empty(n, dtype=_codes_domain(layer).code_dtype)
        if not n:
            return codes
        channels = group.channels[which]
        order = np.argsort(channels, kind="stable")
        ordered = channels[order]
        runs = np.concatenate([[0], np.flatnonzero(np.diff(ordered)) + 1, [n]])  # each channel's first entry
        head = self.structure.head
        per_group = layer.out_channels // _groups(head) if self.kind == "conv" else 1
        per_position = math.prod(layer.frame_out) // layer.out_channels
        elements = math.prod(layer.frame_in)
        start = 0
        while start < n:
            run = int(np.searchsorted(runs, start, side="right")) - 1
            last = min(run + _TIE_CHANNELS, len(runs) - 1)
            # A frame per entry, and for each computed channel its outputs and the tail's temporaries.
            per_entry = 4 * elements + 12 * (last - run) * per_group * per_position + 64
            count = max(1, (memory_budget // 4) // per_entry)
            stop = min(n, start + count, int(runs[last]))
            chunk = order[start:stop]
            needed = ordered[runs[run : last + 1].clip(start, stop - 1)]  # the chunk's channels, ascending
            needed = needed[np.concatenate([[True], needed[1:] != needed[:-1]])]
            codes[chunk] = self._tie_chunk(layer, group, which[chunk], rows[chunk], needed)
            start = stop
        return codes

    def _tie_chunk(
        self, layer: LayerPlan, group: _Group, which: np.ndarray, rows: np.ndarray, needed: np.ndarray
    ) -> np.ndarray:
        n = len(rows)
        frame = np.empty((n, len(self.structure.fill)), dtype=np.float32)
        frame[:] = self.structure.fill
        np.put_along_axis(frame, group.frame_inputs[which], _row_values(group, rows), axis=1)
        x = torch.from_numpy(frame).reshape(len(rows), *layer.frame_in)
        channels = group.channels[which]
        head = self.structure.head
        try:
            with torch.inference_mode():
                if isinstance(head, nn.Linear):  # the linear fast path (exactly nn.Linear: see _HEADS)
                    if layer.out_channels <= _TIE_CHANNELS:  # a narrow layer: all of it, no slicing
                        computed = np.arange(layer.out_channels)
                        z = F.linear(x, self.head_weight(computed), head.bias)
                    else:
                        computed = needed
                        bias: torch.Tensor | None = None if head.bias is None else head.bias[torch.from_numpy(computed)]
                        z = F.linear(x, self.head_weight(computed), bias)
                else:
                    # A grouped convolution's output channel reads its group's inputs: keep whole groups.
                    out_per, in_per = layer.out_channels // head.groups, layer.in_channels // head.groups
                    groups = np.unique(needed // out_per)
                    computed = (groups[:, None] * out_per + np.arange(out_per)).reshape(-1)
                    if len(groups) < head.groups:
                        inputs = (groups[:, None] * in_per + np.arange(in_per)).reshape(-1)
                        x = x[:, torch.from_numpy(inputs)]
                    bias = None if head.bias is None else head.bias[torch.from_numpy(computed)]
                    z = _convolve(head, x, self.head_weight(computed), bias, len(groups))
        except Exception as exc:  # the modules' own failure, reported as the black box would
            msg = f"{layer.name}: forward failed on an input of shape {tuple(x.shape)}: {type(exc).__name__}: {exc}"
            raise EnumerationError(msg) from exc
        out = self.run_tail(layer, z, computed).reshape(len(rows), -1).numpy()
        # Each entry's output: its channel's place among the computed ones, at the first slot's position.
        stride = math.prod(layer.frame_out) // layer.out_channels
        flat = group.frame_outputs[which] + (np.searchsorted(computed, channels) - channels) * stride
        return _codes_domain(layer).encode(out[np.arange(len(rows)), flat])


# Output channels one chunk of tie rows evaluates at most (their weight rows times every row of the chunk).
_TIE_CHANNELS = 64


def _convolve(
    head: nn.Conv1d | nn.Conv2d, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int
) -> torch.Tensor:
    """``head``'s own convolution (its ``_conv_forward``) with ``weight``, ``bias`` and ``groups`` given."""
    conv = F.conv1d if isinstance(head, nn.Conv1d) else F.conv2d
    if head.padding_mode != "zeros":
        padded = F.pad(x, head._reversed_padding_repeated_twice, mode=head.padding_mode)
        return conv(padded, weight, bias, head.stride, 0, head.dilation, groups)
    return conv(x, weight, bias, head.stride, head.padding, head.dilation, groups)


@dataclass
class _Job:
    """One layer's units to tabulate and where its results go."""

    fast: FastPath
    layer: LayerPlan
    units: list[Unit]
    sink: Callable[[Unit], Any]
    progress: Callable[[int], None] = lambda rows: None  # told the rows (per unit) of each block or segment done
    blocks: list[CodeBlock] = field(default_factory=list)
    outputs: dict[int, np.ndarray] = field(default_factory=dict)  # units streamed to their sinks
    near: int = 0  # rows computed by the layer's operations


@dataclass
class _Part:
    """One layer's columns of one domain group with this call's weights; batches join parts of many layers."""

    job: _Job
    group: _Group
    weight: np.ndarray  # (K, f) float64, over each unit's inputs in its input order
    bias: np.ndarray  # (K,) float64
    tail: _AffineTail | None = None  # the affine tail of the columns, once analysed and checked

    @property
    def width(self) -> int:
        return len(self.group.channels)

    @property
    def affine(self) -> _AffineTail:
        """The analysed tail (batches are made of analysed parts only)."""
        if self.tail is None:
            raise AssertionError(f"{self.job.layer.name}: a part batched before its tail was analysed")
        return self.tail

    @property
    def factor(self) -> float:
        """The layer's float32 error bound in units of ``(f + 2) * u * magnitude``: convolutions get twice the
        bound of a plain sum, since their kernels block and vectorize the sums."""
        return 1.0 if self.job.fast.kind == "linear" else 2.0

    def magnitude(self) -> np.ndarray:
        """``|b| + sum_j max |w_j x_j|`` per column: bounds ``|z|`` and scales the float32 error."""
        return np.abs(self.bias) + (np.abs(self.weight) * self.group.peak).sum(axis=1)


def build_tables(jobs: list[_Job], *, memory_budget: int) -> None:
    """Fill every job's code blocks, streamed outputs and near-tie count.

    The analysis is batched across layers: tails of the same module types and settings are analysed and
    checked together, and columns whose units read inputs of the same domains share fixed-point kernels, so
    a network of small layers pays for a few batches instead of every layer. Every pass keeps its
    temporaries within ``memory_budget`` (codes blocks are the tables themselves).
    """
    parts = [p for job in jobs for p in job.fast.parts(job)]
    _analyse_tails(parts, memory_budget=memory_budget)
    batches: dict[tuple[Any, ...], list[_Part]] = {}
    for part in parts:
        if part.tail is None:
            _two_ends_blocks(part, memory_budget=memory_budget)
        else:
            key = (part.group.domains, np.dtype(_codes_domain(part.job.layer).code_dtype).str)
            batches.setdefault(key, []).append(part)
    for members in batches.values():
        for segments in _blocks(members, memory_budget=memory_budget):
            _affine_block(segments, memory_budget=memory_budget)


#: Columns ``c0:c1`` of a part (whole units).
_Segment = tuple[_Part, int, int]


def _blocks(parts: list[_Part], *, memory_budget: int) -> Iterator[list[_Segment]]:
    """Parts' columns in blocks of whole units: codes of a block within half of ``memory_budget`` and its
    kernel within a quarter; a unit larger than a block is a block alone (streamed in row segments)."""
    group = parts[0].group
    rows = group.rows
    itemsize = _codes_domain(parts[0].job.layer).code_dtype.itemsize
    n = int(group.radices.max())
    kernel_bytes = 48 * (rows // _suffix_rows(group) + _suffix_rows(group)) + 24 * len(group.radices) * n + 64
    limit = max(1, min((memory_budget // 2) // (rows * itemsize), (memory_budget // 4) // kernel_bytes))
    block: list[_Segment] = []
    width = 0
    for part in parts:
        starts = part.group.unit_starts
        u = 0
        while u < len(part.group.units):
            # As many of this part's units as fit in the block.
            stop = int(np.searchsorted(starts, starts[u] + (limit - width), side="right")) - 1
            if stop <= u:
                if width:  # the block is full: start another
                    yield block
                    block, width = [], 0
                    continue
                stop = u + 1  # one unit larger than a block: alone
            block.append((part, int(starts[u]), int(starts[stop])))
            width += int(starts[stop] - starts[u])
            u = stop
            if width >= limit:
                yield block
                block, width = [], 0
    if block:
        yield block


def _suffix_rows(group: _Group) -> int:
    return math.prod(len(d) for d in group.domains[group.split :])


def _affine_block(segments: list[_Segment], *, memory_budget: int) -> None:
    """Codes of a block of segments through one fixed-point kernel (row segments into sinks for a unit
    larger than the block); segments whose kernel cannot be built go alone, then to the both-ends path."""
    batch = _Batch.of(segments)
    dtype = _codes_domain(segments[0][0].job.layer).code_dtype
    streamed = batch.width * batch.rows * dtype.itemsize > memory_budget // 2  # one unit larger than a block
    if batch.width * batch.rows <= _DIRECT_ENTRIES and not streamed:
        codes = np.empty((batch.width, batch.rows), dtype=dtype)
        _direct_codes(batch, codes, memory_budget=memory_budget)
        _hand_out(segments, batch, codes)
        return
    kernel = _AffineKernel.build(batch)
    if kernel is None:
        for part, c0, c1 in segments:
            if len(segments) > 1:
                _affine_block([(part, c0, c1)], memory_budget=memory_budget)
            else:
                _two_ends_blocks(part, memory_budget=memory_budget, columns=(c0, c1))
        return
    buffer_dtype = np.uint8 if dtype == np.uint8 else np.int32  # torch narrows int32 into uint8 directly
    n_p, n_s = kernel.prefix.shape[1], kernel.suffix.shape[1]
    width = batch.width
    if streamed:  # row segments into the unit's sink
        part, c0, _ = segments[0]
        unit = part.group.units[int(np.searchsorted(part.group.unit_starts, c0))]
        step = max(1, (memory_budget // 4) // (n_s * width * dtype.itemsize))
        target = part.job.sink(unit)
        for p0 in range(0, n_p, step):
            p1 = min(n_p, p0 + step)
            out = np.empty((width, (p1 - p0) * n_s), dtype=buffer_dtype)
            kernel.codes((0, width), (p0, p1), out, memory_budget=memory_budget)
            target.write(p0 * n_s, out.astype(dtype, copy=False).T)
            part.job.progress((p1 - p0) * n_s)
        part.job.outputs[unit.index] = target.finish()
        return
    out = np.empty((width, batch.rows), dtype=buffer_dtype)
    kernel.codes((0, width), (0, n_p), out, memory_budget=memory_budget)
    _hand_out(segments, batch, out.astype(dtype, copy=False))


def _hand_out(segments: list[_Segment], batch: _Batch, codes: np.ndarray) -> None:
    """Give each segment's layer its rows of a block's ``codes`` as a :class:`CodeBlock` (a view)."""
    for (part, c0, c1), s in zip(segments, batch.starts[:-1].tolist()):
        starts = part.group.unit_starts
        u0, u1 = (int(np.searchsorted(starts, c)) for c in (c0, c1))
        part.job.blocks.append(CodeBlock(codes[s : s + c1 - c0], part.group.units[u0:u1]))
        part.job.progress(part.group.rows * (u1 - u0))


# Blocks of at most this many codes are computed directly in float64 (every row settled with its own bounds):
# fewer operations than the fixed-point kernel, whose per-call costs dominate small blocks.
_DIRECT_ENTRIES = 2**16


def _direct_codes(batch: _Batch, out: np.ndarray, *, memory_budget: int) -> None:
    """Codes ``(K, rows)`` of a small batch: every row decided as a flagged one (:func:`_decide`)."""
    terms = batch.terms()
    width = batch.width
    # z and sum |w x| of every row in one outer sum: the first K rows hold z, the last K the sizes.
    both = _outer_sums([np.concatenate([t, np.abs(t)]) for t in terms], 2 * width)
    both[:width] += batch.bias[:, None]
    both[width:] += np.abs(batch.bias)[:, None]
    _decide(batch, out, both[:width], both[width:], (slice(None), None), memory_budget=memory_budget)


def _decide(
    batch: _Batch,
    out: np.ndarray,
    z: np.ndarray,
    size: np.ndarray,
    columns: Any,
    entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    *,
    memory_budget: int,
) -> None:
    """Codes of entries whose pre-activation is ``z`` (float64) and ``sum |w x|`` (with ``|b|``) is ``size``:
    all of ``out`` (``columns`` indexes the batch's per-column arrays so that they broadcast against ``z``), or
    the ``entries`` (positions in ``out`` and table rows; ``columns`` their batch columns).

    Every float32 evaluation of the layer lies within ``error = factor (f + 2) u size`` of ``z``; the tail at
    the row's own size adds ``error0 + error1 (|z| + error)`` (code units). The entries within that margin
    of a boundary lie within float rounding of it and are computed by their layers' operations
    (:meth:`_Batch.tie_codes`).
    """
    tail = batch.tail
    gain = tail.gain[columns]
    phi = gain * z
    phi += tail.offset[columns]
    nearest = np.round(phi)
    # The margin |gain| error + error0 + error1 (|z| + error) + 1e-9 (1 + |phi|), with the per-column
    # factors gathered: (|gain| + error1) f_u size + error1 |z| + error0 + 1e-9 (1 + |phi|).
    unit = batch.factor[columns] * ((len(batch.group.domains) + 2) * _U32)
    slope = (np.abs(gain) + tail.error1[columns]) * unit
    gap = np.abs(phi - nearest)
    gap -= slope * size
    gap -= tail.error1[columns] * np.abs(z)
    gap -= 1e-9 * np.abs(phi)
    gap -= tail.error0[columns] + 1e-9
    near = gap <= 0
    codes = np.floor(phi)
    np.maximum(codes, tail.low[columns], out=codes)
    np.minimum(codes, tail.high[columns], out=codes)
    if entries is None:
        out[...] = codes
    else:
        out[entries[0], entries[1]] = codes
    if not near.any():
        return
    # Only integers low + 1 .. high are boundaries between codes; the clip settles the others.
    found = np.nonzero(near & (nearest > tail.low[columns]) & (nearest <= tail.high[columns]))
    if entries is None:
        at, which, rows = found, found[0], found[1]
    else:
        at, which, rows = (entries[0][found], entries[1][found]), columns[found], entries[2][found]
    if len(which):
        out[at] = batch.tie_codes(which, rows, memory_budget=memory_budget)


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
    return frame_channels(layer.frame_in, layer.in_channels, channels_last=layer.layout.channels_last)


def _row_values(group: _Group, rows: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """Input values ``(n, f)`` of table rows: the leading and trailing digits' values from two small tables of
    every combination of each (about the square root of the rows each), or digit by digit for a few rows."""
    if len(rows) <= 256:
        digits = rows[:, None] // group.place % group.radices
        return np.stack([v[digits[:, j]] for j, v in enumerate(group.values)], axis=1).astype(dtype, copy=False)
    radices = group.radices.tolist()
    cut = min(range(len(radices) + 1), key=lambda m: math.prod(radices[:m]) + math.prod(radices[m:]))
    low_rows = math.prod(radices[cut:])
    tables = []
    for inputs in (range(cut), range(cut, len(radices))):
        count = math.prod(radices[j] for j in inputs)
        place = place_values([radices[j] for j in inputs])
        index = np.arange(count)
        columns = [group.values[j][index // q % radices[j]] for j, q in zip(inputs, place.tolist())]
        tables.append(np.stack(columns, axis=1).astype(dtype) if columns else np.zeros((count, 0), dtype))
    high, low = np.divmod(rows, low_rows)
    return np.concatenate([tables[0][high], tables[1][low]], axis=1)


def _outer_sums(terms: list[np.ndarray], width: int, dtype: Any = np.float64) -> np.ndarray:
    """``(width, prod n_j)``: one term per input summed over every code tuple, in lexicographic row order."""
    total = np.zeros((width, 1), dtype=dtype)
    for term in terms:
        total = (total[:, :, None] + term[:, None, :].astype(dtype, copy=False)).reshape(width, -1)
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

    def __getitem__(self, index: Any) -> _AffineTail:
        return _AffineTail(*(getattr(self, f.name)[index] for f in fields(self)))

    @classmethod
    def concat(cls, tails: list[_AffineTail]) -> _AffineTail:
        if len(tails) == 1:
            return tails[0]
        return cls(*(np.concatenate([getattr(t, f.name) for t in tails]) for f in fields(cls)))


def _tail_key(tail: tuple[nn.Module, ...], rank: int) -> tuple[Any, ...] | None:
    """What an affine tail's analysis and check depend on besides its per-channel statistics: the module
    types and settings (``None`` when the tail is not affine). Tails with equal keys are analysed together."""
    key: list[Any] = [rank]
    for m in tail:
        t = type(m)
        if "forward" in m.__dict__:  # an instance's own forward: analysed and checked on its own
            key.append(id(m))
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            if m.running_mean is None or m.running_var is None:
                return None  # batch statistics even in eval: not a per-element function
            key.append((t, float(m.eps), m.weight is None, m.bias is None))
        elif t in _CLAMPS:
            key.append((t, *_CLAMPS[t](m)))
        elif isinstance(m, _IDENTITIES):
            key.append(t)
        elif t is Quantize and isinstance(m, Quantize):
            key.append((t, float(m.scale), float(m.zero_point), m.qmin, m.qmax))
        else:
            return None
    return tuple(key)


def _analyse_tails(parts: list[_Part], *, memory_budget: int) -> None:
    """Set each part's affine tail, analysed and checked against its modules; ``None`` where the tail is not
    affine or the check fails (those parts take the both-ends path).

    Parts whose tails have equal keys (:func:`_tail_key`) are analysed and checked as one batch; a batch that
    fails is retried part by part, so one layer's failure does not move the others.
    """
    batches: dict[tuple[Any, ...], list[_Part]] = {}
    for part in parts:
        key = _tail_key(part.job.fast.tail, part.job.layer.geometry.rank)
        if key is not None:
            batches.setdefault(key, []).append(part)
    for members in batches.values():
        modules = members[0].job.fast.tail
        norms = {
            k: _norm_parameters(members, k)
            for k, m in enumerate(modules)
            if isinstance(m, nn.modules.batchnorm._BatchNorm)
        }
        tail = _affine_tail(members, norms)
        magnitude = np.concatenate([p.magnitude() for p in members])
        if tail is not None and _tail_agrees(members, tail, magnitude, norms, memory_budget=memory_budget):
            start = 0
            for part in members:
                part.tail = tail[start : start + part.width]
                start += part.width
        elif len(members) > 1:
            for part in members:
                _analyse_tails([part], memory_budget=memory_budget)


def _norm_parameters(parts: list[_Part], position: int) -> np.ndarray:
    """``(4, K)`` float64 of the parts' columns: running mean and variance, weight and bias of the batch norm
    at ``position`` of each part's tail."""
    rows: list[list[torch.Tensor]] = [[], [], [], []]
    for part in parts:
        m = cast(_BatchNorm, part.job.fast.tail[position])  # the caller found a batch norm there
        stats: tuple[torch.Tensor | None, ...] = (m.running_mean, m.running_var, m.weight, m.bias)
        if not part.group.whole:
            index = torch.from_numpy(part.group.channels)
            stats = tuple(None if t is None else t[index] for t in stats)
        for k, t in enumerate(stats):
            rows[k].append(torch.full((part.width,), float(k == 2)) if t is None else t.detach())
    return torch.stack([torch.cat(r) if len(r) > 1 else r[0] for r in rows]).numpy().astype(np.float64)


def _affine_tail(parts: list[_Part], norms: dict[int, np.ndarray]) -> _AffineTail | None:
    """The parts' tails (equal keys) as an affine map between clamps, with float32 error bounds, or ``None``.

    Each module maps ``v = clip(A z + B, L, H)`` to another such map: batch norm (eval, running statistics)
    is affine per channel, ReLU / ReLU6 / hardtanh clamp, identity and dropout (eval) pass. For
    ``|z| <= Z``, ``|v| <= bound0 + bound1 * Z`` and the float32 value lies within ``err0 + err1 * Z`` of
    the exact one. ``norms``: :func:`_norm_parameters` of each batch norm, by position.
    """
    tail = parts[0].job.fast.tail
    n = sum(p.width for p in parts)
    a, b = np.ones(n), np.zeros(n)
    low, high = np.full(n, -math.inf), np.full(n, math.inf)
    bound0, bound1, err0, err1 = np.zeros(n), np.ones(n), np.zeros(n), np.zeros(n)
    for position, m in enumerate(tail[:-1]):
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            mean, var, w, c = norms[position]
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
                ends = alpha * low + beta, alpha * high + beta
            if not alpha.all():
                ends = tuple(np.where(alpha == 0, beta, e) for e in ends)
            low, high = np.minimum(*ends), np.maximum(*ends)
        elif type(m) in _CLAMPS:
            lo, hi = _CLAMPS[type(m)](m)
            low, high = np.minimum(np.maximum(low, lo), hi), np.minimum(np.maximum(high, lo), hi)
            bound0 = bound0 + max(lo, 0.0) + max(-hi, 0.0)  # a clamp away from 0 can lift small values
        elif not isinstance(m, _IDENTITIES):
            return None
    q = cast(Quantize, tail[-1])  # _read_structure: every recognized tail ends in a Quantize
    scale, zero = float(q.scale), float(q.zero_point)
    if not (math.isfinite(scale) and scale > 0 and math.isfinite(zero)):
        return None
    # Quantize: x / scale + zero_point, each rounded once (2u |x| / scale + u |zero_point|), clamp, round.
    err0 = err0 / scale + 3 * _U32 * (bound0 / scale + abs(zero) + 1)
    err1 = err1 / scale + 3 * _U32 * bound1 / scale
    low_q = np.minimum(np.maximum(low / scale + zero, q.qmin), q.qmax)
    high_q = np.minimum(np.maximum(high / scale + zero, q.qmin), q.qmax)
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


def _tail_agrees(
    parts: list[_Part], tail: _AffineTail, zmax: np.ndarray, norms: dict[int, np.ndarray], *, memory_budget: int
) -> bool:
    """Whether the analytic tail gives the modules' own codes on both sides of every boundary and at the ends.

    Pre-activations just outside each boundary's margin, and at ``+-zmax``, run through the tail modules
    (the first part's; the others' have equal types and settings, and batch norm runs on each column's own
    statistics); every proved analytic code must equal theirs. Columns go in chunks within a quarter of
    ``memory_budget``.
    """
    margin = tail.error_at(zmax) + 1e-6
    steps = np.arange(1, int((tail.high - tail.low).max()) + 1)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero gain: one code, tested at the ends
        crossing = (tail.low + steps - tail.offset) / tail.gain  # (steps, K): where phi crosses each integer
        delta = 3 * margin / np.abs(tail.gain)
        points = np.concatenate([-zmax[None], zmax[None], crossing - delta, crossing + delta])
    if not tail.gain.all():
        points = np.nan_to_num(points, nan=0.0, posinf=0.0, neginf=0.0)
    points = np.minimum(np.maximum(points, -zmax), zmax).astype(np.float32)
    phi = tail.gain * points.astype(np.float64) + tail.offset
    sure = np.abs(phi - np.round(phi)) > margin
    expected = np.minimum(np.maximum(np.floor(phi), tail.low), tail.high).astype(np.int64)
    first = parts[0].job
    rank = first.layer.geometry.rank
    values = _codes_domain(first.layer).values.astype(np.float32)
    # Each batch norm's statistics, column by column (the parts' channels, in batch order).
    stats = {position: torch.from_numpy(norm.astype(np.float32)) for position, norm in norms.items()}
    width = points.shape[1]
    step = max(1, (memory_budget // 4) // (12 * len(points)))
    for k0 in range(0, width, step):
        k1 = min(width, k0 + step)
        x = torch.from_numpy(np.ascontiguousarray(points[:, k0:k1])).reshape((len(points), k1 - k0) + (1,) * rank)
        try:
            with torch.inference_mode():
                for position, m in enumerate(first.fast.tail):
                    if position in stats:
                        mean, var, w, c = stats[position] if k1 - k0 == width else stats[position][:, k0:k1]
                        x = F.batch_norm(x, mean, var, w, c, False, 0.0, cast(_BatchNorm, m).eps)
                    elif not isinstance(m, nn.Dropout):
                        x = m.forward(x)  # no hooks on a recognized layer's modules: its forward is its call
        except Exception as exc:  # the modules' own failure, reported as the black box would
            msg = f"{first.layer.name}: forward failed on an input of shape {tuple(x.shape)}: {exc}"
            raise EnumerationError(msg) from exc
        got = x.reshape(len(points), -1).numpy()
        # The quantizer's outputs are exactly its domain's float32 values: compare values, not codes.
        if not bool((got == values[expected[:, k0:k1]])[sure[:, k0:k1]].all()):
            return False
    return True


@dataclass(frozen=True)
class _Batch:
    """Columns of one or more segments (of parts of any layers) whose units read inputs of the same domains:
    one combination set, per-column weights, biases, error factors and tails."""

    segments: tuple[_Segment, ...]
    starts: np.ndarray  # (segments + 1,) first column of each segment in the batch, then the width
    weight: np.ndarray  # (K, f) float64
    bias: np.ndarray  # (K,) float64
    factor: np.ndarray  # (K,) the layers' float32 error factors
    tail: _AffineTail
    group: _Group  # the first segment's group: the domains every segment shares

    @classmethod
    def of(cls, segments: list[_Segment]) -> _Batch:
        widths = [c1 - c0 for _, c0, c1 in segments]
        tails = [p.affine if c1 - c0 == p.width else p.affine[c0:c1] for p, c0, c1 in segments]
        if len(segments) == 1:
            part, c0, c1 = segments[0]
            weight, bias = part.weight[c0:c1], part.bias[c0:c1]
            factor = np.full(c1 - c0, part.factor)
        else:
            weight = np.concatenate([p.weight[c0:c1] for p, c0, c1 in segments])
            bias = np.concatenate([p.bias[c0:c1] for p, c0, c1 in segments])
            factor = np.repeat([p.factor for p, _, _ in segments], widths)
        tail = _AffineTail.concat(tails)
        starts = np.asarray([0, *itertools.accumulate(widths)], dtype=np.int64)
        return cls(tuple(segments), starts, weight, bias, factor, tail, segments[0][0].group)

    @property
    def width(self) -> int:
        return int(self.starts[-1])

    @property
    def rows(self) -> int:
        return self.group.rows

    def error(self, magnitude: np.ndarray, columns: Any = slice(None)) -> np.ndarray:
        """Bound of the distance between any float32 evaluation of a sum and the exact sum.

        ``f`` products and a bias, added in any order (with or without fused multiply-adds), are within
        ``gamma(f + 1) * magnitude`` of the exact sum, ``gamma(n) = n u / (1 - n u) < (f + 2) u``.
        """
        return self.factor[columns] * (len(self.group.domains) + 2) * _U32 * magnitude

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

    def tie_codes(self, which: np.ndarray, rows: np.ndarray, *, memory_budget: int) -> np.ndarray:
        """Codes of single entries (batch column ``which``, table row ``rows``) by their layers' operations
        (:meth:`FastPath.tie_codes`), segment by segment; each layer counts its rows in ``near``."""
        codes = np.empty(len(rows), dtype=np.int64)
        owner = np.searchsorted(self.starts, which, side="right") - 1 if len(self.segments) > 1 else None
        for s in range(len(self.segments)) if owner is not None else (0,):
            part, c0, _ = self.segments[s]
            mine = np.flatnonzero(owner == s) if owner is not None else slice(None)
            local = which[mine] - self.starts[s] + c0
            if not len(local):
                continue
            fast, layer = part.job.fast, part.job.layer
            codes[mine] = fast.tie_codes(layer, part.group, local, rows[mine], memory_budget=memory_budget)
            part.job.near += len(local)
        return codes


@dataclass(frozen=True)
class _AffineKernel:
    """Fixed-point codes of one batch of columns: ``phi`` as int32 outer sums, ``F`` fraction bits.

    Rows split into a prefix (leading inputs) and a suffix (trailing inputs, a contiguous block of a few
    hundred rows): ``phi_fx[k, p * n_s + s] = prefix[k, p] + suffix[k, s]``.
    """

    batch: _Batch
    margin: np.ndarray  # (K,) code units: float32 error of the layer and the tail
    bits: int  # F
    slack: np.ndarray  # (K,) fixed-point units added to phi: a row is unproved when (phi_fx & mask) < 2 * slack
    prefix: torch.Tensor  # (K, n_p) int32, constant and slack included
    suffix: torch.Tensor  # (K, n_s) int32

    @classmethod
    def build(cls, batch: _Batch) -> _AffineKernel | None:
        """The kernel for ``batch``, or ``None`` when the margins do not fit in the fixed point."""
        tail = batch.tail
        spread = batch.reach()
        magnitude = np.abs(batch.bias) + spread  # bounds |z| and scales the float32 error
        fan_in = len(batch.group.domains)
        error = batch.error(magnitude)
        constant = tail.gain * batch.bias + tail.offset
        margin = np.abs(tail.gain) * error + tail.error_at(magnitude + error)
        reach = np.abs(constant) + np.abs(tail.gain) * spread
        bits = min(_MAX_FRACTION_BITS, 29 - math.ceil(math.log2(float(reach.max()) + 2)))
        if bits < _MIN_FRACTION_BITS:
            return None
        # Fixed point: each of f terms and the constant rounds by half a unit; two units for float64 sums.
        slack = np.ceil(margin * 2**bits).astype(np.int64) + (fan_in + 2) // 2 + 2
        if (4 * slack >= 2**bits).any():
            return None
        fixed = [np.rint(t * 2.0**bits).astype(np.int64) for t in batch.terms(tail.gain)]
        base = np.rint(constant * 2.0**bits).astype(np.int64) + slack
        split = batch.group.split
        prefix = (_outer_sums(fixed[:split], len(base), np.int64) + base[:, None]).astype(np.int32)
        suffix = _outer_sums(fixed[split:], len(base), np.int64).astype(np.int32)
        return cls(batch, margin, bits, slack, torch.from_numpy(prefix), torch.from_numpy(suffix))

    def codes(
        self, columns: tuple[int, int], prefixes: tuple[int, int], out: np.ndarray, *, memory_budget: int
    ) -> None:
        """Write the codes of columns ``k0:k1`` over the rows of prefixes ``p0:p1`` into ``out``
        ``(k1 - k0, (p1 - p0) * n_s)`` (uint8, or int32 for wider codes).

        Each chunk is five passes over int32 (sum, fraction bits, shift, clip, narrowing copy) and a minimum
        of the fraction bits per run of ``block`` rows; runs whose minimum is below the margin are searched
        once the codes are written, in pieces within a quarter of ``memory_budget``, and settled.
        """
        (k0, k1), (q0, q1) = columns, prefixes
        n_s = self.suffix.shape[1]
        block = 64 if n_s % 64 == 0 else n_s
        out3 = torch.from_numpy(out).view(k1 - k0, q1 - q0, n_s)
        minima = torch.empty((k1 - k0, q1 - q0, n_s // block), dtype=torch.int32)
        tail = self.batch.tail
        low, high = tail.low[k0:k1], tail.high[k0:k1]
        uniform = bool((low == low[0]).all() and (high == high[0]).all())
        lo_t = torch.from_numpy(low.astype(np.int32)).view(-1, 1, 1)
        hi_t = torch.from_numpy(high.astype(np.int32)).view(-1, 1, 1)
        mask = (1 << self.bits) - 1
        per_k = max(1, min(_CHUNK, memory_budget // 64) // n_s)  # two int32 buffers: an eighth of the budget
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
        limit = torch.from_numpy((2 * self.slack[k0:k1]).astype(np.int32))
        flagged = minima < limit.view(-1, 1, 1)
        # The flagged runs again, as int32 sums: the entries whose fraction bits lie within the margin. Their
        # number is bounded by the memory for their indices and for settling them (per entry).
        # Per flagged entry: its sums and bits (int32, a mask), its indices and its settling (a few float64s).
        runs_step = max(1, (memory_budget // 4) // (block * 200))
        suffix = self.suffix.view(self.suffix.shape[0], -1, block)
        counts = np.cumsum(flagged.view(k1 - k0, -1).sum(dim=1).numpy())
        if not counts[-1]:
            return
        # Columns in pieces of about ``runs_step`` flagged runs each.
        cuts = np.searchsorted(counts, np.arange(runs_step, int(counts[-1]), runs_step), side="left")
        cuts = np.unique(np.concatenate([[0], cuts + 1, [k1 - k0]]).clip(0, k1 - k0))
        for c0, c1 in itertools.pairwise(cuts):
            k, p, b = torch.nonzero(flagged[c0:c1], as_tuple=True)
            k += int(c0)
            for r0 in range(0, len(k), runs_step):
                kk, pp, bb = k[r0 : r0 + runs_step] + k0, p[r0 : r0 + runs_step] + q0, b[r0 : r0 + runs_step]
                phi = self.prefix[kk, pp, None] + suffix[kk, bb]
                entry_limit = limit[kk - k0][:, None]
                run, offset = torch.nonzero(torch.bitwise_and(phi, mask) < entry_limit, as_tuple=True)
                which, prefix = kk[run].numpy(), pp[run].numpy()
                suffix_rows = (bb[run] * block + offset).numpy()
                self._settle(out, which, prefix, suffix_rows, origin=(k0, q0 * n_s), memory_budget=memory_budget)

    @cached_property
    def sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Float64 outer sums ``(K, n_p)``, ``(K, n_s)`` of ``z`` (the bias with the prefix's terms, the
        suffix's terms) and of ``sum |w x|`` (with ``|bias|``), made when a first entry needs settling."""
        batch = self.batch
        split = batch.group.split
        terms = batch.terms()
        sizes = [np.abs(t) for t in terms]
        width = batch.width
        return (
            _outer_sums(terms[:split], width) + batch.bias[:, None],
            _outer_sums(terms[split:], width),
            _outer_sums(sizes[:split], width) + np.abs(batch.bias)[:, None],
            _outer_sums(sizes[split:], width),
        )

    def _settle(
        self,
        out: np.ndarray,
        which: np.ndarray,
        prefix: np.ndarray,
        suffix: np.ndarray,
        *,
        origin: tuple[int, int],
        memory_budget: int,
    ) -> None:
        """Decide the flagged entries (column ``which``, table row ``prefix * n_s + suffix``) of ``out``, whose
        first entry is ``origin``.

        In float64 with each row's own error bounds (the layer's sum and the tail at that row's size); the
        rows still within their margin lie within float rounding of a boundary and are computed by their
        layers' operations (:meth:`_Batch.tie_codes`).
        """
        batch = self.batch
        n_s = self.suffix.shape[1]
        rows = prefix * n_s + suffix
        if "sums" in self.__dict__ or len(which) * len(batch.weight[0]) > batch.width * (self.prefix.shape[1] + n_s):
            z_prefix, z_suffix, size_prefix, size_suffix = self.sums
            z = z_prefix[which, prefix] + z_suffix[which, suffix]
            size = size_prefix[which, prefix] + size_suffix[which, suffix]
        else:  # a few entries: their terms one input at a time
            values = _row_values(batch.group, rows, dtype=np.float64)
            z, size = batch.bias[which].copy(), np.abs(batch.bias[which])
            for j in range(values.shape[1]):
                term = batch.weight[which, j] * values[:, j]
                z += term
                size += np.abs(term)
        entries = (which - origin[0], rows - origin[1], rows)
        _decide(batch, out, z, size, which, entries, memory_budget=memory_budget)


# -- other monotone tails: both ends of the rounding interval ----------------------------------------------


def _two_ends_blocks(part: _Part, *, memory_budget: int, columns: tuple[int, int] | None = None) -> None:
    """Codes of a part's columns (``columns``: a range of whole units) by :func:`_two_ends`, in blocks of
    units within half of ``memory_budget``; a unit larger than that goes in row segments into its sink."""
    job, group = part.job, part.group
    dtype = _codes_domain(job.layer).code_dtype
    starts = group.unit_starts
    u0, u1 = (0, len(group.units)) if columns is None else (int(np.searchsorted(starts, c)) for c in columns)
    limit = max(1, (memory_budget // 2) // (group.rows * dtype.itemsize))
    u = u0
    while u < u1:
        stop = max(u + 1, min(u1, int(np.searchsorted(starts, starts[u] + limit, side="right")) - 1))
        c0, c1 = int(starts[u]), int(starts[stop])
        if (c1 - c0) * group.rows * dtype.itemsize > memory_budget // 2:  # one unit: row segments
            target = job.sink(group.units[u])
            for first, codes in _two_ends(part, c0, c1, memory_budget=memory_budget):
                target.write(first, codes.T)
                job.progress(codes.shape[1])
            job.outputs[group.units[u].index] = target.finish()
        else:
            codes = np.empty((c1 - c0, group.rows), dtype=dtype)
            for first, chunk in _two_ends(part, c0, c1, memory_budget=memory_budget):
                codes[:, first : first + chunk.shape[1]] = chunk
            job.blocks.append(CodeBlock(codes, group.units[u:stop]))
            job.progress(group.rows * (stop - u))
        u = stop


def _two_ends(part: _Part, c0: int, c1: int, *, memory_budget: int) -> Iterator[tuple[int, np.ndarray]]:
    """Codes ``(K, block rows)`` of columns ``c0:c1``, block by block of rows (with the block's first row),
    through the tail modules at both ends of each row's float32 error interval; rows whose two ends differ
    are computed by the layer's operations (:meth:`FastPath.tie_codes`)."""
    job, group = part.job, part.group
    fast, layer = job.fast, job.layer
    radices = group.radices
    fan_in, k = len(radices), c1 - c0
    weight, bias = part.weight[c0:c1], part.bias[c0:c1]
    terms = [weight[:, j, None] * v[None, :] for j, v in enumerate(group.values)]
    channels = group.channels[c0:c1]
    sort = np.argsort(channels, kind="stable")  # the tail runs on ascending channels
    per_row = 8 * k * 12
    split = fan_in
    while split > 0 and int(np.prod(radices[split - 1 :])) * per_row <= memory_budget // 4:
        split -= 1
    split = min(split, fan_in - 1) if fan_in > 1 else 0
    suffix = _outer_sums(terms[split:], k).T  # (rows of the trailing inputs, K)
    suffix_mag = _outer_sums([np.abs(t) for t in terms[split:]], k).T
    size = len(suffix)
    factor = (fan_in + 2) * _U32 * part.factor
    place = place_values(radices[:split])
    for p in range(int(np.prod(radices[:split]))):  # a loop over blocks of rows, each of trailing inputs
        digits = (p // place) % radices[:split]
        offset = bias + sum((terms[j][:, digits[j]] for j in range(split)), np.zeros(k))
        offset_mag = np.abs(bias) + sum((np.abs(terms[j][:, digits[j]]) for j in range(split)), np.zeros(k))
        exact = suffix + offset
        bound = factor * (suffix_mag + offset_mag) + 4 * _EPS32 * np.abs(exact)
        low = _tail_columns(fast, layer, (exact - bound)[:, sort], channels[sort])
        high = _tail_columns(fast, layer, (exact + bound)[:, sort], channels[sort])
        codes = np.empty((k, size), dtype=_codes_domain(layer).code_dtype)
        codes[sort] = low.T
        rr, cc = np.nonzero(low != high)
        if len(rr):
            which = sort[cc] + c0
            codes[which - c0, rr] = fast.tie_codes(layer, group, which, rr + p * size, memory_budget=memory_budget)
            job.near += len(rr)
        yield p * size, codes


def _tail_columns(fast: FastPath, layer: LayerPlan, pre: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """Tail codes ``(n, K)`` of pre-activations ``pre`` ``(n, K)`` of output ``channels`` (ascending)."""
    x = torch.from_numpy(pre.astype(np.float32)).reshape((len(pre), len(channels)) + (1,) * layer.geometry.rank)
    return _codes_domain(layer).encode(fast.run_tail(layer, x, channels).reshape(len(pre), -1).numpy())


def recognize(
    module: nn.Module, layer: LayerPlan, *, memory_budget: int = 256 * 2**20, ieee: bool | None = None
) -> FastPath | None:
    """The fast path for ``module`` if its structure proves the decomposition and the tables, else ``None``.

    Needs: one ``nn.Linear`` (pruned or not; a non-spatial layer) or ``nn.Conv1d``/``nn.Conv2d`` (channels
    first, the plan's window being the convolution's own) followed by elementwise modules of the built-in
    types ending in :class:`iotable.nn.Quantize`; float32 on the CPU with IEEE float32 products; no forward
    hooks other than pruning; batch norm on running statistics; every weight outside a unit's declared
    inputs exactly zero. Such a layer's units are independent by construction, so it needs no probe.
    ``ieee``: :func:`_ieee_float32` when the caller has just read it (for many layers at once).
    """
    structure = _structure(module, layer)
    if structure is None or structure.tail[-1].domain != layer.output_domain:
        return None
    parts = (structure.head, *structure.tail)
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is None for m in parts):
        return None  # batch statistics even in eval: outputs would depend on the whole batch
    if not (_ieee_float32() if ieee is None else ieee) or _hooked(list(module.modules())):
        return None
    for m in parts:
        for t in (*m._parameters.values(), *m._buffers.values()):
            if t is not None and t.is_floating_point() and (t.dtype != torch.float32 or t.device.type != "cpu"):
                return None
    pairs = _weights(structure, layer, memory_budget=memory_budget)
    if pairs is None:
        return None
    head = structure.head
    bias = head.bias.detach().numpy().astype(np.float64) if head.bias is not None else np.zeros(layer.out_channels)
    return FastPath(structure=structure, pairs=pairs, bias=bias)
