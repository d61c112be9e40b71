"""The black-box enumerator: every combination of input codes of every unit, through the unmodified module.

How rows are batched (no Python loop over rows):

- Units that read the same input elements form a *class*: one enumeration fills all their tables (the
  output channels of a convolution group share their inputs).
- Classes whose inputs are disjoint are *coloured* together: their inputs are set independently in the same
  forward pass (the replicate-across-groups trick: one forward of a grouped convolution fills every group).
  Colours come from DSatur on the classes' conflict graph.
- Every slot of the enumeration frame (a non-overlapping window position, see :mod:`iotable.plan`) holds a
  different row, so sample ``b`` of a forward pass computes rows ``b * slots + i`` of each class.
- Where a forward pass has one slot, classes whose inputs *overlap* share it too: a linear design over a
  finite field gives every class each of its rows exactly once, out of order (see :mod:`iotable.tabulate.design`).
  On a LogicNets-style sparse layer that is one or two passes where colours need one per unit reading the
  most-read input.
- Inputs are built in a reused buffer straight from the domains' values; chunks are sized for the cache and
  bounded by a memory budget.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .._util.modules import eval_mode, module_dtype
from .._util.progress import QUIET, Progress, progress_bar
from ..front.layerplan import LayerPlan, Unit
from ..table import IOTable, TableList
from .cache import FileSink, MemorySink, TableCache, layer_fingerprint, temporary_sink, unit_key
from .fastpath import CodeBlock, FastPath, _Job, build_tables, recognize, tabulate_units
from .forward import FrameValues, _chunk_samples, _Encoder, _fill, _numpy_dtype, _Run
from .packed import _fill_packed
from .passes import _Class, _classes, _Packed, _passes

__all__ = ["DEFAULT_MEMORY_BUDGET", "enumerate_tables"]

#: Default memory budget of one forward pass, in bytes (256 MiB).
DEFAULT_MEMORY_BUDGET = 256 * 2**20


def enumerate_tables(
    module: nn.Module,
    layer: LayerPlan,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
) -> Sequence[IOTable]:
    """Build every unit's dense table of ``layer`` by running ``module`` on all input combinations.

    The module runs in ``eval()`` and ``torch.inference_mode()``; its training flags are restored. A table
    larger than ``memory_budget`` is written chunk by chunk to a file and memory-mapped, so peak memory
    follows the budget, not the table size.

    Args:
        module: the module ``layer`` was planned for (see :func:`iotable.plan`).
        layer: the resolved plan.
        memory_budget: bytes one forward pass (and one in-memory table) may hold; larger work is chunked.
        progress: a progress bar over the rows (``None``: for long work in a terminal or a notebook).
        cache_dir: a directory of finished tables: each table is written there as soon as it is done and
            loaded instead of recomputed on a later call (see :mod:`iotable.tabulate.cache` for the key).
        fast_path: use the structured path for linear and convolution layers when it applies (it gives the
            tables of the black-box path; see :mod:`iotable.tabulate.fastpath`).

    Returns:
        One :class:`IOTable` per unit, in unit order (each made on first access).
    """
    with progress_bar(total=layer.total_rows, desc=layer.name, enabled=progress) as bar:
        return _enumerate(
            module, layer, memory_budget=memory_budget, cache_dir=cache_dir, fast_path=fast_path, bar=bar
        ).tables


@dataclass(frozen=True)
class Enumerated:
    """What enumerating one layer produced, and how."""

    tables: TableList
    cached: tuple[int, ...]  # units loaded from the cache
    method: str  # "black box", "linear fast path", "conv fast path" or "cache"
    near_ties: int  # fast path: rows within float rounding of a quantization boundary, computed by the module


def _enumerate(
    module: nn.Module,
    layer: LayerPlan,
    *,
    memory_budget: int,
    cache_dir: str | os.PathLike[str] | None,
    fast_path: bool = True,
    fast: FastPath | None = None,
    bar: Progress = QUIET,
    only: Collection[int] | None = None,
    passes: Sequence[list[_Class] | _Packed] | None = None,
) -> Enumerated:
    """:func:`enumerate_tables`, also saying which units came from the cache and which path ran.

    ``fast``: the fast path already recognized for this layer (see :func:`iotable.tabulate.fastpath.recognize`).
    ``bar``: counts every unit's rows as they are done (cached units at once).
    ``only``: the units to build (a shard of the layer, :mod:`iotable.tabulate.shards`): the tables of the others
    are neither loaded nor built, and asking for one fails.
    ``passes``: the black box's forward passes over ``only``, as the client cut the layer's passes into shards
    (each pass is run whole, for every unit it holds); ``None``: the passes of the pending units.
    """
    bar.layer(layer.name)
    cache = TableCache(cache_dir) if cache_dir is not None else None
    out_dtype = _output_dtype(module, layer)
    keys: dict[int, str] = {}
    outputs: dict[int, np.ndarray] = {}
    wanted = set(only) if only is not None else {u.index for u in layer.units}
    if cache is not None:
        keys, outputs = _cached_outputs(cache, module, layer, out_dtype, wanted)
    sink = _sink_factory(cache, keys, memory_budget=memory_budget, dtype=out_dtype)
    cached = tuple(sorted(outputs))
    bar.update(sum(layer.units[i].rows for i in cached))
    pending = [u for u in layer.units if u.index not in outputs and u.index in wanted]
    if not pending:
        return Enumerated(tables=_as_tables(layer, outputs), cached=cached, method="cache", near_ties=0)
    if fast is None and fast_path:
        fast = recognize(module, layer, memory_budget=memory_budget)
    if fast is not None:
        blocks, near_ties = _fast_tables(
            fast, layer, pending, outputs, sink, cached=cache is not None, memory_budget=memory_budget, bar=bar
        )
        tables = _as_tables(layer, outputs, blocks)
        return Enumerated(tables=tables, cached=cached, method=fast.method, near_ties=near_ties)
    todo = {u.index for u in pending}
    _black_box(
        module, layer, outputs, sink, todo, memory_budget=memory_budget, out_dtype=out_dtype, bar=bar, passes=passes
    )
    return Enumerated(tables=_as_tables(layer, outputs), cached=cached, method="black box", near_ties=0)


def _output_dtype(module: nn.Module, layer: LayerPlan) -> np.dtype:
    """What the tables hold: codes of the output domain, or raw outputs in the module's own float type."""
    if layer.output_domain is not None:
        return layer.output_domain.code_dtype
    return torch.empty(0, dtype=module_dtype(module)[0]).numpy().dtype


def _cached_outputs(
    cache: TableCache, module: nn.Module, layer: LayerPlan, dtype: np.dtype, wanted: Collection[int]
) -> tuple[dict[int, str], dict[int, np.ndarray]]:
    """Every unit's cache key, and the outputs of the ``wanted`` units the cache holds (checked as it loads
    them)."""
    fingerprint = layer_fingerprint(module, layer)
    codes = len(layer.output_domain) if layer.output_domain is not None else None
    keys: dict[int, str] = {}
    outputs: dict[int, np.ndarray] = {}
    for unit in layer.units:
        keys[unit.index] = unit_key(fingerprint, layer, unit)
        if unit.index not in wanted:
            continue
        found = cache.load(keys[unit.index], unit.rows, unit.fan_out, dtype, codes=codes)
        if found is not None:
            outputs[unit.index] = found
    return keys, outputs


def _sink_factory(
    cache: TableCache | None, keys: dict[int, str], *, memory_budget: int, dtype: np.dtype
) -> Callable[[Unit], MemorySink | FileSink]:
    """Where a unit's rows go: its cache entry, a temporary file above ``memory_budget``, else memory."""

    def sink(unit: Unit) -> MemorySink | FileSink:
        if cache is not None:
            return cache.sink(keys[unit.index], unit.rows, unit.fan_out, dtype)
        if unit.rows * unit.fan_out * dtype.itemsize > memory_budget:
            return temporary_sink(unit.rows, unit.fan_out, dtype)
        return MemorySink(unit.rows, unit.fan_out, dtype)

    return sink


def _fast_tables(
    fast: FastPath,
    layer: LayerPlan,
    pending: list[Unit],
    outputs: dict[int, np.ndarray],
    sink: Callable[[Unit], MemorySink | FileSink],
    *,
    cached: bool,
    memory_budget: int,
    bar: Progress,
) -> tuple[list[CodeBlock], int]:
    """The pending units' outputs by the fast path: streamed units into ``outputs``, the rest as blocks of
    columns (a table is cut from them on first access); and the rows near a rounding boundary.

    With a cache (``cached``), the blocks are written to their entries at once, so every output is a
    finished sink's and no block is left.
    """
    blocks, streamed, near_ties = tabulate_units(
        fast, layer, pending, memory_budget=memory_budget, sink=sink, progress=bar.update
    )
    outputs.update(streamed)  # streamed units are in their files (the cache's too) already
    if not cached:
        return blocks, near_ties
    for block in blocks:
        for index, array in block.entries():
            s = sink(layer.units[index])
            s.write(0, array)
            outputs[index] = s.finish()
    return [], near_ties


def _pending_passes(
    layer: LayerPlan, pending: set[int], *, memory_budget: int, itemsize: int
) -> Sequence[list[_Class] | _Packed]:
    """The forward passes over the classes that hold ``pending`` units: those of every class depend on the plan
    alone (kept on it); a subset's are designed for it."""
    todo = [c for c in _classes(layer) if any(u.index in pending for u in c.units)]
    if len(todo) < len(_classes(layer)):
        return _passes(layer, todo, capacity=memory_budget, itemsize=itemsize)
    key = ("passes", memory_budget, itemsize)
    if key not in layer.memo:
        layer.memo[key] = _passes(layer, todo, capacity=memory_budget, itemsize=itemsize)
    return layer.memo[key]


def _black_box(
    module: nn.Module,
    layer: LayerPlan,
    outputs: dict[int, np.ndarray],
    sink: Callable[[Unit], MemorySink | FileSink],
    pending: set[int],
    *,
    memory_budget: int,
    out_dtype: np.dtype,
    bar: Progress,
    passes: Sequence[list[_Class] | _Packed] | None = None,
) -> None:
    """The ``pending`` units' outputs (and those of the units that share their inputs) by running ``module``
    on every input combination, pass by pass, into ``outputs`` (the module in eval mode throughout);
    ``passes``: the passes to run (they hold the pending units), else those the plan gives."""
    dtype, device = module_dtype(module)
    if passes is None:
        passes = _pending_passes(layer, pending, memory_budget=memory_budget, itemsize=out_dtype.itemsize)

    frame = FrameValues.build(layer, dtype=dtype, device=device)
    chunk = _chunk_samples(layer, memory_budget, dtype)
    out_domain = layer.output_domain
    encoder = _Encoder(out_domain, _numpy_dtype(dtype)) if out_domain is not None else None
    run = _Run(module=module, layer=layer, frame=frame, chunk=chunk, device=device, dtype=dtype, encoder=encoder)

    with eval_mode(module):
        for forward_pass in passes:
            members = forward_pass.classes if isinstance(forward_pass, _Packed) else forward_pass
            sinks = {u.index: sink(u) for c in members for u in c.units}
            try:
                if isinstance(forward_pass, _Packed):
                    _fill_packed(run, forward_pass, sinks, bar=bar)
                else:
                    _fill(run, forward_pass, sinks, bar=bar)
            except BaseException:
                for s in sinks.values():
                    if isinstance(s, FileSink):
                        s.abandon()
                raise
            for index, s in sinks.items():  # the pass is done: its tables are final (and cached)
                outputs[index] = s.finish()


def _enumerate_fast(
    found: list[tuple[LayerPlan, FastPath]], *, memory_budget: int, bar: Progress = QUIET
) -> list[Enumerated]:
    """:func:`_enumerate` of layers the fast path recognized, all at once (no cache): their analysis and
    kernels are shared where the layers allow (see :func:`iotable.tabulate.fastpath.build_tables`); ``bar`` counts
    their rows."""
    jobs = []
    for layer, fast in found:
        dtype = _output_dtype(fast.structure.head, layer)  # codes: a recognized layer ends in a quantizer

        def sink(unit: Unit, dtype: np.dtype = dtype) -> MemorySink | FileSink:
            if unit.rows * unit.fan_out * dtype.itemsize > memory_budget:
                return temporary_sink(unit.rows, unit.fan_out, dtype)
            return MemorySink(unit.rows, unit.fan_out, dtype)

        jobs.append(_Job(fast, layer, list(layer.units), sink, bar.counter(layer.name)))
    build_tables(jobs, memory_budget=memory_budget)
    return [Enumerated(_as_tables(job.layer, job.outputs, job.blocks), (), job.fast.method, job.near) for job in jobs]


def _as_tables(layer: LayerPlan, outputs: dict[int, np.ndarray], blocks: Sequence[CodeBlock] = ()) -> TableList:
    """One table per unit, in unit order, each made on first access from its unit's outputs.

    A unit's outputs are an array ``(rows, fan_out)`` in ``outputs``, or columns of one of the fast path's
    ``blocks`` (found on first use, so that no per-unit work is done before a table is wanted).
    """
    units = layer.units
    found: dict[int, np.ndarray] = {}

    def make(i: int) -> IOTable:
        unit = units[i]
        out = outputs.get(unit.index)
        if out is None:
            if not found:
                found.update(entry for block in blocks for entry in block.entries())
            out = found[unit.index]
        return IOTable._trusted(
            out,
            input_domains=layer.unit_domains(unit),
            output_domain=layer.output_domain,
            layer=layer.name,
            unit=unit.index,
        )

    return TableList(len(units), make)
