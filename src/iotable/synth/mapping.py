"""Tables mapped onto k-input LUTs by ABC: one table (:func:`map_table`) or many (:func:`map_luts`, and
:func:`cost` for a network); a netlist checked against a table (:func:`check_table`).

A table becomes its function on bits (:mod:`iotable.lutnet`), don't-cares spent, written as BLIF
(:mod:`.blif`), mapped by ABC with a pinned script (:mod:`.abcrun`), and the LUT netlist ABC writes is read
back and evaluated on every row of the table (its care rows for a partial one): a netlist that differs
raises :class:`NetlistMismatchError`. Many tables are mapped once per distinct function, in parallel
(:mod:`.jobs`), and every result is cached on disk as JSON under a key made of the function, ``k``, the
script and ABC's version (:mod:`.cache`), so that a rerun, or a run after an interruption, maps only what is
missing. Cached netlists are checked against their tables again when they are read.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from .._util.progress import progress_bar
from ..errors import SynthError
from ..graph.liveness import Liveness, check_keep_dead, liveness
from ..lutcount import check_k
from ..lutnet import BitFunction, LutNetlist, LutResults, bit_function, check_netlist
from ..network.network import TableNetwork
from ..table import IOTable
from .abcrun import abc_version, find_abc, resolve_script
from .arithmap import map_arithmetic
from .cache import Cache, cached_results
from .floor import check_effort, effort_flow
from .inputs import DEFAULT_TIMEOUT, check_dense, check_progress, check_timeout, table_items, table_name
from .jobs import Job, batches, mapped_records, run_job
from .records import LutReport, MappedTable, from_record, layer_costs, layer_registers, with_dense

__all__ = ["check_table", "cost", "map_luts", "map_table"]


def map_table(
    table: IOTable,
    *,
    k: int = 6,
    script: str | None = None,
    abc: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    dense: IOTable | None = None,
    effort: str = "fast",
) -> MappedTable:
    """Map one table onto k-input LUTs with ABC and check the netlist against every row of the table.

    The table's function on bits (``iotable.hdl``'s packing) is written as BLIF with its don't-cares spent
    (rows a partial table lacks, bit patterns that are no code), ABC runs ``script`` (default
    :data:`DEFAULT_SCRIPT`: ``collapse; muxes; strash; if -K {k}``), and the LUT netlist it writes is
    read back and evaluated, vectorized, on every care row.

    Args:
        table: an IOTable with code outputs, of at most 24 address bits.
        k: LUT inputs (6 for today's FPGAs).
        script: ABC commands between reading the table and writing the netlist; ``{k}`` is replaced by k.
        abc: the ABC program (name or path); default the first of ``berkeley-abc``, ``yosys-abc``, ``abc``.
        timeout: seconds ABC may run (a 16-bit table takes about 3 s).
        dense: for a partial table, the dense table it was restricted from: its LUTs fill ``dense_luts``, and
            its netlist is kept instead when it has fewer LUTs (it computes the partial table too).
        effort: ``"fast"``, one ABC run with ``script``; or ``"floor"``, the table mapped under every input
            order of :data:`~iotable.synth.floor.ORDERS` and every script (``script``, then
            :data:`~iotable.synth.floor.FLOOR_SCRIPTS`), each netlist checked, the smallest kept (its
            ``strategy`` names the winner, ``attempts`` and ``spread`` the others' LUTs).

    Returns:
        A :class:`MappedTable`: LUTs, depth, the netlist, the estimate, ABC's version and the script.

    Raises:
        SynthError: a table without code outputs, too many bits, a bad k, script or timeout.
        ABCNotInstalledError: no ABC program (install the Debian package ``berkeley-abc``).
        ABCError: ABC failed or ran out of time.
        NetlistMismatchError: the netlist does not compute the table (the message names table and row).

    Example:
        >>> from iotable import Domain, IOTable
        >>> xor = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                     output_domain=Domain.uniform(1))
        >>> m = map_table(xor)
        >>> m.luts, m.depth, m.estimate
        (1, 1, 1)
    """
    what = "map_table"
    k = check_k(k, what=what)
    fn = bit_function(table, what=what)
    name = table_name(table, None)
    dense_fn = bit_function(check_dense(table, dense, name, what=what), what=what) if dense is not None else None
    script = resolve_script(script, k, what=what)
    chosen = check_effort(effort, what=what)
    script, attempts = effort_flow(chosen, script, k)
    timeout = check_timeout(timeout, what=what)
    program = find_abc(abc, what=what)
    version = abc_version(program)
    (record,) = run_job(Job((fn,), (name,), program, script, k, timeout, version, attempts))
    mapped = from_record(record, LutNetlist.from_blif(record["blif"]), cached=False, fn=fn)
    if dense_fn is not None:
        base_name = f"the dense counterpart of {name}"
        (base,) = run_job(Job((dense_fn,), (base_name,), program, script, k, timeout, version, attempts))
        dense_mapped = from_record(base, LutNetlist.from_blif(base["blif"]), cached=False, fn=dense_fn)
        mapped = with_dense(mapped, dense_mapped, fn, name)
    return mapped


def check_table(netlist: LutNetlist, table: IOTable, *, k: int | None = None) -> None:
    """Raise :class:`NetlistMismatchError` unless ``netlist`` computes ``table`` on every row it holds.

    The netlist's inputs are the table's address bits ``x<input>_<bit>`` and its outputs the code bits
    ``y<output>_<bit>`` (as :func:`map_table` writes them); rows a partial table lacks and bit patterns that
    are no code are not checked (don't-cares). With ``k``, also refuse a node of more than ``k`` inputs.

    Example:
        >>> from iotable import Domain, IOTable
        >>> t = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                   output_domain=Domain.uniform(1))
        >>> xor = ".model m\\n.inputs x0_0 x1_0\\n.outputs y0_0\\n.names x0_0 x1_0 y0_0\\n01 1\\n10 1\\n.end\\n"
        >>> check_table(LutNetlist.from_blif(xor), t)  # passes silently
        >>> check_table(LutNetlist.from_blif(xor.replace("01 1", "00 1")), t)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        iotable.errors.NetlistMismatchError: IOTable(4 rows dense, ...): the mapped LUT netlist does not compute ...
    """
    fn = bit_function(table, what="check_table")
    check_netlist(netlist, fn, name=repr(table), k=k)


# -- many tables ----------------------------------------------------------------------------------------------


def map_luts(
    tables: Any,
    *,
    k: int = 6,
    script: str | None = None,
    executor: Any = None,
    workers: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    abc: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    dense: Any = None,
    keep_dead: bool = False,
    effort: str = "fast",
) -> LutReport:
    """Map every table of a network (or a list of tables) onto k-input LUTs with ABC, each checked.

    Distinct tables (by content) are mapped once, in parallel; each netlist is evaluated on every row of
    its table (care rows for partial tables) and must equal it. With ``cache_dir`` every result is kept as
    a JSON file keyed by the table's content, ``k``, the script and ABC's version: a rerun, or a run after
    an interruption, maps only what is missing (and checks what it reads).

    Args:
        tables: a :class:`~iotable.TableNetwork` (per-layer totals from its layers), a layer's tables, or
            IOTables (per-layer totals where they name their layer).
        k: LUT inputs.
        script: ABC commands (see :func:`map_table`); ``{k}`` is replaced by k.
        executor: ``None`` (a local process pool over the available cores, or this process for one job), a
            ``concurrent.futures.Executor``, or a ``dask.distributed.Client`` (needs ``iotable[dask]``).
        workers: processes of the default pool (default: the available cores); not with ``executor``.
        cache_dir: a folder for the JSON cache (created if needed); ``None``: no cache.
        progress: a bar counted in table rows; ``None`` shows it for long runs in a terminal or notebook.
        abc: the ABC program (see :func:`map_table`); workers must be able to run the same path.
        timeout: seconds ABC may run per table.
        dense: the dense network (or tables, in the same order) that partial ``tables`` were restricted
            from; each result's ``dense_luts`` and the report's ``reduction`` then say what don't-cares saved.
        keep_dead: for a network, map and count the tables whose outputs reach no network output too (by
            default they are left out, as synthesis deletes them, and counted in each layer's ``dead``).
        effort: ``"fast"`` (one ABC run per table) or ``"floor"`` (many, the smallest checked netlist kept; see
            :func:`map_table`). The cache keeps the two apart; a floor takes 50-100x longer.

    Returns:
        A :class:`LutReport`: a :class:`MappedTable` per table, in order, per-layer and total counts.

    Example:
        >>> from iotable import Domain, IOTable
        >>> xor = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                     output_domain=Domain.uniform(1))
        >>> report = map_luts([xor, xor], progress=False)  # one distinct table, mapped once
        >>> report.distinct, [t.luts for t in report.tables]
        (1, [1, 1])
    """
    return _map_luts(
        tables,
        k=k,
        script=script,
        executor=executor,
        workers=workers,
        cache_dir=cache_dir,
        progress=progress,
        abc=abc,
        timeout=timeout,
        dense=dense,
        keep_dead=keep_dead,
        effort=effort,
        what="map_luts",
    )


def cost(
    net: TableNetwork,
    *,
    k: int = 6,
    script: str | None = None,
    executor: Any = None,
    workers: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    dense: Any = None,
    progress: bool | None = None,
    abc: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    keep_dead: bool = False,
    effort: str = "fast",
) -> LutReport:
    """Map every table of ``net`` onto k-input LUTs with ABC, each netlist checked on every row of its table.

    :func:`map_luts` on a network (see it for every option), reusing the results the network holds
    (``net.luts``, from an earlier call or a loaded bundle: only the tables whose results it lacks for this
    ``k``, script and ABC version are mapped). The network is a value and is not changed: the report's
    ``network`` is a copy of ``net`` holding every result, which :func:`iotable.save` stores in the bundle
    and whose ``cost`` maps nothing. With ``cache_dir``, a run that fails or is interrupted keeps what it
    mapped there.

    Tables whose outputs reach no network output (:func:`iotable.graph.liveness.liveness`) are neither mapped
    nor counted, as synthesis deletes them: each layer's ``dead`` and the summary's "dead: N tables" say how
    many; ``keep_dead=True`` maps and counts them too. ``effort="floor"`` maps each table several ways and
    keeps the smallest checked netlist (see :func:`map_table`).

    Returns:
        A :class:`LutReport`: per table layer the tables, their input bits, LogicNets' estimate, ABC's LUTs,
        the depth and the pipeline register bits after it; totals; ABC's version and the script; and
        ``network``, ``net`` with the results. Its ``summary()`` prints them.

    Raises:
        ABCNotInstalledError: no ABC program (install the Debian package ``berkeley-abc``).
        SynthError: ``net`` is not a network, a bad option, or a table without code outputs (raw values) or of
            over 24 bits.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), iotable.nn.Quantize(2))
        >>> with torch.no_grad():  # two different tables
        ...     _ = model[0].weight.copy_(torch.tensor([[1.0, 2.0], [-1.0, 1.0]]))
        ...     _ = model[0].bias.fill_(0.5)
        >>> net = iotable.precompute(model, input_domain=Domain.uniform(1))
        >>> report = cost(net, workers=1, progress=False)
        >>> report.distinct, len(report.network.luts), cost(report.network, workers=1).mapped
        (2, 2, 0)
    """
    if not isinstance(net, TableNetwork):
        msg = (
            f"cost: expected a TableNetwork (from iotable.precompute or iotable.load), received "
            f"{type(net).__name__}; map_luts maps tables given alone"
        )
        raise SynthError(msg)
    return _map_luts(
        net,
        k=k,
        script=script,
        executor=executor,
        workers=workers,
        cache_dir=cache_dir,
        progress=progress,
        abc=abc,
        timeout=timeout,
        dense=dense,
        keep_dead=keep_dead,
        effort=effort,
        what="cost",
    )


def _map_luts(
    tables: Any,
    *,
    k: int,
    script: str | None,
    executor: Any,
    workers: int | None,
    cache_dir: str | os.PathLike[str] | None,
    progress: bool | None,
    abc: str | os.PathLike[str] | None,
    timeout: float,
    dense: Any,
    keep_dead: bool,
    effort: str,
    what: str,
) -> LutReport:
    """:func:`map_luts`; for a network, the results it holds (``net.luts``) are read before the cache folder,
    and the report's ``network`` is the network holding them and every result checked or mapped here.
    ``what`` names the caller in errors."""
    start = time.perf_counter()
    k = check_k(k, what=what)
    keep_dead = check_keep_dead(keep_dead, what=what)
    network = tables if isinstance(tables, TableNetwork) else None
    live = None if network is None else liveness(network.graph)
    items, dense_functions = _live_items(tables, network, live, dense, keep_dead, what=what)
    functions = [bit_function(t, what=f"{what}: {table_name(t, i)}") for i, (t, _) in enumerate(items)]
    script = resolve_script(script, k, what=what)
    chosen = check_effort(effort, what=what)
    script, attempts = effort_flow(chosen, script, k)
    timeout = check_timeout(timeout, what=what)
    enabled = check_progress(progress, what=what)
    cache = Cache(cache_dir, what=what, held=network.luts if network is not None else None)
    program = find_abc(abc, what=what)
    version = abc_version(program)
    distinct, keys, dense_keys = _distinct(items, functions, dense_functions)
    results, pending = cached_results(distinct, cache, k, script, version, what=what)
    small = [(fn, name) for fn, name in pending if fn.input_bits <= k]  # no ABC: done here, at once
    large = [p for p in pending if p[0].input_bits > k]
    jobs, local = (
        batches(part, program=program, script=script, k=k, timeout=timeout, version=version, attempts=attempts)
        for part in (large, small)
    )
    with progress_bar(total=sum(job.rows for job in jobs + local), desc=what, enabled=enabled) as bar:
        for record in mapped_records(jobs, local, executor, workers, what=what, bar=bar):
            file = cache.name(record["key"], k, script, version)
            cache.save(file, record)
            fn = distinct[record["key"]][0]
            results[record["key"]] = from_record(record, LutNetlist.from_blif(record["blif"]), cached=False, fn=fn)
            cache.keep(file, record, results[record["key"]].netlist)
    mapped = [results[key] for key in keys]
    if dense is not None:
        mapped = [
            with_dense(m, results[d], fn, table_name(t, i))
            for i, (m, d, fn, (t, _)) in enumerate(zip(mapped, dense_keys, functions, items))
        ]
    arithmetic = map_arithmetic(
        network, k=k, cache=cache, program=program, version=version, timeout=timeout, keep_dead=keep_dead, what=what
    )
    return LutReport(
        tables=tuple(mapped),
        layers=layer_costs(
            mapped,
            [layer for _, layer in items],
            layer_registers(tables, None if keep_dead else live),
            None if network is None or live is None else _dead(network, live),
        ),
        k=k,
        script=script,
        abc_version=version,
        distinct=len(distinct),
        mapped=len(pending),
        cached=len(distinct) - len(pending),
        seconds=time.perf_counter() - start,
        network=None if network is None else dataclasses.replace(network, luts=LutResults(cache.memory.values())),
        keep_dead=keep_dead,
        arithmetic=arithmetic,
        effort=chosen.value,
    )


def _live_items(
    tables: Any, network: TableNetwork | None, live: Liveness | None, dense: Any, keep_dead: bool, *, what: str
) -> tuple[list[tuple[Any, Any]], list[BitFunction | None]]:
    """The ``(table, layer)`` items to map and their dense counterparts' functions: a network's live tables
    (every table with ``keep_dead``, and every table given alone)."""
    items = table_items(tables, what=what, argument="tables")
    kept = _kept(network, live, len(items), keep_dead)
    dense_functions = [f for f, keep in zip(_dense_functions(items, dense, what=what), kept) if keep]
    return [item for item, keep in zip(items, kept) if keep], dense_functions


def _kept(network: TableNetwork | None, live: Liveness | None, count: int, keep_dead: bool) -> list[bool]:
    """Which of a network's ``count`` tables (layer by layer, units in order) are mapped: the live ones, or all
    with ``keep_dead`` (and every table given alone)."""
    if network is None or live is None or keep_dead:
        return [True] * count
    units = live.layers(network.graph)
    return [
        bool(units[name][u]) if name in units else True
        for name, layer in network.layers.items()
        for u in range(len(layer.tables))
    ]


def _dead(network: TableNetwork, live: Liveness) -> dict[str, int]:
    """The dead tables of each of ``network``'s layers (a layer no table node applies has none)."""
    units = live.layers(network.graph)
    return {name: int((~units[name]).sum()) if name in units else 0 for name in network.layers}


def _dense_functions(items: list[tuple[Any, Any]], dense: Any, *, what: str) -> list[BitFunction | None]:
    """The bit functions of the dense tables partial ``items`` were restricted from (``None`` without)."""
    found: list[BitFunction | None] = [None] * len(items)
    if dense is None:
        return found
    pairs = table_items(dense, what=what, argument="dense")
    if len(pairs) != len(items):
        msg = f"{what}: dense holds {len(pairs)} table(s) for {len(items)}; pass the network they came from"
        raise SynthError(msg)
    for i, ((table, _), (given, _)) in enumerate(zip(items, pairs)):
        checked = check_dense(table, given, table_name(table, i), what=what)
        found[i] = bit_function(checked, what=what)
    return found


def _distinct(
    items: list[tuple[Any, Any]], functions: list[BitFunction], dense_functions: list[BitFunction | None]
) -> tuple[dict[str, tuple[BitFunction, str]], list[str], list[str]]:
    """Distinct functions by key, each with the first table that has it (named in any error); the key of
    every table, and of every dense counterpart."""
    distinct: dict[str, tuple[BitFunction, str]] = {}
    keys, dense_keys = [], []
    for i, ((table, _), fn, base) in enumerate(zip(items, functions, dense_functions)):
        keys.append(fn.key())
        distinct.setdefault(keys[-1], (fn, table_name(table, i)))
        if base is not None:
            dense_keys.append(base.key())
            distinct.setdefault(dense_keys[-1], (base, f"the dense counterpart of {table_name(table, i)}"))
    return distinct, keys, dense_keys
