"""Enumerating layers on an executor: each layer's units cut into shards, every shard of every layer one task.

A shard is a set of whole input classes (units that read the same inputs are enumerated together, see
:mod:`iotable.tabulate.passes`), the shards of a layer balanced by rows. A task receives the module (the
layer's own: its weights, a few kilobytes for a LUT network's layer), the layer's plan and its units, and builds
them as :func:`~iotable.tabulate.enumerate._enumerate` builds a whole layer; the client then assembles the
tables in unit order. Only the arguments and the tables travel:

- without ``cache_dir``, a task returns its units' outputs (the arrays of its tables);
- with ``cache_dir`` (a folder every worker and the client share), a task writes each table into the cache as
  soon as it is done and returns none of them; the client loads them from there, each entry checked as any
  cache entry is. A task run again (its worker died) finds the tables its first run finished, and a rerun of
  the whole call computes only what is missing. Entries are content-addressed and written atomically, so two
  runs of one task never leave a mixed entry.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import nn

from .._util.executor import Submitter, run_all
from .._util.progress import QUIET, Progress
from ..errors import CacheError, EnumerationError
from ..front.layerplan import LayerPlan
from .cache import TableCache
from .enumerate import Enumerated, _as_tables, _cached_outputs, _enumerate, _output_dtype
from .passes import _classes

__all__ = ["MAX_SHARDS", "build_shard", "enumerate_on", "shards_of"]

#: The most tasks one layer is cut into.
MAX_SHARDS = 64


def shards_of(layer: LayerPlan, pending: set[int], count: int = MAX_SHARDS) -> list[tuple[int, ...]]:
    """The ``pending`` units of ``layer`` in at most ``count`` shards of whole input classes, balanced by rows
    (the largest class first into the lightest shard; the same plan always gives the same shards)."""
    classes = [tuple(u.index for u in c.units) for c in _classes(layer) if any(u.index in pending for u in c.units)]
    rows = {u.index: u.rows for u in layer.units}
    shards: list[list[int]] = [[] for _ in range(min(count, len(classes)))]
    loads = [0] * len(shards)
    for members in sorted(classes, key=lambda c: (-sum(rows[i] for i in c), c)):
        lightest = loads.index(min(loads))
        shards[lightest].extend(members)
        loads[lightest] += sum(rows[i] for i in members)
    return [tuple(sorted(s)) for s in shards if s]


def build_shard(
    module: nn.Module,
    layer: LayerPlan,
    units: tuple[int, ...],
    memory_budget: int,
    cache_dir: str | None,
    fast_path: bool,
) -> tuple[str, int, dict[int, np.ndarray]]:
    """A task: the tables of ``units`` of ``layer``, as ``(method, near ties, outputs by unit)``; with
    ``cache_dir`` the tables are written there and no output is returned."""
    done = _enumerate(module, layer, memory_budget=memory_budget, cache_dir=cache_dir, fast_path=fast_path, only=units)
    if cache_dir is not None:
        return done.method, done.near_ties, {}
    return done.method, done.near_ties, {i: np.ascontiguousarray(done.tables[i].outputs) for i in units}


def enumerate_on(
    pool: Submitter,
    layers: Sequence[tuple[nn.Module, LayerPlan]],
    *,
    memory_budget: int,
    cache_dir: str | os.PathLike[str] | None,
    fast_path: bool,
    bar: Progress = QUIET,
) -> list[Enumerated]:
    """:func:`~iotable.tabulate.enumerate._enumerate` of every layer, every shard of every layer a task on
    ``pool``; what each layer gives, in order (``bar`` counts the rows as shards finish)."""
    folder = None if cache_dir is None else os.fspath(cache_dir)
    cache = TableCache(folder) if folder is not None else None
    plans = []
    tasks: list[tuple[Any, ...]] = []
    for index, (module, layer) in enumerate(layers):
        outputs: dict[int, np.ndarray] = {}
        if cache is not None:
            _, outputs = _cached_outputs(cache, module, layer, _output_dtype(module, layer), range(len(layer.units)))
        bar.update(sum(layer.units[i].rows for i in outputs))
        pending = {u.index for u in layer.units if u.index not in outputs}
        shards = shards_of(layer, pending)
        tasks += [(module, layer, units, memory_budget, folder, fast_path) for units in shards]
        plans.append((index, tuple(sorted(outputs)), outputs, len(shards)))
    owner = [i for i, *_, count in plans for _ in range(count)]

    def finished(task: int, result: tuple[str, int, dict[int, np.ndarray]]) -> None:
        bar.update(sum(layers[owner[task]][1].units[i].rows for i in tasks[task][2]))

    results = run_all(pool, build_shard, tasks, what="precompute", error=EnumerationError, done=finished)
    found: list[Enumerated] = []
    start = 0
    for index, cached, outputs, count in plans:
        module, layer = layers[index]
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
