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

from .enumerate import _BYTES_PER_ELEMENT, _CACHE_BYTES, DEFAULT_MEMORY_BUDGET, FrameValues
from .errors import SpecMismatchError
from .plan import LayerPlan, eval_mode, module_dtype, run_module

__all__ = ["check_decomposition"]


def _coordinates(flat: np.ndarray, shape: tuple[int, ...], channels_last: bool) -> tuple[np.ndarray, np.ndarray]:
    """Channel and spatial position (rows of ``(rank,)``) of flat per-sample indices."""
    coords = np.stack(np.unravel_index(flat, shape), axis=1) if len(shape) else np.zeros((len(flat), 0), np.int64)
    if channels_last:
        return coords[:, -1], coords[:, :-1]
    return coords[:, 0], coords[:, 1:]


def _allowed(layer: LayerPlan, elements: np.ndarray, reads: np.ndarray) -> np.ndarray:
    """Boolean ``(len(elements), outputs)``: may output ``o`` depend on input element ``e``?

    ``reads`` is ``(input channels, output channels)``, :attr:`LayerPlan.reads` transposed. Built as a
    broadcast product of small factors (channels, then each spatial axis), so it costs one pass over the result.
    """
    c_in, pos_in = _coordinates(elements, layer.frame_in, layer.layout.channels_last)
    channel_axis = len(layer.frame_out) - 1 if layer.layout.channels_last else 0
    factors = [(channel_axis, reads[c_in])]  # (elements, output channels)
    g = layer.geometry
    spatial = [a for a in range(len(layer.frame_out)) if a != channel_axis]
    for axis, out_axis in enumerate(spatial):
        origin = np.arange(layer.frame_out[out_axis]) * g.stride[axis] - g.padding[axis]
        delta = pos_in[:, axis][:, None] - origin[None, :]
        span = (g.kernel[axis] - 1) * g.dilation[axis]
        factors.append((out_axis, (delta >= 0) & (delta <= span) & (delta % g.dilation[axis] == 0)))
    allowed = np.ones((len(elements), *([1] * len(layer.frame_out))), dtype=bool)
    for out_axis, factor in factors:
        shape = [len(elements)] + [1] * len(layer.frame_out)
        shape[1 + out_axis] = factor.shape[1]
        allowed = allowed & factor.reshape(shape)
    return allowed.reshape(len(elements), -1)


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
    # Each probed element moves to another code in each sample (drawn at once, so chunking does not matter).
    n = radices[elements][None, :]
    moved = (base[:, elements] + 1 + (rng.random((samples, len(elements))) * (n - 1)).astype(np.int64)) % n
    base_x = frame.values_of(torch.as_tensor(base)).reshape(samples, n_in)
    index = (torch.as_tensor(moved) + frame.offsets[elements]).to(frame.values.device)
    moved_x = frame.values[index]  # (samples, elements) the perturbed values
    with eval_mode(module):
        _probe(module, layer, base_x, moved_x, elements, samples=samples, memory_budget=memory_budget)


def _probe(
    module: nn.Module,
    layer: LayerPlan,
    base_x: torch.Tensor,
    moved_x: torch.Tensor,
    elements: np.ndarray,
    *,
    samples: int,
    memory_budget: int,
) -> None:
    """:func:`check_decomposition` once the inputs are drawn, with ``module`` in eval mode."""
    n_in, n_out = base_x.shape[1], math.prod(layer.frame_out)
    base_out = run_module(module, base_x.reshape(samples, *layer.frame_in), layer.name, switched=True)
    base_out = base_out.reshape(samples, -1)
    nan = bool(torch.isnan(base_out).any())
    reads = layer.reads.T
    # Chunks of elements: within the memory budget, and cache-sized (the module's temporaries stay in cache).
    itemsize = base_x.element_size()
    per_element = samples * (n_in + n_out) * _BYTES_PER_ELEMENT + n_out
    chunk = max(1, min(memory_budget // per_element, _CACHE_BYTES // (samples * (n_in + n_out) * itemsize)))
    for start in range(0, len(elements), chunk):
        part = elements[start : start + chunk]
        x = base_x[:, None, :].repeat(1, len(part), 1)  # (samples, part, n_in)
        rows = torch.arange(len(part), device=x.device)
        x[:, rows, torch.as_tensor(part, device=x.device)] = moved_x[:, start : start + chunk]
        out = run_module(module, x.reshape(-1, *layer.frame_in), layer.name, switched=True)
        out = out.reshape(samples, len(part), -1)
        before = base_out[:, None, :]
        differ = out != before
        if nan:  # NaN where it was NaN is no change
            differ &= ~(torch.isnan(out) & torch.isnan(before))
        changed = differ.any(dim=0).cpu().numpy()  # (part, outputs)
        violations = changed & ~_allowed(layer, part, reads)
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
