"""``precompute()``: the notebook entry point from a layer (or decorated block) to its unit tables."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, overload

from torch import nn

from .._util.executor import check_executor
from .._util.progress import progress_bar
from .._util.text import unprintable
from ..domain import Domain
from ..errors import SpecOptionError
from ..front.modelcheck import warn_training
from ..front.plan import DEFAULT_MAX_ROWS, plan
from ..front.reuse import remember, remembered, structure_key
from ..front.spec import declared_spec, has_spec
from ..packages import read_for
from ..tabulate.cache import check_cache_dir
from ..tabulate.enumerate import DEFAULT_MEMORY_BUDGET
from ..tabulate.layers import LayerTables, tabulate
from .frontends import file_front_end
from .network import TableNetwork, build_network

__all__ = ["LayerTables", "precompute", "precompute_layer", "precompute_model"]


def _is_model(module: nn.Module) -> bool:
    """Whole models: an undecorated ``nn.Sequential`` or any module no spec describes."""
    if isinstance(module, nn.Sequential):
        return declared_spec(module) is None
    return not has_spec(module)


@dataclass(frozen=True)
class PrecomputeOptions:
    """How every layer's tables are built: the options :func:`precompute` checks once and passes down."""

    max_rows: int = DEFAULT_MAX_ROWS
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    check: bool = True
    progress: bool | None = None
    cache_dir: str | os.PathLike[str] | None = None
    fast_path: bool = True
    executor: Any = None

    def __post_init__(self) -> None:
        check_executor(self.executor, what="precompute", error=SpecOptionError)
        for option, value in (("memory_budget", self.memory_budget), ("max_rows", self.max_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                msg = f"precompute: {option} must be a positive integer, received {value!r}"
                raise SpecOptionError(msg)
        flags = (("check", self.check), ("fast_path", self.fast_path), ("progress", self.progress))
        for option, flag in flags:
            if not isinstance(flag, bool) and not (option == "progress" and flag is None):
                accepted = "True, False or None" if option == "progress" else "True or False"
                msg = f"precompute: {option} must be {accepted}, received {type(flag).__name__} {flag!r}"
                raise SpecOptionError(msg)

    def as_kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments (of :func:`tabulate_layers` and the network builder)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_module(module: Any, what: str) -> None:
    """Refuse what is not a torch module (``None``, a function, a path) before anything reads it."""
    if isinstance(module, nn.Module):
        return
    if isinstance(module, (str, os.PathLike)):
        msg = (
            f"{what}: expected a torch.nn.Module, received the path {os.fspath(module)!r}; a QONNX model (.onnx) "
            "goes to iotable.precompute, which reads it; any other file: build the model in torch (load its "
            "state_dict) and pass it"
        )
    else:
        msg = (
            f"{what}: expected a torch.nn.Module (a layer, a decorated block or a whole model), received "
            f"{type(module).__name__}; wrap a function in an nn.Module whose forward calls it"
        )
    raise SpecOptionError(msg)


def _check_front(*, reuse: Any, name: Any, options: PrecomputeOptions) -> None:
    """The checks every entry makes before any work: ``reuse`` and ``name``, and a usable ``cache_dir``."""
    if not isinstance(reuse, bool):
        msg = f"precompute: reuse must be True or False, received {type(reuse).__name__} {reuse!r}"
        raise SpecOptionError(msg)
    if name is not None and (not isinstance(name, str) or not name):
        msg = f"precompute: name must be a non-empty string (the layer's name in tables and bundles), received {name!r}"
        raise SpecOptionError(msg)
    if name is not None and unprintable(name) is not None:
        msg = (
            f"precompute: name {name!r} holds the unprintable character {unprintable(name)!r} (a control character "
            "or line break), which a layer's name may not hold; pass a name of printable characters"
        )
        raise SpecOptionError(msg)
    if options.cache_dir is not None:
        check_cache_dir(options.cache_dir)  # a bad cache_dir is refused before any work


@overload
def precompute(
    module: str | os.PathLike[str],
    *,
    input_domain: Domain | None = None,
    example_input: None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    check: bool = True,
    progress: bool | None = None,
    name: str | None = None,
    host: tuple[()] = (),
    input_layout: None = None,
    cache_dir: None = None,
    fast_path: bool = True,
    reuse: bool = True,
    executor: Any = None,
) -> TableNetwork: ...


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
    executor: Any = None,
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
    executor: Any = None,
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
    executor: Any = None,
) -> LayerTables | TableNetwork: ...


def precompute(
    module: Any,
    *,
    input_domain: Domain | Sequence[Domain] | None = None,
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
    executor: Any = None,
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

    A QONNX model (a path to an ``.onnx`` file, or an ``onnx.ModelProto``; brevitas writes one with
    ``brevitas.export.export_qonnx``) is read by the QONNX front end (extra ``iotable[onnx]``): cut into table
    layers at its quantizers, each unit's rows computed exactly by QONNX's rules, the input domain read from its
    first quantizer (see docs/models.md).

    Args:
        module: a layer with a built-in rule (``nn.Linear``, ``nn.Conv1d``/``2d``, elementwise modules, a
            ``nn.Sequential`` of one layer and elementwise modules), a module decorated with
            :func:`iotable.decompose`, or a whole model.
        input_domain: the domain of every input element, or one domain per input channel (for a QONNX model:
            optional, and the first quantizer's when given).
        example_input: a batch giving the input shape when the module cannot state it (required for
            whole models).
        max_rows: the largest table allowed (default ``2**24``).
        memory_budget: bytes one forward pass may hold (default 256 MiB).
        check: probe the declared decomposition metadata before enumerating (units iotable inferred from a
            module's structure are probed always).
        progress: a progress bar over the rows (one bar for a whole model); ``None`` shows it for long work
            in a terminal or a Jupyter notebook.
        name: the layer's name in tables and messages (default: its class name).
        host: whole models only: submodules (names or modules) to run with torch instead of tables, such
            as a float classifier head; what follows a host node runs on the host too. A host module reads
            codes: one that reads a table layer's unquantized output is refused (name that layer's modules too).
        input_layout: whole models only: the input's layout when it is not the first layer's.
        cache_dir: a directory where each finished table is written as soon as it is done, keyed by a hash
            of its layer's parameters, metadata and domains; a rerun (also after an interruption) loads
            those tables and computes only what is missing.
        fast_path: build linear layers (``Linear``, ``Conv1d``/``Conv2d``, then monotone elementwise modules
            and ``Quantize``) with a structured path instead of the black box; it gives the same tables
            (rows within float rounding of a quantization boundary are computed through the module and
            counted in ``near_ties``), and needs no probe: such a layer's structure proves its units.
        executor: where the rows are enumerated: ``None`` (this process), a ``concurrent.futures.Executor`` or a
            ``dask.distributed.Client``. Each layer's units are cut into a few shards for each worker (whole
            forward passes of the module for the black box, whole input classes for the fast path), every
            shard of every layer one task; the tables come back as results, or, with ``cache_dir`` (a folder
            the workers share), through the cache, where a task that runs again finds what its first run
            finished. The tables equal a local run's (see docs/cluster.md).
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
    front_end = file_front_end(module)
    if front_end is not None:  # a model given as a file (a QONNX .onnx path or ModelProto): its own front end
        unused = {
            "memory_budget": memory_budget != DEFAULT_MEMORY_BUDGET, "check": check is not True,
            "name": name is not None, "fast_path": fast_path is not True, "reuse": reuse is not True,
            "executor": executor is not None,
        }  # fmt: skip
        if any(unused.values()):
            given = ", ".join(f"{option}=" for option, set_ in unused.items() if set_)
            msg = (
                f"precompute: {given} has no meaning for a model read by the {front_end.name} front end (its rows "
                "are computed from the file's semantics, not by running torch); leave it unset"
            )
            raise SpecOptionError(msg)
        return front_end.precompute(  # type: ignore[no-any-return]
            module,
            input_domain=input_domain,
            max_rows=max_rows,
            example_input=example_input,
            host=host,
            input_layout=input_layout,
            cache_dir=cache_dir,
        )
    if input_domain is None:
        msg = "precompute: input_domain= is required for a torch module (the domain of its input elements)"
        raise SpecOptionError(msg)
    options = PrecomputeOptions(max_rows, memory_budget, check, progress, cache_dir, fast_path, executor)
    _check_module(module, "precompute")
    _check_front(reuse=reuse, name=name, options=options)
    warn_training(module, "precompute")  # called here: the warning points at the caller's line
    module = read_for(module, "precompute")  # layers that run on CUDA only: read from their parameters
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
    executor: Any = None,
) -> LayerTables:
    """:func:`precompute` of one layer or decorated block, even an ``nn.Sequential``: its unit tables.

    The arguments are :func:`precompute`'s. A module no decomposition describes raises
    :class:`~iotable.errors.NotDecomposedError` (give it to :func:`precompute_model` to cut it into layers).

    Example:
        >>> layer = precompute_layer(torch.nn.Linear(2, 3), input_domain=Domain.uniform(1))
        >>> len(layer), layer[0].rows
        (3, 4)
    """
    options = PrecomputeOptions(max_rows, memory_budget, check, progress, cache_dir, fast_path, executor)
    _check_module(module, "precompute_layer")
    _check_front(reuse=reuse, name=name, options=options)
    warn_training(module, "precompute")  # called here: the warning points at the caller's line
    module = read_for(module, "precompute")  # layers that run on CUDA only: read from their parameters
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
    executor: Any = None,
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
    options = PrecomputeOptions(max_rows, memory_budget, check, progress, cache_dir, fast_path, executor)
    _check_module(model, "precompute_model")
    _check_front(reuse=reuse, name=None, options=options)
    warn_training(model, "precompute")  # called here: the warning points at the caller's line
    model = read_for(model, "precompute")  # layers that run on CUDA only: read from their parameters
    return _model(model, input_domain, example_input, host, input_layout, reuse=reuse, options=options)


def _model(
    model: nn.Module,
    input_domain: Domain | Sequence[Domain],
    example_input: Any,
    host: Iterable[Any],
    input_layout: str | None,
    *,
    reuse: bool,
    options: PrecomputeOptions,
) -> TableNetwork:
    """Trace, cut, plan and tabulate a whole model (see :func:`iotable.network.build_network`)."""
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
    options: PrecomputeOptions,
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
            executor=options.executor,
        )
