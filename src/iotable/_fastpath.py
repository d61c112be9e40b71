"""A structured fast path for sparse linear layers (Linear -> monotone elementwise modules -> quantizer).

The black-box enumerator runs the whole layer once per colour of units; for a LogicNets-style sparse
layer most of that work multiplies zeros. Here each unit's pre-activation is one small matrix product of the
shared combination matrix (all code tuples of its fan-in) with the unit's own weights, and the layer's own
elementwise modules (batch norm, activations, quantizer) then run on the result.

Exactness. A float32 sum of ``f`` products, in whatever order a kernel adds them (adding the exact zeros of
pruned weights changes nothing), lies within ``B = (f + 2) * eps32 * (sum |w x| + |b|)`` of the exact sum,
computed here in float64. The tail (batch norm, ReLU, hardtanh, sigmoid, tanh, quantizer) is monotone, so
when the tail gives the same code at both ends of ``[exact - B, exact + B]``, every float32 evaluation of the
layer — the model's own, on any batch — gives that code. The few rows where the ends differ lie within float
rounding of a quantization boundary; they are recomputed through the module itself, exactly as the black-box
path would, and counted (``LayerTables.near_ties``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .nn import Quantize
from .plan import LayerPlan, Unit, run_module
from .spec import ELEMENTWISE

__all__ = ["LinearFastPath", "recognize"]

_EPS32 = float(np.finfo(np.float32).eps)


def _parts(module: nn.Module) -> list[nn.Module]:
    if isinstance(module, nn.Sequential):
        return [p for m in module for p in _parts(m)]
    return [module]


def _weight(linear: nn.Linear) -> torch.Tensor:
    # With torch.nn.utils.prune the effective weight is weight_orig * weight_mask (recomputed at forward).
    if hasattr(linear, "weight_orig") and hasattr(linear, "weight_mask"):
        return linear.weight_orig * linear.weight_mask
    return linear.weight


@dataclass(frozen=True)
class LinearFastPath:
    """A recognized sparse linear layer: weights per output channel, the tail modules, the whole module."""

    module: nn.Module
    weight: np.ndarray  # (out, in) float64
    bias: np.ndarray  # (out,) float64
    body: nn.Module  # the monotone elementwise modules before the quantizer
    quantizer: Quantize

    def tables(self, layer: LayerPlan, units: list[Unit], *, memory_budget: int) -> tuple[dict[int, np.ndarray], int]:
        """Code outputs ``(rows, fan_out)`` of each unit, and how many rows were near a rounding boundary."""
        groups: dict[tuple[Any, ...], list[Unit]] = {}
        for unit in units:  # units whose inputs have the same domains share one combination matrix
            groups.setdefault(layer.unit_domains(unit), []).append(unit)
        outputs: dict[int, np.ndarray] = {}
        near = 0
        for domains, members in groups.items():
            got, ties = self._group(layer, domains, members, memory_budget=memory_budget)
            outputs.update(got)
            near += ties
        return outputs, near

    def _group(
        self, layer: LayerPlan, domains: tuple[Any, ...], units: list[Unit], *, memory_budget: int
    ) -> tuple[dict[int, np.ndarray], int]:
        radices = np.asarray([len(d) for d in domains], dtype=np.int64)
        rows, fan_in = int(np.prod(radices)), len(domains)
        channels = np.asarray([c for u in units for c in u.out_channels], dtype=np.int64)
        inputs = np.asarray([u.in_channels for u in units for _ in u.out_channels], dtype=np.int64)  # (K, f)
        w = np.take_along_axis(self.weight[channels], inputs, axis=1)  # (K, f)
        b = self.bias[channels]
        place = np.ones(fan_in, dtype=np.int64)
        for j in range(fan_in - 2, -1, -1):
            place[j] = place[j + 1] * radices[j + 1]
        codes = np.empty((rows, len(channels)), dtype=layer.output_domain.code_dtype)
        # Each input's contribution w_j * v per value, then rows as outer sums in lexicographic order: the
        # trailing inputs' sums are built once, and each combination of the leading inputs adds its offset.
        terms = [np.outer(d.values, w[:, j]) for j, d in enumerate(domains)]  # (n_j, K) float64
        per_row = 8 * (layer.out_channels * 6 + len(channels) * 8)
        split = fan_in
        while split > 0 and int(np.prod(radices[split - 1 :])) * per_row <= memory_budget:
            split -= 1
        split = min(split, fan_in - 1) if fan_in > 1 else 0
        suffix, suffix_mag = _outer_sums(terms[split:])  # (rows of the trailing inputs, K)
        prefix_rows, prefix_place = int(np.prod(radices[:split])), place[:split] // len(suffix)
        near_rows, near_cols = [], []
        for p in range(prefix_rows):  # a loop over chunks of rows, each a whole block of trailing inputs
            digits = (p // prefix_place) % radices[:split]
            offset = b + sum((terms[j][digits[j]] for j in range(split)), np.zeros(len(channels)))
            offset_mag = np.abs(b) + sum((np.abs(terms[j][digits[j]]) for j in range(split)), np.zeros(len(channels)))
            exact = suffix + offset
            bound = (fan_in + 2) * _EPS32 * (suffix_mag + offset_mag) + 4 * _EPS32 * np.abs(exact)
            low = self._codes(layer, exact - bound, channels)
            high = self._codes(layer, exact + bound, channels)
            start = p * len(suffix)
            codes[start : start + len(suffix)] = low
            rr, cc = np.nonzero(low != high)
            near_rows.append(rr + start)
            near_cols.append(cc)
        rr, cc = np.concatenate(near_rows), np.concatenate(near_cols)
        if len(rr):
            x = _values(domains, (rr[:, None] // place) % radices)
            codes[rr, cc] = self._through_module(layer, x, channels[cc], inputs[cc])
        result, column = {}, 0
        for unit in units:
            result[unit.index] = codes[:, column : column + unit.fan_out]
            column += unit.fan_out
        return result, len(rr)

    def _codes(self, layer: LayerPlan, pre: np.ndarray, channels: np.ndarray) -> np.ndarray:
        """The tail's output codes for pre-activations ``pre`` (n, K) of output ``channels`` (one column each)."""
        identity = len(channels) == layer.out_channels and bool((channels == np.arange(len(channels))).all())
        if identity:
            full = torch.from_numpy(pre.astype(np.float32))
        else:
            full = torch.zeros((len(pre), layer.out_channels), dtype=torch.float32)
            full[:, torch.from_numpy(channels)] = torch.from_numpy(pre.astype(np.float32))  # others stay 0
        x = run_module(self.body, full, layer.name)
        q = self.quantizer
        # The quantizer's own arithmetic (Quantize.forward), stopped at the integer: its code is q - qmin.
        with torch.inference_mode():
            y = torch.clamp(x / q.scale + q.zero_point, q.qmin, q.qmax)
            codes = (torch.round(y) - q.qmin).to(torch.int64)
        return codes.numpy() if identity else codes.numpy()[:, channels]

    def _through_module(self, layer: LayerPlan, x: np.ndarray, channels: np.ndarray, inputs: np.ndarray) -> np.ndarray:
        """Codes of single (row, output channel) entries computed by the whole module, as the black box does."""
        fill = np.asarray([d.values[c] for d, c in zip(layer.input_domains, layer.fill_codes)], dtype=np.float32)
        full = np.broadcast_to(fill, (len(x), layer.in_channels)).copy()
        np.put_along_axis(full, inputs, x.astype(np.float32), axis=1)
        out = run_module(self.module, torch.from_numpy(full), layer.name).numpy()
        return layer.output_domain.encode(out[np.arange(len(x)), channels])


def _outer_sums(terms: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Sums (and sums of magnitudes) of one term per input over every code tuple, in lexicographic order."""
    width = terms[0].shape[1] if terms else 0
    total, magnitude = np.zeros((1, width)), np.zeros((1, width))
    for term in terms:
        total = (total[:, None, :] + term[None, :, :]).reshape(-1, width)
        magnitude = (magnitude[:, None, :] + np.abs(term)[None, :, :]).reshape(-1, width)
    return total, magnitude


def _values(domains: tuple[Any, ...], digits: np.ndarray) -> np.ndarray:
    """Input values (float64) of code digits ``(n, f)``, input ``j`` read through ``domains[j]``."""
    return np.stack([d.values[digits[:, j]] for j, d in enumerate(domains)], axis=1)


def recognize(module: nn.Module, layer: LayerPlan) -> LinearFastPath | None:
    """The fast path for ``module`` if it is a sparse linear layer it can tabulate exactly, else ``None``.

    Needs: a non-spatial layer whose modules are one ``nn.Linear`` (pruned or not) followed by monotone
    elementwise modules ending in :class:`iotable.nn.Quantize`, float32, with every weight outside a unit's
    declared fan-in exactly zero.
    """
    parts = _parts(module)
    if layer.geometry.rank or layer.output_domain is None or len(parts) < 2:
        return None
    head, tail = parts[0], parts[1:]
    if type(head) is not nn.Linear or not isinstance(tail[-1], Quantize):
        return None
    # Every built-in elementwise module is monotone per channel; subclasses may override forward.
    if not all(type(m) in ELEMENTWISE for m in tail):
        return None
    weight = _weight(head).detach()
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        return None
    w = weight.numpy().astype(np.float64)
    reads = np.zeros(w.shape, dtype=bool)
    for unit in layer.units:
        reads[np.ix_(unit.out_channels, unit.in_channels)] = True
    if (w[~reads] != 0).any():
        return None  # the declared fan-in leaves out a non-zero weight: the probe or black box decides
    bias = head.bias.detach().numpy().astype(np.float64) if head.bias is not None else np.zeros(w.shape[0])
    if tail[-1].domain != layer.output_domain:
        return None
    return LinearFastPath(module=module, weight=w, bias=bias, body=nn.Sequential(*tail[:-1]), quantizer=tail[-1])
