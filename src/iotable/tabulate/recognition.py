"""Recognizing a layer the fast path can tabulate: its modules, its weights, and its own operations for the
rows within float rounding of a quantization boundary (see :mod:`iotable.tabulate.fastpath`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as torch_module
from torch.nn.utils import prune

from .._util.order import unit_elements
from ..errors import EnumerationError
from ..front.layerplan import LayerPlan
from ..front.metadata import ELEMENTWISE
from ..front.registry import kind_of
from ..front.window import window_mismatch
from ..nn import Quantize
from .columns import _codes_domain, _frame_channels, _Group, _Job, _Part, _read_index, _row_values

__all__ = ["FastPath", "recognize"]

# The layers a fast path reads the weights of (exactly these classes, not subclasses).
_HEADS = (nn.Linear, nn.Conv1d, nn.Conv2d)
_Head = nn.Linear | nn.Conv1d | nn.Conv2d


def _groups(head: _Head) -> int:
    """A convolution's groups; 1 for a linear layer."""
    return 1 if isinstance(head, nn.Linear) else head.groups


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
