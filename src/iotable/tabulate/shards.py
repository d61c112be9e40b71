"""Enumerating layers on an executor: each layer's units cut into shards, every shard of every layer one task.

A shard is a set of whole input classes (units that read the same inputs are enumerated together, see
:mod:`iotable.tabulate.passes`). A task receives the module (the layer's own: its weights, and whatever else
it holds, such as a pruning mask and its original weight), the layer's plan and its units, and builds them as
:func:`~iotable.tabulate.enumerate._enumerate` builds a whole layer; the client then assembles the tables in unit
order. Only the arguments and the tables travel, so a layer is cut into few shards: about
:data:`SHARDS_PER_WORKER` for each task the executor runs at once (at most :data:`MAX_SHARDS`), each a
balanced share of the work.

- A layer the fast path builds is cut along its input classes, balanced by rows: each unit's rows cost the same
  wherever it runs.
- A layer enumerated through the module itself (the black box) is cut along its forward passes: a pass runs
  the whole module over its samples and keeps the columns of every unit it holds, so a shard holds whole
  passes, balanced by samples, and no pass runs twice. (Cutting a pass's units between shards would run the
  whole layer's forward pass once for every shard.)

Without ``cache_dir``, a task returns its units' outputs (the arrays of its tables). With ``cache_dir`` (a folder
every worker and the client share), a task writes each table into the cache as soon as it is done and returns
none of them; the client loads them from there, each entry checked as any cache entry is. A task run again (its
worker died) finds the tables its first run finished, and a rerun of the whole call computes only what is
missing. Entries are content-addressed and written atomically, so two runs of one task never leave a mixed
entry.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from torch import nn

from .._util.executor import Submitter, run_all
from .._util.progress import QUIET, Progress
from ..errors import CacheError, EnumerationError
from ..front.layerplan import LayerPlan
from .cache import TableCache
from .enumerate import Enumerated, _as_tables, _cached_outputs, _enumerate, _output_dtype, _pending_passes
from .passes import _Class, _classes, _Packed

Pass = list[_Class] | _Packed  # a forward pass of the black box (see iotable.tabulate.passes)

__all__ = ["MAX_SHARDS", "SHARDS_PER_WORKER", "build_shard", "enumerate_on", "pass_shards", "shard_count", "shards_of"]

#: The most tasks one layer is cut into.
MAX_SHARDS = 64
#: Shards of a layer for each task the executor runs at once: enough to even out unequal shards, few enough
#: that the module each of them receives is sent a few times per worker, not once per unit.
SHARDS_PER_WORKER = 3
#: Shards of a layer when the executor does not say how many tasks it runs at once.
UNKNOWN_WORKERS_SHARDS = 16


def shard_count(workers: int | None) -> int:
    """The most shards a layer is cut into on an executor that runs ``workers`` tasks at once (``None``: it
    does not say)."""
    if workers is None:
        return UNKNOWN_WORKERS_SHARDS
    return max(1, min(MAX_SHARDS, SHARDS_PER_WORKER * workers))


def shards_of(layer: LayerPlan, pending: set[int], count: int = MAX_SHARDS) -> list[tuple[int, ...]]:
    """The ``pending`` units of ``layer`` in at most ``count`` shards of whole input classes, balanced by rows
    (the largest class first into the lightest shard; the same plan always gives the same shards)."""
    groups = []
    for cls in _classes(layer):
        members = tuple(u.index for u in cls.units)
        if any(i in pending for i in members):
            groups.append((sum(layer.units[i].rows for i in members), members, members))
    return [tuple(sorted(i for members in shard for i in members)) for shard in _balanced(groups, count)]


def pass_shards(
    layer: LayerPlan, passes: Sequence[Pass], count: int = MAX_SHARDS
) -> list[tuple[tuple[int, ...], list[Pass]]]:
    """The black box's ``passes`` of ``layer`` in at most ``count`` shards of whole passes, balanced by the
    samples each runs through the module, as ``(units, passes)``: a pass split between shards would be run
    whole by each of them."""
    slots = max(1, len(layer.slots))
    groups = []
    for forward_pass in passes:
        classes = _members(forward_pass)
        samples = forward_pass.rows if isinstance(forward_pass, _Packed) else -(-classes[0].rows // slots)
        groups.append((samples, tuple(u.index for c in classes for u in c.units), forward_pass))
    found = []
    for shard in _balanced(groups, count):
        units = tuple(sorted(u.index for p in shard for c in _members(p) for u in c.units))
        found.append((units, [replace(p, memo={}) if isinstance(p, _Packed) else p for p in shard]))
    return found


def _members(forward_pass: Pass) -> Sequence[_Class]:
    """The classes a pass runs."""
    return forward_pass.classes if isinstance(forward_pass, _Packed) else forward_pass


def _balanced(groups: list[tuple[int, tuple[int, ...], Any]], count: int) -> list[list[Any]]:
    """The items of ``groups`` ``(load, units, item)`` in at most ``count`` shards: the heaviest first into
    the lightest shard (ties by units: the same plan always gives the same shards)."""
    shards: list[list[Any]] = [[] for _ in range(min(count, len(groups)))]
    loads = [0] * len(shards)
    for load, _, item in sorted(groups, key=lambda g: (-g[0], g[1])):
        lightest = loads.index(min(loads))
        shards[lightest].append(item)
        loads[lightest] += load
    return [shard for shard in shards if shard]


def build_shard(
    module: nn.Module,
    layer: LayerPlan,
    units: tuple[int, ...],
    memory_budget: int,
    cache_dir: str | None,
    fast_path: bool,
    passes: Sequence[Pass] | None = None,
) -> tuple[str, int, dict[int, np.ndarray]]:
    """A task: the tables of ``units`` of ``layer``, as ``(method, near ties, outputs by unit)``; with
    ``cache_dir`` the tables are written there and no output is returned. ``passes``: the black box's passes
    that hold ``units``, as the client cut them (``None``: the fast path, or passes designed here)."""
    done = _enumerate(
        module, layer, memory_budget=memory_budget, cache_dir=cache_dir, fast_path=fast_path, only=units, passes=passes
    )
    if cache_dir is not None:
        return done.method, done.near_ties, {}
    return done.method, done.near_ties, {i: np.ascontiguousarray(done.tables[i].outputs) for i in units}


def enumerate_on(
    pool: Submitter,
    layers: Sequence[tuple[nn.Module, LayerPlan, bool]],
    *,
    memory_budget: int,
    cache_dir: str | os.PathLike[str] | None,
    fast_path: bool,
    bar: Progress = QUIET,
) -> list[Enumerated]:
    """:func:`~iotable.tabulate.enumerate._enumerate` of every layer, every shard of every layer a task on
    ``pool``; what each layer gives, in order (``bar`` counts the rows as shards finish).

    ``layers``: each layer's module, plan, and whether the black box enumerates it (no fast path recognized it),
    which decides how it is cut (see :func:`shards_of`).
    """
    folder = None if cache_dir is None else os.fspath(cache_dir)
    cache = TableCache(folder) if folder is not None else None
    plans = []
    tasks: list[tuple[Any, ...]] = []
    count = shard_count(pool.workers)
    for index, (module, layer, black_box) in enumerate(layers):
        outputs: dict[int, np.ndarray] = {}
        if cache is not None:
            _, outputs = _cached_outputs(cache, module, layer, _output_dtype(module, layer), range(len(layer.units)))
        bar.update(sum(layer.units[i].rows for i in outputs))
        pending = {u.index for u in layer.units if u.index not in outputs}
        cut = _cut(module, layer, pending, black_box=black_box, count=count, memory_budget=memory_budget)
        tasks += [(module, layer, units, memory_budget, folder, fast_path, passes) for units, passes in cut]
        plans.append((index, tuple(sorted(outputs)), outputs, len(cut)))
    owner = [i for i, *_, count in plans for _ in range(count)]

    def finished(task: int, result: tuple[str, int, dict[int, np.ndarray]]) -> None:
        bar.update(sum(layers[owner[task]][1].units[i].rows for i in tasks[task][2]))

    results = run_all(pool, build_shard, tasks, what="precompute", error=EnumerationError, done=finished)
    found: list[Enumerated] = []
    start = 0
    for index, cached, outputs, count in plans:
        module, layer, _ = layers[index]
        mine = results[start : start + count]
        start += count
        for _, _, arrays in mine:
            outputs.update(arrays)
        if cache is not None and mine:
            outputs = _from_store(cache, module, layer)
        methods = [method for method, _, _ in mine if method != "cache"]
        method = methods[0] if methods else "cache"
        near = sum(n for _, n, _ in mine)
        found.append(Enumerated(tables=_as_tables(layer, outputs), cached=cached, method=method, near_ties=near))
    return found


def _cut(
    module: nn.Module, layer: LayerPlan, pending: set[int], *, black_box: bool, count: int, memory_budget: int
) -> list[tuple[tuple[int, ...], list[Pass] | None]]:
    """The shards of ``layer``'s ``pending`` units, each with the black box's passes it runs (``None``: the
    fast path's shards, of whole input classes)."""
    if not black_box or not pending:
        return [(units, None) for units in shards_of(layer, pending, count)]
    itemsize = _output_dtype(module, layer).itemsize
    passes = _pending_passes(layer, pending, memory_budget=memory_budget, itemsize=itemsize)
    return [(tuple(i for i in units if i in pending), mine) for units, mine in pass_shards(layer, passes, count)]


def _from_store(cache: TableCache, module: nn.Module, layer: LayerPlan) -> dict[int, np.ndarray]:
    """Every unit's outputs from the cache the tasks wrote; a missing one means the workers wrote elsewhere."""
    _, outputs = _cached_outputs(cache, module, layer, _output_dtype(module, layer), range(len(layer.units)))
    missing = [u.index for u in layer.units if u.index not in outputs]
    if missing:
        msg = (
            f"precompute: layer {layer.name!r}: the executor's tasks finished, but cache_dir {str(cache.path)!r} "
            f"holds no table for unit(s) {missing[:8]} (expected every unit's); the workers wrote their tables "
            "into a folder of that name that this process does not see: give a cache_dir every worker and this "
            "process share (a network file system), or leave cache_dir out to receive the tables as results"
        )
        raise CacheError(msg)
    return outputs
