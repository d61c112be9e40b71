"""The metadata probe: perturb inputs outside each unit's declared fan-in and watch its outputs.

For random base inputs, each probed input element is changed to another code; any output that changes must
belong to a unit whose declared fan-in (channels x window at that output's position) holds that element.
An output that changes otherwise means the metadata omits an input the unit really reads.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .enumerate import _BYTES_PER_ELEMENT, DEFAULT_MEMORY_BUDGET, FrameValues
from .errors import SpecMismatchError
from .plan import LayerPlan, module_dtype, run_module

__all__ = ["check_decomposition"]


def _coordinates(flat: np.ndarray, shape: tuple[int, ...], channels_last: bool) -> tuple[np.ndarray, np.ndarray]:
    """Channel and spatial position (rows of ``(rank,)``) of flat per-sample indices."""
    coords = np.stack(np.unravel_index(flat, shape), axis=1) if len(shape) else np.zeros((len(flat), 0), np.int64)
    if channels_last:
        return coords[:, -1], coords[:, :-1]
    return coords[:, 0], coords[:, 1:]


def _allowed(layer: LayerPlan, elements: np.ndarray) -> np.ndarray:
    """Boolean ``(len(elements), outputs)``: may output ``o`` depend on input element ``e``?"""
    reads = np.zeros((layer.in_channels, layer.out_channels), dtype=bool)
    for unit in layer.units:
        reads[np.ix_(unit.in_channels, unit.out_channels)] = True
    c_in, pos_in = _coordinates(elements, layer.frame_in, layer.layout.channels_last)
    all_out = np.arange(math.prod(layer.frame_out))
    c_out, pos_out = _coordinates(all_out, layer.frame_out, layer.layout.channels_last)
    allowed = reads[c_in][:, c_out]
    g = layer.geometry
    for axis in range(g.rank):
        origin = pos_out[:, axis] * g.stride[axis] - g.padding[axis]
        delta = pos_in[:, axis][:, None] - origin[None, :]
        allowed &= (delta >= 0) & (delta <= (g.kernel[axis] - 1) * g.dilation[axis]) & (delta % g.dilation[axis] == 0)
    return allowed


def _describe(layer: LayerPlan, flat: int, shape: tuple[int, ...], what: str) -> str:
    channel, pos = _coordinates(np.asarray([flat]), shape, layer.layout.channels_last)
    if layer.geometry.rank == 0:
        return f"{what} {int(channel[0])}"
    return f"{what} channel {int(channel[0])} at position {tuple(int(p) for p in pos[0])}"


def check_decomposition(
    module: nn.Module,
    layer: LayerPlan,
    *,
    samples: int = 3,
    max_elements: int | None = None,
    seed: int = 0,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> None:
    """Raise :class:`SpecMismatchError` when a unit's output depends on an input outside its fan-in.

    Probes ``samples`` random inputs and up to ``max_elements`` input elements of the enumeration frame
    (default: 2048 for non-spatial layers, every one of a small frame; 512 for spatial layers, whose
    dependencies repeat at every window position, so a random sample of positions shows a leak as well).
    """
    rng = np.random.default_rng(seed)
    dtype, device = module_dtype(module)
    frame = FrameValues.build(layer, dtype=dtype, device=device)
    radices = frame.radices.numpy()
    n_in = len(radices)
    # A one-value element cannot be perturbed, and nothing can depend on it.
    candidates = np.flatnonzero(radices > 1)
    if max_elements is None:
        max_elements = 512 if layer.geometry.rank else 2048
    if len(candidates) > max_elements:
        candidates = np.sort(rng.choice(candidates, max_elements, replace=False))
    elements = candidates
    base = (rng.random((samples, n_in)) * radices).astype(np.int64)
    base_out = run_module(module, frame.values_of(torch.as_tensor(base)), layer.name).reshape(samples, -1)
    per_element = samples * (n_in + math.prod(layer.frame_out)) * _BYTES_PER_ELEMENT + math.prod(layer.frame_out)
    chunk = max(1, memory_budget // per_element)
    for start in range(0, len(elements), chunk):
        part = elements[start : start + chunk]
        codes = np.repeat(base[:, None, :], len(part), axis=1)  # (samples, part, n_in)
        n = radices[part][None, :]
        shift = 1 + (rng.random((samples, len(part))) * (n - 1)).astype(np.int64)
        rows = np.arange(len(part))
        codes[:, rows, part] = (codes[:, rows, part] + shift) % n
        x = frame.values_of(torch.as_tensor(codes.reshape(-1, n_in)))
        out = run_module(module, x, layer.name).reshape(samples, len(part), -1)
        before = base_out[:, None, :]
        same = (out == before) | (torch.isnan(out) & torch.isnan(before))
        changed = (~same).any(dim=0).cpu().numpy()  # (part, outputs)
        violations = changed & ~_allowed(layer, part)
        if violations.any():
            e, o = (int(v) for v in np.argwhere(violations)[0])
            channel = _coordinates(np.asarray([o]), layer.frame_out, layer.layout.channels_last)[0][0]
            unit = next(u for u in layer.units if channel in u.out_channels)
            g = layer.geometry
            window = (
                f" over a window of kernel {g.kernel}, stride {g.stride}, dilation {g.dilation}, padding {g.padding}"
                if g.rank
                else ""
            )
            msg = (
                f"{layer.name}: unit {unit.index} ({_describe(layer, o, layer.frame_out, 'output')}) changed when "
                f"{_describe(layer, int(part[e]), layer.frame_in, 'input')} changed, but the metadata declares "
                f"its fan-in as input channel(s) {list(unit.in_channels)}{window} ({layer.spec.source}); "
                "widen the unit's fan_in=/groups=/kernel_size= so that it includes every input it reads"
            )
            raise SpecMismatchError(msg)
