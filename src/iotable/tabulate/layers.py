"""Tabulating planned layers: the probe and the enumeration of one layer, or of a whole model's layers
together, and :class:`LayerTables`, what a layer's tabulation gives."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from .._util import display as _display
from .._util.executor import submitter
from .._util.progress import QUIET, Progress
from ..errors import SpecOptionError
from ..front.infer import INFERRED
from ..front.layerplan import LayerPlan, abbreviated
from ..table import IOTable
from .enumerate import DEFAULT_MEMORY_BUDGET, Enumerated, _enumerate, _enumerate_fast
from .fastpath import FastPath
from .probe import check_decomposition
from .recheck import check_rows
from .recognition import _ieee_float32, recognize
from .shards import enumerate_on

__all__ = ["LayerTables", "tabulate", "tabulate_layers", "without_unused"]

# The units a layer's notebook view lists (all of them up to this many), and its columns.
_UNITS_SHOWN = 64
_UNIT_COLUMNS = (
    ("unit", "unit"),
    ("in", "in channels"),
    ("out", "out channels"),
    ("fan_in", "fan-in"),
    ("bits", "bits"),
    ("rows", "rows"),
)


@dataclass(frozen=True)
class LayerTables:
    """The tables of one layer, in unit order, with the plan that produced them.

    ``cached`` lists the units whose tables were loaded from ``cache_dir`` instead of computed; ``method``
    says how the rest were built (``"black box"``, ``"linear fast path"``, or ``"cache"`` when all were
    cached); ``near_ties`` counts the rows the fast path found within float rounding of a quantization
    boundary and computed through the module itself (those rows can round either way on other batches).
    ``unused`` lists, for a layer whose units were inferred from its structure, each unit whose table showed
    that some of its inputs never change it: ``(unit, input channels removed)``; the plan and the tables are
    then those of the smaller units.

    Example:
        >>> conv = torch.nn.Conv1d(2, 2, kernel_size=2, groups=2, bias=False)
        >>> result = precompute(conv, input_domain=Domain.uniform(1))
        >>> len(result), result[0].rows, result.plan.units[1].in_channels
        (2, 4, (1,))
    """

    plan: LayerPlan
    tables: Sequence[IOTable]  # a tuple, or a TableList that makes each table on first access
    cached: tuple[int, ...] = ()
    method: str = "black box"
    near_ties: int = 0
    unused: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def name(self) -> str:
        """The layer's name."""
        return self.plan.name

    def __len__(self) -> int:
        return len(self.tables)

    def __getitem__(self, unit: int) -> IOTable:
        return self.tables[unit]

    def __iter__(self) -> Iterator[IOTable]:
        return iter(self.tables)

    def summary(self) -> str:
        """The plan's unit table (see :meth:`LayerPlan.summary`)."""
        return self.plan.summary()

    def _row(self) -> dict[str, Any]:
        """The layer's summary row (the columns a layer alone knows); ``rows`` counts the rows its tables hold."""
        units = self.plan.units
        return {
            "kind": "table",
            "name": self.name,
            "units": len(units),
            "fan_in": _display.joined(u.fan_in for u in units),
            "bits": _display.joined(self.plan._unit_bits(u) for u in units),
            "rows": sum(t.rows for t in self.tables),
            "method": self.method,
            "near_ties": self.near_ties,
            "estimate": self.plan.lut_estimate(),
        }

    def __repr__(self) -> str:
        row = self._row()
        full = self.plan.total_rows
        rows = f"{row['rows']:,} rows" if row["rows"] == full else f"{row['rows']:,} of {full:,} rows kept"
        cached = f", {len(self.cached)} cached" if self.cached and self.method != "cache" else ""
        unused = f", {sum(len(c) for _, c in self.unused)} unused inputs removed" if self.unused else ""
        return _display.bounded(
            f"LayerTables({_display.name(self.name)}, {len(self.tables)} tables, fan-in {row['fan_in']}, "
            f"{row['bits']} bit, {rows}, {self.method}{cached}{unused})"
        )

    def _repr_html_(self) -> str:
        units = self.plan.units[:_UNITS_SHOWN]
        unit_rows = [
            {
                "unit": u.index,
                "in": abbreviated(u.in_channels),
                "out": abbreviated(u.out_channels),
                "fan_in": u.fan_in,
                "bits": self.plan._unit_bits(u),
                "rows": self.tables[u.index].rows,
            }
            for u in units
        ]
        notes = [f"... and {len(self.plan.units) - len(units)} more units"] if len(self.plan.units) > len(units) else []
        return _display.view(
            repr(self), _display.table([self._row()]), _display.table(unit_rows, _UNIT_COLUMNS), notes=notes
        )


def tabulate(
    module: nn.Module,
    layer: LayerPlan,
    *,
    check: bool = True,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
    max_rows: int | None = None,
    bar: Progress = QUIET,
    executor: Any = None,
) -> LayerTables:
    """Probe (``check=True``) and enumerate one planned layer (see :func:`precompute` for the options), then
    run a few of its rows again alone (:func:`~iotable.tabulate.recheck.check_rows`, a bounded cost).

    ``bar``: the caller's progress bar (the layer's own, or the whole model's), which counts the rows.
    ``executor``: where the units are enumerated, in shards (:mod:`iotable.tabulate.shards`); ``None``: here.
    """
    del max_rows, progress  # sizes were checked when the layer was planned; the caller made the bar
    pool = submitter(executor, what="precompute", error=SpecOptionError)
    fast = _probed(module, layer, check=check, memory_budget=memory_budget, fast_path=fast_path)
    if pool is not None:
        shown = [(module, layer, fast is None)]
        done = enumerate_on(
            pool, shown, memory_budget=memory_budget, cache_dir=cache_dir, fast_path=fast_path, bar=bar
        )[0]
    else:
        done = _enumerate(
            module, layer, memory_budget=memory_budget, cache_dir=cache_dir, fast_path=fast_path, fast=fast, bar=bar
        )
    return _finished(module, layer, done)


def _probed(
    module: nn.Module, layer: LayerPlan, *, check: bool, memory_budget: int, fast_path: bool
) -> FastPath | None:
    """The fast path that recognizes ``layer``, else ``None`` once the decomposition is probed (``check``, or
    units iotable inferred: those are checked even with check=False, a flag that trusts the user's metadata);
    a layer the fast path recognizes is independent per unit."""
    fast = recognize(module, layer, memory_budget=memory_budget) if fast_path else None
    if (check or layer.spec.source.startswith(INFERRED)) and fast is None:
        check_decomposition(module, layer, memory_budget=memory_budget)
    return fast


def _finished(module: nn.Module, layer: LayerPlan, done: Enumerated) -> LayerTables:
    """A layer's enumeration, a few of its rows run again alone (a batch-size dependence shows), as its
    :class:`LayerTables` (without the inputs inferred units never read)."""
    check_rows(module, layer, done.tables)
    result = LayerTables(
        plan=layer, tables=done.tables, cached=done.cached, method=done.method, near_ties=done.near_ties
    )
    return without_unused(result) if layer.spec.source.startswith(INFERRED) else result


def without_unused(layer: LayerTables) -> LayerTables:
    """``layer`` with the inputs that never change a unit's table removed from that unit (plan and table), for
    units inferred from a module's structure (an upper bound on what each reads): exact, from the tables alone.
    """
    plan = layer.plan
    if plan.geometry.rank:
        return layer
    units, tables, removed = [], [], []
    for unit, table in zip(plan.units, layer.tables):
        columns = table.unused_inputs()
        if not columns or len(columns) == table.fan_in:
            columns = columns[:-1]  # a constant unit keeps one input: a table has at least one
        if columns:
            table = table.without_inputs(columns)
            kept = tuple(c for j, c in enumerate(unit.in_channels) if j not in columns)
            removed.append((unit.index, tuple(unit.in_channels[j] for j in columns)))
            unit = replace(unit, in_channels=kept, fan_in=len(kept), rows=table.rows)
        units.append(unit)
        tables.append(table)
    if not removed:
        return layer
    fan_in = tuple(u.in_channels for u in units)
    spec = replace(plan.spec, fan_in=fan_in)
    smaller = replace(plan, units=tuple(units), spec=spec)
    return replace(layer, plan=smaller, tables=tuple(tables), unused=tuple(removed))


def tabulate_layers(
    planned: dict[str, tuple[nn.Module, LayerPlan]],
    *,
    check: bool = True,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
    max_rows: int | None = None,
    bar: Progress = QUIET,
    executor: Any = None,
) -> dict[str, LayerTables]:
    """:func:`tabulate` for every planned layer of a model, by name, in order.

    Without a cache, the layers the fast path recognizes are built together: their tails are analysed and
    their kernels run in batches across layers, which spares small networks a fixed cost per layer.
    ``bar``: the model's progress bar, which counts the rows. ``executor``: every shard of every layer is a
    task there (:mod:`iotable.tabulate.shards`), all submitted at once.
    """
    pool = submitter(executor, what="precompute", error=SpecOptionError)
    if pool is not None:
        layers = []
        for module, layer in planned.values():  # every probe before any task: a bad layer fails at once
            fast = _probed(module, layer, check=check, memory_budget=memory_budget, fast_path=fast_path)
            layers.append((module, layer, fast is None))
        shown = enumerate_on(
            pool, layers, memory_budget=memory_budget, cache_dir=cache_dir, fast_path=fast_path, bar=bar
        )
        return {name: _finished(*planned[name], done) for name, done in zip(planned, shown)}
    found = {}
    if fast_path and cache_dir is None:
        ieee = _ieee_float32()
        for name, (module, layer) in planned.items():
            fast = recognize(module, layer, memory_budget=memory_budget, ieee=ieee)
            if fast is not None:
                found[name] = (layer, fast)
    built = dict(zip(found, _enumerate_fast(list(found.values()), memory_budget=memory_budget, bar=bar)))
    del max_rows, progress  # sizes were checked when the layers were planned; the caller made the bar
    result = {}
    for name, (module, layer) in planned.items():
        done = built.get(name)
        if done is None:
            result[name] = tabulate(
                module,
                layer,
                check=check,
                memory_budget=memory_budget,
                cache_dir=cache_dir,
                fast_path=fast_path,
                bar=bar,
            )
        else:
            check_rows(module, layer, done.tables)
            found_tables = LayerTables(plan=layer, tables=done.tables, method=done.method, near_ties=done.near_ties)
            result[name] = without_unused(found_tables) if layer.spec.source.startswith(INFERRED) else found_tables
    return result
