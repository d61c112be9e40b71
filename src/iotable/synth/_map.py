"""Tables mapped onto k-input LUTs by ABC: one table (:func:`map_table`) or many (:func:`map_luts`).

A table becomes its function on bits (:mod:`._function`), don't-cares spent, written as BLIF, mapped by ABC
with a pinned script, and the LUT netlist ABC writes is read back and evaluated on every row of the table
(its care rows for a partial one): a netlist that differs raises :class:`NetlistMismatchError`. Many tables
are mapped once per distinct function, in parallel (a process pool, any ``concurrent.futures.Executor`` or a
``dask.distributed.Client``), and every result is cached on disk as JSON under a key made of the function,
``k``, the script and ABC's version, so that a rerun, or a run after an interruption, maps only what is
missing. Cached netlists are checked against their tables again when they are read.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import json
import math
import multiprocessing
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._util.files import atomic_write
from .._util.progress import progress_bar
from ..errors import CacheError, IOTableError, NetlistMismatchError, SynthError
from ..graph.graph import NodeKind
from ..lutcount import check_k, lut_estimate
from ..lutnet import (
    RECORD_FORMAT,
    BitFunction,
    LutNetlist,
    LutResult,
    LutResults,
    bit_function,
    check_netlist,
    result_name,
)
from ..network.network import TableNetwork, pipeline_registers
from ..table import IOTable
from ._abc import abc_version, find_abc, resolve_script, run_abc
from ._function import blif_text, direct_blif, fill_dont_cares

__all__ = ["LayerCost", "LutReport", "MappedTable", "cost", "map_luts", "map_table"]

_FORMAT = RECORD_FORMAT  # of the cache's JSON records
_DEFAULT_TIMEOUT = 600.0


@dataclass(frozen=True)
class MappedTable:
    """One table mapped onto k-input LUTs by ABC, its netlist checked against the table.

    Attributes:
        luts: LUTs of the mapped netlist (nodes that read a signal; wires and constants are free).
        depth: LUTs on the longest input-to-output path.
        estimate: LogicNets' analytic estimate for the same address and code bits (:func:`lut_estimate`).
        input_bits: address bits (each input code a field of :func:`iotable.bits.width` bits).
        output_bits: code bits of all outputs.
        k: LUT inputs the script mapped to.
        script: the ABC commands run between reading the table and writing the netlist.
        abc_version: the version line of the ABC program that mapped it.
        seconds: ABC's wall time for this function (when it was mapped, for a cached result).
        key: the content hash of the mapped function (equal tables share it and are mapped once).
        method: ``"abc"``, or ``"direct"`` for a table of at most k address bits: each output bit is one LUT
            over the bits it depends on (or a constant, or a wire), written without running ABC.
        cached: whether this result was read from the cache instead of running ABC.
        dense_luts: LUTs of the dense table this (partial) one was restricted from, when it was given
            (``dense=``); ``None`` otherwise.
        completion: how the mapped function fills the table's don't-cares: ``"none"`` (the table has none),
            ``"filled"`` (iotable's fill, see docs/hardware.md), or ``"dense"`` (with ``dense=``: the dense
            table is a completion too, and its netlist had fewer LUTs, so it was kept, checked on this
            table's rows).
        netlist: the LUT netlist (:class:`LutNetlist`, with ABC's BLIF text in ``netlist.blif``).
    """

    luts: int
    depth: int
    estimate: int
    input_bits: int
    output_bits: int
    k: int
    script: str
    abc_version: str
    seconds: float
    key: str
    method: str = "abc"
    cached: bool = False
    dense_luts: int | None = None
    completion: str = "none"
    netlist: LutNetlist = field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    @property
    def reduction(self) -> float | None:
        """``1 - luts / dense_luts``: the share of LUTs the don't-cares saved (``None`` without ``dense_luts``)."""
        if self.dense_luts is None:
            return None
        return 1.0 - self.luts / self.dense_luts if self.dense_luts else 0.0


@dataclass(frozen=True)
class LayerCost:
    """What one table layer costs: the one per-layer record of :func:`map_luts` / :func:`cost` (each layer's
    tables mapped by ABC) and of :func:`iotable.estimate` (the layer's tables as planned, before any row).

    Attributes:
        name: the layer's name (its node; :attr:`layer` too).
        tables: the layer's tables, one per unit (:attr:`units` too).
        luts: the LUTs of its tables: ABC's mapped count in a :class:`LutReport`, LogicNets' estimate in an
            estimate (where nothing is mapped), each table counted once.
        estimate: LogicNets' estimate of its tables (:func:`iotable.lutcount.lut_estimate`).
        depth: the deepest table's LUTs on a path (``None`` when not mapped).
        dense_luts: LUTs of the dense tables partial ones were restricted from (``dense=``), else ``None``.
        input_bits: the distinct address bits of its tables.
        registers: the bits of a pipeline register after the layer (every output code, as
            ``iotable.hdl.export(pipeline=1)`` registers it); ``None`` for tables given alone.
        rows: the rows of its tables together (``None`` when not known).
        output_bits: the widest table's code bits (``None`` when not known).
    """

    name: str
    tables: int
    luts: int
    estimate: int
    depth: int | None = None
    dense_luts: int | None = None
    input_bits: tuple[int, ...] = ()
    registers: int | None = None
    rows: int | None = None
    output_bits: int | None = None

    @property
    def layer(self) -> str:
        """The layer's name (:attr:`name`)."""
        return self.name

    @property
    def units(self) -> int:
        """The layer's units, one table each (:attr:`tables`)."""
        return self.tables


@dataclass(frozen=True)
class LutReport:
    """What :func:`map_luts` found: every table's :class:`MappedTable` (in the order given) and totals.

    ``layers`` holds per-layer totals where tables name their layer (a network's layers, or tables from
    :func:`iotable.precompute`). ``distinct`` counts distinct functions, ``mapped`` those ABC ran on in
    this call, ``cached`` those read from the cache; ``seconds`` is this call's wall time. ``network``, for a
    network mapped, is that network holding every result (``network.luts``; :func:`iotable.save` stores
    them); ``None`` for tables given alone.
    """

    tables: tuple[MappedTable, ...]
    layers: dict[str, LayerCost]
    k: int
    script: str
    abc_version: str
    distinct: int
    mapped: int
    cached: int
    seconds: float
    network: TableNetwork | None = field(default=None, repr=False, compare=False)

    @property
    def luts(self) -> int:
        """LUTs of all tables (a table that occurs twice in the network costs twice)."""
        return sum(t.luts for t in self.tables)

    @property
    def estimate(self) -> int:
        """LogicNets' estimate of all tables."""
        return sum(t.estimate for t in self.tables)

    @property
    def depth(self) -> int:
        """The deepest table's depth in LUTs."""
        return max((t.depth for t in self.tables), default=0)

    @property
    def registers(self) -> int | None:
        """Pipeline register bits after every layer, in all (``None`` unless every layer's is known)."""
        known = [c.registers for c in self.layers.values()]
        return sum(r or 0 for r in known) if known and None not in known else None

    @property
    def dense_luts(self) -> int | None:
        """LUTs of the dense tables the partial ones came from (``dense=``), else ``None``."""
        if any(t.dense_luts is None for t in self.tables):
            return None
        return sum(t.dense_luts or 0 for t in self.tables)

    @property
    def reduction(self) -> float | None:
        """``1 - luts / dense_luts`` over all tables, or ``None`` without ``dense=``."""
        dense = self.dense_luts
        return None if dense is None else (1.0 - self.luts / dense if dense else 0.0)

    def summary(self) -> str:
        """A plain-text table: per layer and in total, tables, input bits, estimate, LUTs, depth, pipeline
        registers (for a network) and dense LUTs (with ``dense=``); then the flow and what the counts mean."""
        dense = self.dense_luts is not None
        registers = self.registers is not None
        head = ["layer", "tables", "input bits", "estimate", "LUTs", "depth"]
        head += (["registers"] if registers else []) + (["dense LUTs", "saved"] if dense else [])
        rows: list[list[Any]] = [
            [c.name, c.tables, "/".join(map(str, c.input_bits)), c.estimate, c.luts, c.depth]
            + ([c.registers] if registers else [])
            + ([c.dense_luts, _percent(c.luts, c.dense_luts)] if dense else [])
            for c in self.layers.values()
        ]
        bits = "/".join(map(str, sorted({t.input_bits for t in self.tables})))
        rows.append(
            ["total", len(self.tables), bits, self.estimate, self.luts, self.depth]
            + ([self.registers] if registers else [])
            + ([self.dense_luts, _percent(self.luts, self.dense_luts)] if dense else [])
        )
        cells = [[str(v) for v in row] for row in [head, *rows]]
        widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
        lines = [
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells
        ]
        lines.append(
            f"k={self.k}, ABC script {self.script!r}, {self.abc_version}; {self.distinct} distinct table(s), "
            f"{self.mapped} mapped, {self.cached} from the cache, {self.seconds:.1f} s."
        )
        lines.append(
            "Open-tool counts are estimates tied to this pinned flow (the script and ABC version above), not a "
            "vendor tool's placement; each table is counted once (registers: every output code of a layer)."
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _percent(luts: int, dense: int | None) -> str:
    return "" if not dense else f"{100 * (1 - luts / dense):.1f}%"


# -- one function, in whichever process runs it ----------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """Everything a worker needs to map some functions in one ABC run (picklable: arrays and strings)."""

    functions: tuple[BitFunction, ...]
    names: tuple[str, ...]
    program: str
    script: str
    k: int
    timeout: float
    version: str

    @property
    def rows(self) -> int:
        return sum(fn.space for fn in self.functions)


def _run_job(job: _Job) -> list[dict[str, Any]]:
    """Map ``job``'s functions with ABC, check each netlist on every care row, and return the cache records."""
    texts: list[tuple[str, float, str] | None] = []
    blifs, names = [], []
    for fn, name in zip(job.functions, job.names):
        values, care = fn.truth()
        if not care.all():
            values = fill_dont_cares(values, care)
        if fn.input_bits <= job.k:  # one LUT per output bit at most: no mapper needed
            texts.append((direct_blif(fn, values), 0.0, "direct"))
            continue
        texts.append(None)
        blifs.append(blif_text(fn, values))
        names.append(name)
    mapped = iter(run_abc(job.program, blifs, job.script, timeout=job.timeout, names=names) if blifs else [])
    records = []
    for fn, name, direct in zip(job.functions, job.names, texts):
        text, seconds, method = direct if direct is not None else (*next(mapped), "abc")
        netlist = LutNetlist.from_blif(text, what=f"{name}: ABC's netlist")
        check_netlist(netlist, fn, name=name, k=job.k)
        records.append(
            {
                "format": _FORMAT,
                "key": fn.key(),
                "k": job.k,
                "script": job.script,
                "abc_version": job.version,
                "input_bits": fn.input_bits,
                "output_bits": fn.output_bits,
                "method": method,
                "luts": netlist.luts,
                "depth": netlist.depth,
                "seconds": round(seconds, 4),
                "blif": text,
            }
        )
    return records


# ABC runs share one session up to this many rows, or this many tables (the start-up is ~0.07 s).
_BATCH_ROWS = 2**14
_BATCH_TABLES = 64


def _batches(
    pending: list[tuple[BitFunction, str]], *, program: str, script: str, k: int, timeout: float, version: str
) -> list[_Job]:
    """Jobs of one or more functions, the largest first (the pool's tail stays short)."""
    pending = sorted(pending, key=lambda item: -item[0].input_bits)
    jobs: list[_Job] = []
    group: list[tuple[BitFunction, str]] = []

    def flush() -> None:
        if group:
            functions, names = zip(*group)
            jobs.append(_Job(tuple(functions), tuple(names), program, script, k, timeout, version))
            group.clear()

    for fn, name in pending:
        if group and (sum(f.space for f, _ in group) + fn.space > _BATCH_ROWS or len(group) >= _BATCH_TABLES):
            flush()
        group.append((fn, name))
    flush()
    return jobs


def _result(record: dict[str, Any], netlist: LutNetlist, *, cached: bool, fn: BitFunction) -> MappedTable:
    return MappedTable(
        luts=netlist.luts,
        depth=netlist.depth,
        estimate=int(lut_estimate(record["input_bits"], record["output_bits"], k=record["k"])),
        input_bits=record["input_bits"],
        output_bits=record["output_bits"],
        k=record["k"],
        script=record["script"],
        abc_version=record["abc_version"],
        seconds=float(record["seconds"]),
        key=record["key"],
        method=record["method"],
        cached=cached,
        completion="none" if fn.care is None or len(fn.care) == fn.space else "filled",
        netlist=netlist,
    )


def _with_dense(mapped: MappedTable, dense: MappedTable, fn: BitFunction, name: str) -> MappedTable:
    """``mapped`` with ``dense_luts``; the dense table's netlist instead when it is smaller (it computes the
    table on every care row too: checked again here)."""
    if dense.luts >= mapped.luts or dense.key == mapped.key:
        return dataclasses.replace(mapped, dense_luts=dense.luts)
    check_netlist(dense.netlist, fn, name=name, k=mapped.k)
    return dataclasses.replace(
        mapped, luts=dense.luts, depth=dense.depth, netlist=dense.netlist, dense_luts=dense.luts, completion="dense"
    )


# -- validation ---------------------------------------------------------------------------------------------


def _timeout(timeout: Any, *, what: str) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        msg = f"{what}: timeout must be a positive number of seconds, received {timeout!r}"
        raise SynthError(msg)
    return float(timeout)


def _name(table: IOTable, index: int | None) -> str:
    where = f"table {index} " if index is not None else ""
    return f"{where}{table!r}"


def _items(tables: Any, *, what: str, argument: str) -> list[tuple[IOTable, str | None]]:
    """``(table, layer name)`` for a network (its layers), a layer (``.tables``), a table or IOTables."""
    if isinstance(tables, IOTable):
        return [(tables, tables.layer)]
    layers = getattr(tables, "layers", None)
    if isinstance(layers, Mapping) and all(hasattr(layer, "tables") for layer in layers.values()):
        return [(t, str(name)) for name, layer in layers.items() for t in layer.tables]
    source = getattr(tables, "tables", tables)
    if isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
        kind = type(tables).__name__
        msg = f"{what}: {argument} must be a TableNetwork, a layer's tables or IOTables, received {kind}"
        raise SynthError(msg)
    items = list(source)
    for i, table in enumerate(items):
        if not isinstance(table, IOTable):
            msg = f"{what}: {argument} item {i} is a {type(table).__name__}; expected IOTables"
            raise SynthError(msg)
    return [(t, t.layer) for t in items]


def _check_dense(table: IOTable, dense: Any, name: str, *, what: str) -> IOTable:
    if not isinstance(dense, IOTable) or not dense.is_dense:
        msg = f"{what}: the dense counterpart of {name} must be a dense IOTable, received {dense!r}"
        raise SynthError(msg)
    if dense.input_domains != table.input_domains or dense.output_domain != table.output_domain:
        msg = (
            f"{what}: the dense counterpart {dense!r} of {name} has other domains; pass the dense network (or "
            "tables) the partial one was restricted from"
        )
        raise SynthError(msg)
    return dense


def _check_progress(progress: Any, *, what: str) -> bool | None:
    if progress is not None and not isinstance(progress, bool):
        msg = f"{what}: progress must be None (a bar for long runs in a terminal), True or False, received {progress!r}"
        raise SynthError(msg)
    return progress


# -- one table ------------------------------------------------------------------------------------------------


def map_table(
    table: IOTable,
    *,
    k: int = 6,
    script: str | None = None,
    abc: str | os.PathLike[str] | None = None,
    timeout: float = _DEFAULT_TIMEOUT,
    dense: IOTable | None = None,
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
    name = _name(table, None)
    dense_fn = bit_function(_check_dense(table, dense, name, what=what), what=what) if dense is not None else None
    script = resolve_script(script, k, what=what)
    timeout = _timeout(timeout, what=what)
    program = find_abc(abc, what=what)
    version = abc_version(program)
    (record,) = _run_job(_Job((fn,), (name,), program, script, k, timeout, version))
    mapped = _result(record, LutNetlist.from_blif(record["blif"]), cached=False, fn=fn)
    if dense_fn is not None:
        base_name = f"the dense counterpart of {name}"
        (base,) = _run_job(_Job((dense_fn,), (base_name,), program, script, k, timeout, version))
        dense_mapped = _result(base, LutNetlist.from_blif(base["blif"]), cached=False, fn=dense_fn)
        mapped = _with_dense(mapped, dense_mapped, fn, name)
    return mapped


# -- many tables ----------------------------------------------------------------------------------------------


class _Cache:
    """JSON records of mapped functions in one folder, one file per (function, k, script, ABC version), and
    in memory: ``memory`` maps each file name to its checked :class:`~iotable.lutnet.LutResult`, first those
    a network holds (``net.luts``, see :func:`cost`; read before the folder), then every result checked or
    mapped here."""

    def __init__(self, folder: Any, *, what: str, held: Mapping[str, LutResult] | None = None) -> None:
        self.what = what
        self.memory: dict[str, LutResult] = dict(held or {})
        self.folder: Path | None = None
        if folder is None:
            return
        if not isinstance(folder, (str, os.PathLike)) or "\0" in os.fspath(folder):
            msg = f"{what}: cache_dir must be a folder path (str or os.PathLike), received {folder!r}"
            raise SynthError(msg)
        path = Path(folder)
        try:
            if path.exists() and not path.is_dir():
                msg = f"{what}: cache_dir {str(path)!r} exists and is not a folder; pass a folder for the cache"
                raise CacheError(msg)
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"{what}: cannot use cache_dir {str(path)!r}: {exc.strerror or exc}; pass a writable folder"
            raise CacheError(msg) from None
        self.folder = path

    @staticmethod
    def name(key: str, k: int, script: str, version: str) -> str:
        return result_name(key, k, script, version)

    def load(self, file: str) -> dict[str, Any] | None:
        if self.folder is None or not (self.folder / file).exists():
            return None
        path = self.folder / file
        try:
            record = json.loads(path.read_text())
            ok = isinstance(record, dict) and record.get("format") == _FORMAT
            ok = ok and all(isinstance(record.get(f), int) for f in ("k", "input_bits", "output_bits", "luts"))
            ok = ok and all(isinstance(record.get(f), str) for f in ("key", "script", "abc_version", "blif", "method"))
        except (OSError, ValueError):
            ok = False
        if not ok:
            msg = f"{self.what}: the cache file {str(path)!r} is unreadable or not a mapping record; delete it, rerun"
            raise CacheError(msg)
        return record

    def keep(self, file: str, record: dict[str, Any], netlist: LutNetlist) -> None:
        """Hold a checked result in memory (from the record as the cache file holds it, and its parsed netlist)."""
        self.memory[file] = LutResult.from_record(record, netlist)

    def save(self, file: str, record: dict[str, Any]) -> None:
        if self.folder is None:
            return
        path = self.folder / file
        try:
            atomic_write(path, json.dumps(record, indent=1).encode())
        except OSError as exc:
            reason = exc.strerror or exc
            msg = f"{self.what}: cannot write the cache file {str(path)!r}: {reason}; free space or move cache_dir"
            raise CacheError(msg) from None


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _submitter(executor: Any, workers: Any, jobs: int, *, what: str) -> tuple[Any, bool]:
    """``(executor or None for in-process, whether we own it)`` from the user's ``executor``/``workers``."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        msg = f"{what}: workers must be a positive integer, received {workers!r}"
        raise SynthError(msg)
    if executor is None:
        count = min(workers if workers is not None else _available_cores(), jobs)
        if count <= 1:
            return None, False
        # spawn, not fork: the parent holds torch's threads, and a forked copy of them can deadlock.
        context = multiprocessing.get_context("spawn")
        return concurrent.futures.ProcessPoolExecutor(max_workers=count, mp_context=context), True
    if workers is not None:
        msg = f"{what}: give workers= or executor=, not both (the executor decides its own workers)"
        raise SynthError(msg)
    if isinstance(executor, concurrent.futures.Executor):
        return executor, False
    if type(executor).__module__.split(".")[0] == "distributed" and hasattr(executor, "get_executor"):
        return executor.get_executor(pure=False), False  # a dask.distributed.Client, seen as an Executor
    msg = (
        f"{what}: executor must be a concurrent.futures.Executor or a dask.distributed.Client, received "
        f"{type(executor).__name__}"
    )
    raise SynthError(msg)


def _results(pool: Any, jobs: list[_Job]) -> Iterator[tuple[_Job, list[dict[str, Any]]]]:
    """Each job with its records, as they finish; in this process when ``pool`` is ``None``."""
    if pool is None:
        for job in jobs:
            yield job, _run_job(job)
        return
    futures = {pool.submit(_run_job, job): job for job in jobs}
    try:
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()
    finally:
        for future in futures:
            future.cancel()


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
    timeout: float = _DEFAULT_TIMEOUT,
    dense: Any = None,
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
    timeout: float = _DEFAULT_TIMEOUT,
) -> LutReport:
    """Map every table of ``net`` onto k-input LUTs with ABC, each netlist checked on every row of its table.

    :func:`map_luts` on a network (see it for every option), reusing the results the network holds
    (``net.luts``, from an earlier call or a loaded bundle: only the tables whose results it lacks for this
    ``k``, script and ABC version are mapped). The network is a value and is not changed: the report's
    ``network`` is a copy of ``net`` holding every result, which :func:`iotable.save` stores in the bundle
    and whose ``cost`` maps nothing. With ``cache_dir``, a run that fails or is interrupted keeps what it
    mapped there.

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
    what: str,
) -> LutReport:
    """:func:`map_luts`; for a network, the results it holds (``net.luts``) are read before the cache folder,
    and the report's ``network`` is the network holding them and every result checked or mapped here.
    ``what`` names the caller in errors."""
    start = time.perf_counter()
    k = check_k(k, what=what)
    items = _items(tables, what=what, argument="tables")
    functions = [bit_function(t, what=f"{what}: {_name(t, i)}") for i, (t, _) in enumerate(items)]
    dense_functions = _dense_functions(items, dense, what=what)
    script = resolve_script(script, k, what=what)
    timeout = _timeout(timeout, what=what)
    enabled = _check_progress(progress, what=what)
    network = tables if isinstance(tables, TableNetwork) else None
    cache = _Cache(cache_dir, what=what, held=network.luts if network is not None else None)
    program = find_abc(abc, what=what)
    version = abc_version(program)
    distinct, keys, dense_keys = _distinct(items, functions, dense_functions)
    results, pending = _cached(distinct, cache, k, script, version, what=what)
    small = [(fn, name) for fn, name in pending if fn.input_bits <= k]  # no ABC: done here, at once
    large = [p for p in pending if p[0].input_bits > k]
    jobs, local = (
        _batches(part, program=program, script=script, k=k, timeout=timeout, version=version) for part in (large, small)
    )
    with progress_bar(total=sum(job.rows for job in jobs + local), desc=what, enabled=enabled) as bar:
        for record in _mapped_records(jobs, local, executor, workers, what=what, bar=bar):
            file = cache.name(record["key"], k, script, version)
            cache.save(file, record)
            fn = distinct[record["key"]][0]
            results[record["key"]] = _result(record, LutNetlist.from_blif(record["blif"]), cached=False, fn=fn)
            cache.keep(file, record, results[record["key"]].netlist)
    mapped = [results[key] for key in keys]
    if dense is not None:
        mapped = [
            _with_dense(m, results[d], fn, _name(t, i))
            for i, (m, d, fn, (t, _)) in enumerate(zip(mapped, dense_keys, functions, items))
        ]
    return LutReport(
        tables=tuple(mapped),
        layers=_layers(mapped, [layer for _, layer in items], _registers(tables)),
        k=k,
        script=script,
        abc_version=version,
        distinct=len(distinct),
        mapped=len(pending),
        cached=len(distinct) - len(pending),
        seconds=time.perf_counter() - start,
        network=None if network is None else dataclasses.replace(network, luts=LutResults(cache.memory.values())),
    )


def _dense_functions(items: list[tuple[Any, Any]], dense: Any, *, what: str) -> list[BitFunction | None]:
    """The bit functions of the dense tables partial ``items`` were restricted from (``None`` without)."""
    found: list[BitFunction | None] = [None] * len(items)
    if dense is None:
        return found
    pairs = _items(dense, what=what, argument="dense")
    if len(pairs) != len(items):
        msg = f"{what}: dense holds {len(pairs)} table(s) for {len(items)}; pass the network they came from"
        raise SynthError(msg)
    for i, ((table, _), (given, _)) in enumerate(zip(items, pairs)):
        checked = _check_dense(table, given, _name(table, i), what=what)
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
        distinct.setdefault(keys[-1], (fn, _name(table, i)))
        if base is not None:
            dense_keys.append(base.key())
            distinct.setdefault(dense_keys[-1], (base, f"the dense counterpart of {_name(table, i)}"))
    return distinct, keys, dense_keys


def _cached(
    distinct: dict[str, tuple[BitFunction, str]], cache: Any, k: int, script: str, version: str, *, what: str
) -> tuple[dict[str, MappedTable], list[tuple[BitFunction, str]]]:
    """The results the cache holds (checked as read), and the functions still to map."""
    results: dict[str, MappedTable] = {}
    pending = []
    for key, (fn, name) in distinct.items():
        file = cache.name(key, k, script, version)
        if file in cache.memory:  # checked when it was mapped, read from the cache or loaded from a bundle
            held = cache.memory[file]
            results[key] = _result(held.record(), held.netlist, cached=True, fn=fn)
            continue
        record = cache.load(file)
        if record is None:
            pending.append((fn, name))
            continue
        results[key] = _from_cache(record, fn, name, k, cache, file, what=what)
        cache.keep(file, record, results[key].netlist)
    return results, pending


def _mapped_records(
    jobs: list[Any], local: list[Any], executor: Any, workers: int | None, *, what: str, bar: Any
) -> Iterator[dict[str, Any]]:
    """Every record of ``local`` jobs (run here) and ``jobs`` (on the executor), as each job finishes; a
    failure outside iotable is a :class:`SynthError` that says where (results so far are cached)."""
    pool, owned = _submitter(executor, workers, len(jobs), what=what) if jobs else (None, False)
    try:
        done = itertools.chain(((job, _run_job(job)) for job in local), _results(pool, jobs))
        for job, records in done:
            yield from records
            bar.update(job.rows)
    except IOTableError:
        raise
    except Exception as exc:  # a worker or the cluster failed outside iotable: say where
        msg = f"{what}: mapping failed in the executor ({type(exc).__name__}: {exc}); results so far are cached"
        if isinstance(exc, concurrent.futures.process.BrokenProcessPool):
            msg += (
                ". The default pool starts fresh Python processes (spawn): a script that calls map_luts must guard "
                "its main code with `if __name__ == '__main__':`"
            )
        raise SynthError(msg) from exc
    finally:
        if owned and pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _from_cache(
    record: dict[str, Any], fn: BitFunction, name: str, k: int, cache: _Cache, file: str, *, what: str
) -> MappedTable:
    """A cached record as a result, after checking its netlist against the table like a fresh one."""
    where = f"the cache file {str(cache.folder / file) if cache.folder else file!r}"
    try:
        netlist = LutNetlist.from_blif(record["blif"], what=f"{what}: {where}")
        check_netlist(netlist, fn, name=f"{name} (from {where}; delete it and rerun)", k=k)
    except SynthError as exc:
        raise CacheError(f"{exc}; delete it and rerun") from None
    except NetlistMismatchError:
        raise
    return _result(record, netlist, cached=True, fn=fn)


def _registers(tables: Any) -> dict[str, int | None]:
    """Pipeline register bits after each layer of a network (``None`` for raw outputs); ``{}`` otherwise."""
    if not isinstance(tables, TableNetwork):
        return {}
    found: dict[str, int | None] = {}
    for node in tables.graph.nodes_of(NodeKind.TABLE):
        layer, bits = node.meta.layer, pipeline_registers(node)  # type: ignore[attr-defined]  # a table node's
        held = found.get(layer, 0)
        found[layer] = None if bits is None or held is None else held + bits
    return found


def _layers(
    mapped: list[MappedTable], layers: list[str | None], registers: dict[str, int | None]
) -> dict[str, LayerCost]:
    totals: dict[str, list[MappedTable]] = {}
    for result, layer in zip(mapped, layers):
        if layer is not None:
            totals.setdefault(layer, []).append(result)
    return {
        name: LayerCost(
            name=name,
            tables=len(group),
            luts=sum(m.luts for m in group),
            output_bits=max(m.output_bits for m in group),
            estimate=sum(m.estimate for m in group),
            depth=max(m.depth for m in group),
            dense_luts=None if any(m.dense_luts is None for m in group) else sum(m.dense_luts or 0 for m in group),
            input_bits=tuple(sorted({m.input_bits for m in group})),
            registers=registers.get(name),
        )
        for name, group in totals.items()
    }
