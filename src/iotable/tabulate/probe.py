"""The metadata probe: perturb inputs outside each unit's declared fan-in and watch its outputs.

For each base input, each probed input element is changed to another code; any output that changes must
belong to a unit whose declared fan-in (channels x window at that output's position) holds that element.
An output that changes otherwise means the metadata omits an input the unit really reads.

Random bases rarely show a dependence that exists only at a rare combination (an output that reads input 3
only when inputs 0-2 all sit at their top code), so the bases also hold the extremes (every input at its
lowest code, at its highest, and the two alternating low/high patterns) and seeded random corners (every
input at its lowest or highest code, drawn independently: each unit's own inputs sit at a corner of their
domain while the inputs outside its fan-in are moved). A frame with few enough input combinations is probed
from every one of them instead.

Dependence cannot tell what a padded position holds (with kernel 3 and padding 1, reflect, replicate and
zeros read the same input elements), so a padded layer whose window is not a torch convolution's own is
also checked by value: every output whose window reads padding must equal the output the same window
values give at an interior position, as the tables and the graph's pad node will compute it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .._util.modules import eval_mode, module_dtype, run_module
from ..errors import SpecMismatchError
from ..front.layerplan import LayerPlan, frame_strides
from ..front.plan import check_batch
from ..front.window import own_window
from ..graph.graph import pad_index_map
from .enumerate import DEFAULT_MEMORY_BUDGET
from .forward import _BYTES_PER_ELEMENT, _CACHE_BYTES, FrameValues

__all__ = ["check_decomposition"]


def _coordinates(flat: np.ndarray, shape: tuple[int, ...], channels_last: bool) -> tuple[np.ndarray, np.ndarray]:
    """Channel and spatial position (rows of ``(rank,)``) of flat per-sample indices."""
    coords = np.stack(np.unravel_index(flat, shape), axis=1) if len(shape) else np.zeros((len(flat), 0), np.int64)
    if channels_last:
        return coords[:, -1], coords[:, :-1]
    return coords[:, 0], coords[:, 1:]


def _axis_reads(layer: LayerPlan, axis: int, outputs: int) -> np.ndarray:
    """Boolean ``(input extent, outputs)`` along one spatial axis: does output ``o``'s window read position ``p``?

    A window reads the padded input; a padded position copies an input position (reflect, replicate,
    circular) or holds real 0, so with a copying mode an edge element also feeds the windows that read its
    copies.
    """
    g = layer.geometry
    size = (layer.frame_in[:-1] if layer.layout.channels_last else layer.frame_in[1:])[axis]
    sources = g.padding_mode.sources(size, *g.padding[axis])
    taps = np.arange(outputs)[:, None] * g.stride[axis] + np.arange(g.kernel[axis])[None, :] * g.dilation[axis]
    inside = taps < len(sources)  # outputs past the declared window's last read nothing
    read = np.where(inside, sources[np.minimum(taps, len(sources) - 1)], -1)  # (outputs, kernel)
    result = np.zeros((size, outputs), dtype=bool)
    o = np.broadcast_to(np.arange(outputs)[:, None], read.shape)
    result[read[read >= 0], o[read >= 0]] = True
    return result


def _allowed(layer: LayerPlan, elements: np.ndarray, reads: np.ndarray) -> np.ndarray:
    """Boolean ``(len(elements), outputs)``: may output ``o`` depend on input element ``e``?

    ``reads`` is ``(input channels, output channels)``, :attr:`LayerPlan.reads` transposed. Built as a
    broadcast product of small factors (channels, then each spatial axis), so it costs one pass over the result.
    """
    c_in, pos_in = _coordinates(elements, layer.frame_in, layer.layout.channels_last)
    channel_axis = len(layer.frame_out) - 1 if layer.layout.channels_last else 0
    factors = [(channel_axis, reads[c_in])]  # (elements, output channels)
    spatial = [a for a in range(len(layer.frame_out)) if a != channel_axis]
    for axis, out_axis in enumerate(spatial):
        factors.append((out_axis, _axis_reads(layer, axis, layer.frame_out[out_axis])[pos_in[:, axis]]))
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


def _changed(out: torch.Tensor, before: torch.Tensor, *, raw: bool, terms: int) -> torch.Tensor:
    """Which outputs changed: exactly for codes; beyond float rounding for raw float outputs.

    A BLAS kernel may round a row differently when another input of the same row changes, even one whose
    weight is zero (seen with MKL's sgemm on small matrices): a raw float output then moves by a few ulps
    of the sum's magnitude without depending on that input. Such moves stay within ``gamma(terms + 1)``
    times the sum of the magnitudes of its terms, which the outputs' own magnitudes stand in for; a real
    dependence moves an output by its weight times a step of the input's domain. NaN where it was NaN is
    no change, and neither NaN nor infinity widens the tolerance of other outputs.
    """
    if raw and out.is_floating_point():
        size, size_before = (torch.nan_to_num(t.abs(), nan=0.0, posinf=0.0) for t in (out, before))
        scale = size + size_before + size.mean(dim=(0, 1), keepdim=True)
        tolerance = 4 * (terms + 2) * torch.finfo(out.dtype).eps * scale
        differ = (out != before) & ~((out - before).abs() <= tolerance)
    else:
        differ = out != before
    return differ & ~(torch.isnan(out) & torch.isnan(before))


_EXHAUSTIVE = 64  # a frame with at most this many input combinations is probed from each of them


def _bases(radices: np.ndarray, rng: np.random.Generator, *, samples: int, corners: int) -> np.ndarray:
    """The probe's base inputs as codes ``(bases, inputs)``: all combinations of a tiny frame; else ``samples``
    random ones, the four extremes and ``corners`` random corners (duplicates dropped, order kept)."""
    n_in = len(radices)
    if not n_in:
        return np.zeros((1, 0), dtype=np.int64)
    if math.prod(int(r) for r in radices) <= _EXHAUSTIVE:
        grids = np.meshgrid(*[np.arange(int(r)) for r in radices], indexing="ij")
        return np.stack([g.reshape(-1) for g in grids], axis=1).astype(np.int64).reshape(-1, n_in)
    top = radices.astype(np.int64) - 1
    odd = np.arange(n_in) % 2 == 1
    extremes = np.stack([np.zeros_like(top), top, np.where(odd, top, 0), np.where(odd, 0, top)])
    random = (rng.random((samples, n_in)) * radices).astype(np.int64)
    corner = np.where(rng.random((corners, n_in)) < 0.5, 0, top[None, :])
    rows = np.concatenate([random, extremes, corner])
    _, first = np.unique(rows, axis=0, return_index=True)
    return rows[np.sort(first)]


def check_decomposition(
    module: nn.Module,
    layer: LayerPlan,
    *,
    samples: int = 3,
    corners: int = 4,
    max_elements: int | None = None,
    seed: int = 0,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> None:
    """Raise :class:`SpecMismatchError` when a unit's output depends on an input outside its fan-in.

    Probes up to ``max_elements`` input elements of the enumeration frame (default: 2048 for non-spatial
    layers, every one of a small frame; 512 for spatial layers, whose dependencies repeat at every window
    position, so a random sample of positions shows a leak as well) from each of ``B`` base inputs:
    ``samples`` random ones, the four extremes (all inputs at their lowest code, all at their highest, and
    low/high alternating both ways) and ``corners`` seeded random corners (each input at its lowest or
    highest code), duplicates dropped, so ``B <= samples + 4 + corners`` (11 by default); a frame with at
    most 64 input combinations uses each of them as a base instead (``B <= 64``). The probe runs the module
    on ``B * (elements + 1)`` inputs in all, in memory-bounded chunks. A padded layer whose window is not a
    torch convolution's is then also checked by value on 3 to 64 random inputs.
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
    base = _bases(radices, rng, samples=samples, corners=corners)
    samples = len(base)
    # Each probed element moves to another code in each sample (drawn at once, so chunking does not matter).
    n = radices[elements][None, :]
    moved = (base[:, elements] + 1 + (rng.random((samples, len(elements))) * (n - 1)).astype(np.int64)) % n
    base_x = frame.values_of(torch.as_tensor(base)).reshape(samples, n_in)
    index = (torch.as_tensor(moved) + frame.offsets[elements]).to(frame.values.device)
    moved_x = frame.values[index]  # (samples, elements) the perturbed values
    with eval_mode(module):
        _probe(module, layer, base_x, moved_x, elements, samples=samples, memory_budget=memory_budget)
        _check_padding(module, layer, frame, rng, memory_budget=memory_budget)


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
    reads = layer.reads.T
    # Chunks of elements: within the memory budget, and cache-sized (the module's temporaries stay in cache).
    itemsize = base_x.element_size()
    per_element = samples * (n_in + n_out) * _BYTES_PER_ELEMENT + n_out
    chunk = max(1, min(memory_budget // per_element, _CACHE_BYTES // (samples * (n_in + n_out) * itemsize)))
    for start in range(0, len(elements), chunk):
        part = elements[start : start + chunk]
        # Row 0 of each sample is its unperturbed base, computed in the same forward call as the perturbed rows:
        # a kernel may round differently for another batch size (docs/exactness.md), so only like is compared
        # with like.
        x = base_x[:, None, :].repeat(1, len(part) + 1, 1)  # (samples, 1 + part, n_in)
        rows = torch.arange(1, len(part) + 1, device=x.device)
        x[:, rows, torch.as_tensor(part, device=x.device)] = moved_x[:, start : start + chunk]
        out = run_module(module, x.reshape(-1, *layer.frame_in), layer.name, switched=True)
        check_batch(out, samples * (len(part) + 1), layer.name)
        out = out.reshape(samples, len(part) + 1, -1)
        before, out = out[:, :1, :], out[:, 1:, :]
        differ = _changed(out, before, raw=layer.output_domain is None, terms=n_in)
        changed = differ.any(dim=0).cpu().numpy()  # (part, outputs)
        violations = changed & ~_allowed(layer, part, reads)
        if violations.any():
            e, o = (int(v) for v in np.argwhere(violations)[0])
            channel = _coordinates(np.asarray([o]), layer.frame_out, layer.layout.channels_last)[0][0]
            unit = next(u for u in layer.units if channel in u.out_channels)
            g = layer.geometry
            window = (
                f" over a window of kernel {g.kernel}, stride {g.stride}, dilation {g.dilation}, padding {g.padding} "
                f"(before, after) in mode {g.padding_mode.value!r}"
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


def _check_padding(
    module: nn.Module, layer: LayerPlan, frame: FrameValues, rng: np.random.Generator, *, memory_budget: int
) -> None:
    """Raise :class:`SpecMismatchError` when an edge output differs from its window read at an interior slot.

    Each edge window (one that reads padding), filled as the declared padding says from a random base input,
    is written at an interior slot of another frame; the outputs there must equal the base input's at the
    edge. Base and filled frames run in one batch, so both see the same arithmetic. A quantizer can hide a
    wrong padding on one input, so up to 64 random inputs are tried.
    """
    g = layer.geometry
    if not g.padded or own_window(module) is not None:
        return  # a torch convolution pads as its own settings say, which the plan checked
    channels_last = layer.layout.channels_last
    size = layer.frame_in[:-1] if channels_last else layer.frame_in[1:]
    out_size = layer.frame_out[:-1] if channels_last else layer.frame_out[1:]
    grids = np.meshgrid(*[np.arange(n) for n in out_size], indexing="ij")
    positions = np.stack([x.reshape(-1) for x in grids], axis=1)  # (outputs, rank) output positions
    start = positions * np.asarray(g.stride)  # window starts in padded coordinates
    span = np.asarray([(k - 1) * d for k, d in zip(g.kernel, g.dilation)])
    inside = (start >= np.asarray(g.before)) & (start + span < np.asarray(g.before) + np.asarray(size))
    edges = positions[~inside.all(axis=1)]
    if not len(edges):
        return
    c_in = layer.in_channels
    # Flat indices, in a padded frame, of every element of each edge window (the order input_indices uses).
    padded_shape = (*g.padded_size(size), c_in) if channels_last else (c_in, *g.padded_size(size))
    ch_stride, pos_stride = frame_strides(padded_shape, layer.layout)
    taps = (edges * np.asarray(g.stride))[:, None, :] + g.offsets()[None, :, :]  # (edges, window, rank)
    pos_flat, ch_flat = taps @ pos_stride, np.arange(c_in) * ch_stride
    if channels_last:
        padded_index = (pos_flat[:, :, None] + ch_flat[None, None, :]).reshape(len(edges), -1)
    else:
        padded_index = (ch_flat[None, :, None] + pos_flat[:, None, :]).reshape(len(edges), -1)
    holds = pad_index_map(layer.frame_in, g.padding, g.padding_mode, channels_last=channels_last).reshape(-1)
    source = holds[padded_index]  # (edges, window elements): frame element, or -1 for real 0
    slots = layer.input_indices(np.arange(c_in)[None, :])[0]  # (slots, window elements)
    n_slots, n_in = len(slots), math.prod(layer.frame_in)
    frames = -(-len(edges) // n_slots)
    per_sample = (frames + 1) * (n_in + math.prod(layer.frame_out)) * _BYTES_PER_ELEMENT
    samples = int(np.clip(memory_budget // per_sample, 3, 64))
    radices = frame.radices.numpy()
    base = torch.as_tensor((rng.random((samples, n_in)) * radices).astype(np.int64))
    base_x = frame.values_of(base).reshape(samples, n_in)
    # Each edge window goes to slot j % n_slots of frame j // n_slots; the rest of a frame keeps the base.
    extended = torch.cat([base_x, torch.zeros_like(base_x[:, :1])], dim=1)  # real 0 at index n_in
    windows = extended[:, torch.as_tensor(np.where(source < 0, n_in, source))]  # (samples, edges, elements)
    filled = base_x[:, None, :].repeat(1, frames, 1)
    j = np.arange(len(edges))
    rows = torch.as_tensor(j // n_slots)[:, None].expand(source.shape)
    filled[:, rows, torch.as_tensor(slots[j % n_slots])] = windows
    batch = torch.cat([base_x, filled.reshape(-1, n_in)]).reshape(-1, *layer.frame_in)
    out = run_module(module, batch, layer.name, switched=True).reshape(batch.shape[0], -1)
    c_out = layer.out_channels
    out_ch_stride, out_pos_stride = frame_strides(layer.frame_out, layer.layout)
    at_edge = (edges @ out_pos_stride)[:, None] + np.arange(c_out)[None, :] * out_ch_stride  # (edges, c_out)
    at_slot = torch.as_tensor(layer.output_indices(np.arange(c_out))[j % n_slots])  # (edges, c_out)
    edge_out = out[:samples][:, torch.as_tensor(at_edge)]
    slot_out = out[samples:].reshape(samples, frames, -1)[:, torch.as_tensor(j // n_slots)[:, None], at_slot]
    differ = (edge_out != slot_out) & ~(torch.isnan(edge_out) & torch.isnan(slot_out))
    if differ.any():
        sample, e, channel = (int(v) for v in torch.nonzero(differ)[0])
        msg = (
            f"{layer.name}: output channel {channel} at position {tuple(int(p) for p in edges[e])}, whose window "
            f"reads padding, is {float(edge_out[sample, e, channel])!r} on a random input, but "
            f"{float(slot_out[sample, e, channel])!r} when its window's values, padded as declared (padding "
            f"{g.padding} as (before, after), mode {g.padding_mode.value!r}), sit inside the input; the module "
            f"pads otherwise ({layer.spec.source}): declare the padding= and padding_mode= it uses"
        )
        raise SpecMismatchError(msg)
