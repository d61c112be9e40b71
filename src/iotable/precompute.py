"""``precompute()``: the notebook entry point from a layer (or decorated block) to its unit tables."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, overload

from torch import nn

from . import _display
from ._fastpath import _ieee_float32, recognize
from ._modelcheck import warn_training
from ._probe import check_decomposition
from ._progress import QUIET, Progress, progress_bar
from ._reuse import remember, remembered, structure_key
from ._store import check_cache_dir
from .domain import Domain
from .enumerate import DEFAULT_MEMORY_BUDGET, _enumerate, _enumerate_fast
from .errors import SpecError
from .plan import DEFAULT_MAX_ROWS, LayerPlan, plan
from .plan import _short as _channels
from .spec import _declared, has_spec
from .table import IOTable

if TYPE_CHECKING:
    from .network import TableNetwork

__all__ = ["LayerTables", "precompute", "precompute_layer", "precompute_model"]

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
        }

    def __repr__(self) -> str:
        row = self._row()
        full = self.plan.total_rows
        rows = f"{row['rows']:,} rows" if row["rows"] == full else f"{row['rows']:,} of {full:,} rows kept"
        cached = f", {len(self.cached)} cached" if self.cached and self.method != "cache" else ""
        return _display.bounded(
            f"LayerTables({_display.name(self.name)}, {len(self.tables)} tables, fan-in {row['fan_in']}, "
            f"{row['bits']} bit, {rows}, {self.method}{cached})"
        )

    def _repr_html_(self) -> str:
        units = self.plan.units[:_UNITS_SHOWN]
        unit_rows = [
            {
                "unit": u.index,
                "in": _channels(u.in_channels),
                "out": _channels(u.out_channels),
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


def _is_model(module: nn.Module) -> bool:
    """Whole models: an undecorated ``nn.Sequential`` or any module no spec describes."""
    if isinstance(module, nn.Sequential):
        return _declared(module) is None
    return not has_spec(module)


@dataclass(frozen=True)
class _Options:
    """How every layer's tables are built: the options :func:`precompute` checks once and passes down."""

    max_rows: int = DEFAULT_MAX_ROWS
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    check: bool = True
    progress: bool | None = None
    cache_dir: str | os.PathLike[str] | None = None
    fast_path: bool = True

    def __post_init__(self) -> None:
        for option, value in (("memory_budget", self.memory_budget), ("max_rows", self.max_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                msg = f"precompute: {option} must be a positive integer, received {value!r}"
                raise SpecError(msg)
        flags = (("check", self.check), ("fast_path", self.fast_path), ("progress", self.progress))
        for option, flag in flags:
            if not isinstance(flag, bool) and not (option == "progress" and flag is None):
                accepted = "True, False or None" if option == "progress" else "True or False"
                msg = f"precompute: {option} must be {accepted}, received {type(flag).__name__} {flag!r}"
                raise SpecError(msg)

    def as_kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments (of :func:`tabulate_layers` and the network builder)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_front(*, reuse: Any, name: Any, options: _Options) -> None:
    """The checks every entry makes before any work: ``reuse`` and ``name``, and a usable ``cache_dir``."""
    if not isinstance(reuse, bool):
        msg = f"precompute: reuse must be True or False, received {type(reuse).__name__} {reuse!r}"
        raise SpecError(msg)
    if name is not None and (not isinstance(name, str) or not name):
        msg = f"precompute: name must be a non-empty string (the layer's name in tables and bundles), received {name!r}"
        raise SpecError(msg)
    if options.cache_dir is not None:
        check_cache_dir(options.cache_dir)  # a bad cache_dir is refused before any work


@overload
def precompute(
    module: nn.Linear | nn.Conv1d | nn.Conv2d,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    check: bool = True,
    progress: bool | None = None,
    name: str | None = None,
    host: tuple[()] = (),
    input_layout: None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
    reuse: bool = True,
) -> LayerTables: ...


@overload
def precompute(
    module: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    check: bool = True,
    progress: bool | None = None,
    name: str | None = None,
    host: Iterable[Any] = (),
    input_layout: str,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
    reuse: bool = True,
) -> TableNetwork: ...


@overload
def precompute(
    module: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    check: bool = True,
    progress: bool | None = None,
    name: str | None = None,
    host: Iterable[Any] = (),
    input_layout: None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
    reuse: bool = True,
) -> LayerTables | TableNetwork: ...


def precompute(
    module: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    check: bool = True,
    progress: bool | None = None,
    name: str | None = None,
    host: Iterable[Any] = (),
    input_layout: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
    reuse: bool = True,
) -> LayerTables | TableNetwork:
    """Turn a layer, a decorated block or a whole model into lookup tables.

    A layer or a decorated block gives one dense table per smallest unit, as :class:`LayerTables`. A
    whole model (an undecorated ``nn.Sequential``, or any module no decomposition describes) is traced
    with torch.fx, cut into table layers at its quantizers and returned as a
    :class:`~iotable.network.TableNetwork` (tables, interlayer graph and a table-only runtime); so is any
    module given with ``host=`` or ``input_layout=``. :func:`precompute_layer` and :func:`precompute_model`
    are the two paths on their own, each with one return type.
    For every layer: the decomposition is planned (every table size is checked
    before any work), probed against the module (``check=True``), then every input combination of every
    unit is enumerated through the unmodified module, in eval mode (as hardware runs it): modules left in
    training mode that behave differently there (dropout, batch norm, ...) are named in an
    :class:`~iotable.IOTableWarning`. Whole models must compute in float32 (``model.float()``).

    Args:
        module: a layer with a built-in rule (``nn.Linear``, ``nn.Conv1d``/``2d``, elementwise modules, a
            ``nn.Sequential`` of one layer and elementwise modules), a module decorated with
            :func:`iotable.decompose`, or a whole model.
        input_domain: the domain of every input element, or one domain per input channel.
        example_input: a batch giving the input shape when the module cannot state it (required for
            whole models).
        max_rows: the largest table allowed (default ``2**24``).
        memory_budget: bytes one forward pass may hold (default 256 MiB).
        check: probe the decomposition metadata before enumerating.
        progress: a progress bar over the rows (one bar for a whole model); ``None`` shows it for long work
            in a terminal or a Jupyter notebook.
        name: the layer's name in tables and messages (default: its class name).
        host: whole models only: submodules (names or modules) to run with torch instead of tables, such
            as a float classifier head; what follows a host node runs on the host too.
        input_layout: whole models only: the input's layout when it is not the first layer's.
        cache_dir: a directory where each finished table is written as soon as it is done, keyed by a hash
            of its layer's parameters, metadata and domains; a rerun (also after an interruption) loads
            those tables and computes only what is missing.
        fast_path: build linear layers (``Linear``, ``Conv1d``/``Conv2d``, then monotone elementwise modules
            and ``Quantize``) with a structured path instead of the black box; it gives the same tables
            (rows within float rounding of a quantization boundary are computed through the module and
            counted in ``near_ties``), and needs no probe: such a layer's structure proves its units.
        reuse: reuse the planning of an earlier call on the same layer or block (for whole models, the
            tracing, planning and graph) when its structure (modules, metadata, shapes, hyper-parameters,
            domains) and these arguments are unchanged; the tables are always built from the current weights,
            and a black-box layer is probed again. ``False`` plans anew.

    Returns:
        :class:`LayerTables` for a layer (``.tables`` in unit order), or a
        :class:`~iotable.network.TableNetwork` for a whole model.

    Example:
        >>> conv = torch.nn.Conv1d(3, 3, kernel_size=3, groups=3, bias=False)
        >>> _ = torch.nn.init.ones_(conv.weight)
        >>> tables = precompute(decompose(conv, groups=3), input_domain=Domain.uniform(2)).tables
        >>> len(tables), tables[0].rows, tables[0].lookup([2, 2, 2]).tolist()
        (3, 64, [6.0])
    """
    options = _Options(max_rows, memory_budget, check, progress, cache_dir, fast_path)
    _check_front(reuse=reuse, name=name, options=options)
    warn_training(module, "precompute")  # called here: the warning points at the caller's line
    if host or input_layout is not None or _is_model(module):
        return _model(module, input_domain, example_input, host, input_layout, reuse=reuse, options=options)
    return _layer(module, input_domain, example_input, name, reuse=reuse, options=options)


def precompute_layer(
    module: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    check: bool = True,
    progress: bool | None = None,
    name: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
    reuse: bool = True,
) -> LayerTables:
    """:func:`precompute` of one layer or decorated block, even an ``nn.Sequential``: its unit tables.

    The arguments are :func:`precompute`'s. A module no decomposition describes raises
    :class:`~iotable.NotDecomposedError` (give it to :func:`precompute_model` to cut it into layers).

    Example:
        >>> layer = precompute_layer(torch.nn.Linear(2, 3), input_domain=Domain.uniform(1))
        >>> len(layer), layer[0].rows
        (3, 4)
    """
    options = _Options(max_rows, memory_budget, check, progress, cache_dir, fast_path)
    _check_front(reuse=reuse, name=name, options=options)
    warn_training(module, "precompute")  # called here: the warning points at the caller's line
    return _layer(module, input_domain, example_input, name, reuse=reuse, options=options)


def precompute_model(
    model: nn.Module,
    *,
    input_domain: Domain | Sequence[Domain],
    example_input: Any = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    check: bool = True,
    progress: bool | None = None,
    host: Iterable[Any] = (),
    input_layout: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    fast_path: bool = True,
    reuse: bool = True,
) -> TableNetwork:
    """:func:`precompute` of a whole model, even a decorated block: its :class:`~iotable.network.TableNetwork`.

    The arguments are :func:`precompute`'s; the model's forward is traced with torch.fx and cut into table
    layers at its quantizers (a lone layer, whose forward is a function call, goes in an ``nn.Sequential``).

    Example:
        >>> from iotable.nn import Quantize
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 3), Quantize(1))
        >>> net = precompute_model(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 2))
        >>> [len(layer) for layer in net.layers.values()]
        [3]
    """
    options = _Options(max_rows, memory_budget, check, progress, cache_dir, fast_path)
    _check_front(reuse=reuse, name=None, options=options)
    warn_training(model, "precompute")  # called here: the warning points at the caller's line
    return _model(model, input_domain, example_input, host, input_layout, reuse=reuse, options=options)


def _model(
    model: nn.Module,
    input_domain: Domain | Sequence[Domain],
    example_input: Any,
    host: Iterable[Any],
    input_layout: str | None,
    *,
    reuse: bool,
    options: _Options,
) -> TableNetwork:
    """Trace, cut, plan and tabulate a whole model (see :func:`iotable.network.build_network`)."""
    from .network import build_network  # whole models: the network module builds on this one

    return build_network(
        model,
        input_domain=input_domain,
        example_input=example_input,
        host=host,
        input_layout=input_layout,
        reuse=reuse,
        **options.as_kwargs(),
    )


def _layer(
    module: nn.Module,
    input_domain: Domain | Sequence[Domain],
    example_input: Any,
    name: str | None,
    *,
    reuse: bool,
    options: _Options,
) -> LayerTables:
    """Plan one layer (or reuse the plan of an earlier call on the same structure), then tabulate it."""
    layer = None
    if reuse:  # the plan depends on the module's structure and these arguments, not on its weights
        shape = None if example_input is None else tuple(getattr(example_input, "shape", ())[1:])
        domains = input_domain if isinstance(input_domain, Domain) else tuple(input_domain)
        key = structure_key(module, input_domain=domains, example=shape, max_rows=options.max_rows, name=name)
        layer = remembered(module, key)
    if layer is None:
        layer = plan(
            module, input_domain=input_domain, example_input=example_input, max_rows=options.max_rows, name=name
        )
        if reuse:
            remember(module, key, layer)
    with progress_bar(total=layer.total_rows, desc=layer.name, enabled=options.progress) as bar:
        return tabulate(
            module,
            layer,
            check=options.check,
            memory_budget=options.memory_budget,
            cache_dir=options.cache_dir,
            fast_path=options.fast_path,
            bar=bar,
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
) -> LayerTables:
    """Probe (``check=True``) and enumerate one planned layer (see :func:`precompute` for the options).

    ``bar``: the caller's progress bar (the layer's own, or the whole model's), which counts the rows.
    """
    del max_rows, progress  # sizes were checked when the layer was planned; the caller made the bar
    fast = recognize(module, layer, memory_budget=memory_budget) if fast_path else None
    if check and fast is None:  # a layer the fast path recognizes is independent per unit by construction
        check_decomposition(module, layer, memory_budget=memory_budget)
    done = _enumerate(
        module,
        layer,
        memory_budget=memory_budget,
        cache_dir=cache_dir,
        fast_path=fast_path,
        fast=fast,
        bar=bar,
    )
    return LayerTables(plan=layer, tables=done.tables, cached=done.cached, method=done.method, near_ties=done.near_ties)


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
) -> dict[str, LayerTables]:
    """:func:`tabulate` for every planned layer of a model, by name, in order.

    Without a cache, the layers the fast path recognizes are built together: their tails are analysed and
    their kernels run in batches across layers, which spares small networks a fixed cost per layer.
    ``bar``: the model's progress bar, which counts the rows.
    """
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
            result[name] = LayerTables(plan=layer, tables=done.tables, method=done.method, near_ties=done.near_ties)
    return result
