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
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from ..front.layerplan import LayerPlan, Unit
from ..table import place_values
from .affine import _analyse_tails
from .columns import _EPS32, _U32, CodeBlock, _codes_domain, _Group, _Job, _outer_sums, _Part, _Segment
from .kernel import _DIRECT_ENTRIES, _AffineKernel, _Batch, _direct_codes
from .recognition import FastPath, recognize

__all__ = ["CodeBlock", "FastPath", "recognize"]


def tabulate_units(
    fast: FastPath,
    layer: LayerPlan,
    units: list[Unit],
    *,
    memory_budget: int,
    sink: Callable[[Unit], Any],
    progress: Callable[[int], None] = lambda rows: None,
) -> tuple[list[CodeBlock], dict[int, np.ndarray], int]:
    """The codes of ``units`` of a layer ``fast`` recognized, and how many rows were near a rounding boundary
    (computed by the layer's operations).

    Codes of whole units are computed in blocks of at most half of ``memory_budget``
    (:class:`CodeBlock`); a unit whose table alone is larger is computed in row segments written to
    ``sink(unit)`` (a file), and its finished array ``(rows, fan_out)`` is returned by unit index.
    ``progress(rows)`` is told the rows (per unit) of each block or segment when it is done.
    """
    job = _Job(fast, layer, list(units), sink, progress)
    build_tables([job], memory_budget=memory_budget)
    return job.blocks, job.outputs, job.near


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
