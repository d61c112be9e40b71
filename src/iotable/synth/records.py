"""What a mapping reports: one table's :class:`MappedTable`, a layer's :class:`LayerCost` and the whole
:class:`LutReport` with its summary; and how they are built from the mapping records of :mod:`.jobs`.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..graph.liveness import Liveness
from ..lutcount import lut_estimate
from ..lutnet import BitFunction, LutNetlist, check_netlist
from ..network.network import TableNetwork, pipeline_registers

__all__ = [
    "ArithmeticCost",
    "LayerCost",
    "LutReport",
    "MappedTable",
    "arithmetic_lines",
    "from_record",
    "layer_costs",
    "layer_registers",
    "with_dense",
]


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
        strategy: with ``effort="floor"``, the attempt whose netlist was kept (``"<order> order: <script>"``,
            or ``"direct"``); ``None`` for a single mapping, and for a result loaded from a bundle (which stores
            the netlist and its flow, not the attempts).
        attempts: with ``effort="floor"``, the LUTs of every attempt whose netlist passed the check, in the
            order tried; ``()`` otherwise. :attr:`spread` sums them up.
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
    strategy: str | None = None
    attempts: tuple[int, ...] = ()
    netlist: LutNetlist = field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    @property
    def spread(self) -> tuple[int, float, int] | None:
        """The attempts' LUTs as ``(min, median, max)`` (``None`` without attempts): how much one mapping's
        count depends on the attempt."""
        if not self.attempts:
            return None
        return min(self.attempts), float(statistics.median(self.attempts)), max(self.attempts)

    @property
    def reduction(self) -> float | None:
        """``1 - luts / dense_luts``: the share of LUTs the don't-cares saved (``None`` without ``dense_luts``)."""
        if self.dense_luts is None:
            return None
        return 1.0 - self.luts / self.dense_luts if self.dense_luts else 0.0


@dataclass(frozen=True)
class LayerCost:
    """What one table layer costs: the one per-layer record of iotable. :func:`map_luts` / :func:`cost` give it
    with each layer's tables mapped by ABC, :func:`iotable.estimate` with the layer's tables as planned (before
    any row), and :func:`iotable.hdl.export` as ``Design.layers``, one per table node of the design with what
    its hardware instantiates.

    Attributes:
        name: the layer's name (its node's ``layer``; :attr:`layer` too).
        tables: the layer's tables, one per unit (:attr:`units` too).
        luts: the LUTs of its tables: ABC's mapped count in a :class:`LutReport`, LogicNets' estimate in an
            estimate (where nothing is mapped), each table counted once; in a design, the LUTs of all its table
            instances with mapped tables (each instance costs its table's), ``None`` with ``case`` tables.
        estimate: LogicNets' estimate of its tables (:func:`iotable.lutcount.lut_estimate`), each counted once.
        depth: the deepest table's LUTs on a path (``None`` when not mapped).
        dense_luts: LUTs of the dense tables partial ones were restricted from (``dense=``), else ``None``.
        input_bits: the distinct address bits of its tables.
        registers: the bits of a pipeline register after the layer (every output code, as
            ``iotable.hdl.export(pipeline=1)`` registers it; in a design, the register it has, 0 for none);
            ``None`` for tables given alone.
        rows: the rows of its tables together (``None`` when not known).
        output_bits: the widest table's code bits (``None`` when not known).
        node: in a design, the table node; module: its layer module; instances: its table instances (units
            times positions); distinct: the distinct table modules it instantiates (a table shared with an
            earlier layer counts there); table_bits: rows times code bits of those distinct tables (the memory
            they describe). ``None`` outside a design.
        dead: the layer's tables whose outputs reach no network output (:func:`iotable.graph.liveness.liveness`):
            left out of every count above unless ``keep_dead=True`` was asked; ``None`` when not known (tables
            given alone).
    """

    name: str
    tables: int
    luts: int | None
    estimate: int
    depth: int | None = None
    dense_luts: int | None = None
    input_bits: tuple[int, ...] = ()
    registers: int | None = None
    rows: int | None = None
    output_bits: int | None = None
    node: str | None = None
    module: str | None = None
    instances: int | None = None
    distinct: int | None = None
    table_bits: int | None = None
    dead: int | None = None

    @property
    def layer(self) -> str:
        """The layer's name (:attr:`name`)."""
        return self.name

    @property
    def units(self) -> int:
        """The layer's units, one table each (:attr:`tables`)."""
        return self.tables


@dataclass(frozen=True)
class ArithmeticCost:
    """What one arithmetic node (``sum``, ``argmax``, ``threshold``) costs: its adder tree, comparator tree or
    comparisons, per output a function of the codes it reads. :func:`iotable.estimate` gives it with the
    estimate alone, :func:`~iotable.synth.cost` with each output's logic mapped by ABC and checked.

    Attributes:
        node: the node's name.
        kind: ``"sum"``, ``"argmax"`` or ``"threshold"``.
        outputs: the outputs counted (the live ones, or all with ``keep_dead=True``); each is logic of its own.
        dead: the outputs that reach no network output (counted only with ``keep_dead=True``).
        input_bits: the most input bits one output reads.
        output_bits: the bits of an output code.
        estimate: the formulas' LUTs for the outputs counted (:mod:`iotable.lutcount`; docs/hardware.md, "The
            cost of arithmetic").
        luts: ABC's LUTs of the outputs counted (each output costs its function's netlist); ``None`` in an
            estimate.
        depth: the deepest output's LUTs on a path (``None`` in an estimate).
        distinct: the distinct functions among the outputs (each mapped once).
        cached: of those, the ones whose result was held or read from the cache (``None`` in an estimate).
    """

    node: str
    kind: str
    outputs: int
    dead: int
    input_bits: int
    output_bits: int
    estimate: int
    luts: int | None = None
    depth: int | None = None
    distinct: int = 0
    cached: int | None = None


def arithmetic_lines(costs: tuple[ArithmeticCost, ...], tables: int, k: int, *, mapped: bool) -> list[str]:
    """The lines a summary adds for arithmetic nodes: a table of them, then the tables' and the arithmetic's
    LUTs side by side (nothing without arithmetic nodes)."""
    if not costs:
        return []
    head = ["node", "kind", "outputs", "dead", "input bits", "output bits", "estimate", "LUTs", "depth"]
    if not mapped:
        head = head[:-2]
    cells = [head] + [
        [str(v) for v in (c.node, c.kind, c.outputs, c.dead, c.input_bits, c.output_bits, c.estimate)]
        + ([str(c.luts), str(c.depth)] if mapped else [])
        for c in costs
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    lines = [
        "  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells
    ]
    arithmetic = sum((c.luts if mapped else c.estimate) or 0 for c in costs)
    how = "ABC" if mapped else "estimate"
    lines.append(
        f"tables: {tables} LUT{k}, arithmetic: {arithmetic} LUT{k} ({how}), in all {tables + arithmetic} LUT{k}"
    )
    return lines


@dataclass(frozen=True)
class LutReport:
    """What :func:`map_luts` found: every table's :class:`MappedTable` (in the order given) and totals.

    ``layers`` holds per-layer totals where tables name their layer (a network's layers, or tables from
    :func:`iotable.precompute`). ``distinct`` counts distinct functions, ``mapped`` those ABC ran on in
    this call, ``cached`` those read from the cache; ``seconds`` is this call's wall time. ``network``, for a
    network mapped, is that network holding every result (``network.luts``; :func:`iotable.save` stores
    them); ``None`` for tables given alone. ``arithmetic`` holds an :class:`ArithmeticCost` per arithmetic
    node of a network (``sum``, ``argmax``, ``threshold``), mapped with :data:`~iotable.synth.ARITH_SCRIPT`;
    :attr:`luts` counts the tables alone, :attr:`arithmetic_luts` the arithmetic, :attr:`total_luts` both.
    ``effort`` is the mapping effort (``"fast"`` or ``"floor"``); with ``"floor"``, :attr:`spread` sums each
    table's attempts.
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
    keep_dead: bool = False
    arithmetic: tuple[ArithmeticCost, ...] = ()
    effort: str = "fast"

    @property
    def spread(self) -> tuple[int, float, int] | None:
        """Per table the min, median and max LUTs over its attempts, summed over the tables (``luts`` is the
        first where every table is a floor's); ``None`` unless every table has attempts (``effort="floor"``)."""
        spreads = [t.spread for t in self.tables]
        if not spreads or any(s is None for s in spreads):
            return None
        low, mid, high = zip(*spreads)  # type: ignore[misc]  # every one is a tuple here
        return sum(low), float(sum(mid)), sum(high)

    @property
    def arithmetic_luts(self) -> int:
        """ABC's LUTs of every arithmetic node's outputs (0 without arithmetic nodes)."""
        return sum(c.luts or 0 for c in self.arithmetic)

    @property
    def total_luts(self) -> int:
        """The tables' and the arithmetic's LUTs together."""
        return self.luts + self.arithmetic_luts

    @property
    def dead(self) -> int | None:
        """Tables of a network whose outputs reach no network output, in all (``None`` for tables given alone);
        left out of :attr:`tables` and every count unless ``keep_dead``."""
        known = [c.dead for c in self.layers.values() if c.dead is not None]
        return sum(known) if known else None

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
        dead = self.dead
        head = [
            "layer",
            "tables",
            "dead",
            "input bits",
            "estimate",
            "LUTs",
            "depth",
            "registers",
            "dense LUTs",
            "saved",
        ]
        hidden = {"dead"} if dead is None else set()
        hidden |= (set() if registers else {"registers"}) | (set() if dense else {"dense LUTs", "saved"})
        head = [h for h in head if h not in hidden]
        records: list[dict[str, Any]] = [
            {
                "layer": c.name,
                "tables": c.tables,
                "dead": c.dead,
                "input bits": "/".join(map(str, c.input_bits)),
                "estimate": c.estimate,
                "LUTs": c.luts,
                "depth": c.depth,
                "registers": c.registers,
                "dense LUTs": c.dense_luts,
                "saved": _percent(c.luts, c.dense_luts),
            }
            for c in self.layers.values()
        ]
        records.append(
            {
                "layer": "total",
                "tables": len(self.tables),
                "dead": dead,
                "input bits": "/".join(map(str, sorted({t.input_bits for t in self.tables}))),
                "estimate": self.estimate,
                "LUTs": self.luts,
                "depth": self.depth,
                "registers": self.registers,
                "dense LUTs": self.dense_luts,
                "saved": _percent(self.luts, self.dense_luts),
            }
        )
        cells = [head] + [[str(r[h]) for h in head] for r in records]
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
        spread = self.spread
        if spread is not None:
            lines.append(
                f"effort 'floor': each table mapped several ways (input orders x scripts), the smallest checked "
                f"netlist kept; LUTs over the attempts: min {spread[0]}, median {spread[1]:g}, max {spread[2]}."
            )
        if dead is not None:
            counted = "mapped and counted above (keep_dead=True)" if self.keep_dead else "not mapped nor counted"
            lines.append(f"dead: {dead} tables (their outputs reach no network output), {counted}.")
        lines += arithmetic_lines(self.arithmetic, self.luts, self.k, mapped=True)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _percent(luts: int | None, dense: int | None) -> str:
    return "" if not dense or luts is None else f"{100 * (1 - luts / dense):.1f}%"


# -- built from mapping records -------------------------------------------------------------------------------


def from_record(record: dict[str, Any], netlist: LutNetlist, *, cached: bool, fn: BitFunction) -> MappedTable:
    """The :class:`MappedTable` of a mapping record (as a job returns it or the cache holds it), its netlist
    already parsed and checked; ``fn`` is the table's function (it says whether there were don't-cares)."""
    return MappedTable(
        luts=netlist.luts,
        depth=netlist.depth,
        estimate=int(lut_estimate(fn.input_bits, fn.output_bits, k=record["k"])),  # the table's bits, not the record's
        input_bits=fn.input_bits,
        output_bits=fn.output_bits,
        k=record["k"],
        script=record["script"],
        abc_version=record["abc_version"],
        seconds=float(record["seconds"]),
        key=record["key"],
        method=record["method"],
        cached=cached,
        completion="none" if fn.care is None or len(fn.care) == fn.space else "filled",
        strategy=record.get("strategy"),
        attempts=tuple(record.get("attempts", ())),
        netlist=netlist,
    )


def with_dense(mapped: MappedTable, dense: MappedTable, fn: BitFunction, name: str) -> MappedTable:
    """``mapped`` with ``dense_luts``; the dense table's netlist instead when it is smaller (it computes the
    table on every care row too: checked again here)."""
    if dense.luts >= mapped.luts or dense.key == mapped.key:
        return dataclasses.replace(mapped, dense_luts=dense.luts)
    check_netlist(dense.netlist, fn, name=name, k=mapped.k)
    return dataclasses.replace(
        mapped,
        luts=dense.luts,
        depth=dense.depth,
        netlist=dense.netlist,
        dense_luts=dense.luts,
        completion="dense",
        strategy=dense.strategy,
        attempts=dense.attempts,
    )


def layer_registers(tables: Any, live: Liveness | None = None) -> dict[str, int | None]:
    """Pipeline register bits after each layer of a network (``None`` for raw outputs); ``{}`` otherwise. With
    ``live``, the bits of the live codes only."""
    if not isinstance(tables, TableNetwork):
        return {}
    found: dict[str, int | None] = {}
    for node in tables.graph.table_nodes():
        mask = None if live is None else live.elements[node.name]
        layer, bits = node.meta.layer, pipeline_registers(node, mask)  # type: ignore[attr-defined]  # a table node's
        held = found.get(layer, 0)
        found[layer] = None if bits is None or held is None else held + bits
    return found


def layer_costs(
    mapped: list[MappedTable],
    layers: list[str | None],
    registers: dict[str, int | None],
    dead: dict[str, int] | None = None,
) -> dict[str, LayerCost]:
    """Per-layer totals of ``mapped`` (each result with its table's layer; ``None``: a table given alone, in
    no layer), the pipeline register bits after each layer (:func:`layer_registers`) and, for a network, the
    dead tables of each layer (left out of ``mapped``; a layer of dead tables alone is listed with none)."""
    totals: dict[str, list[MappedTable]] = {}
    for result, layer in zip(mapped, layers):
        if layer is not None:
            totals.setdefault(layer, []).append(result)
    if dead is not None:
        empty = {
            name: LayerCost(name, 0, 0, 0, depth=0, registers=registers.get(name), dead=n) for name, n in dead.items()
        }
        costs = {**empty, **layer_costs(mapped, layers, registers)}
        return {name: dataclasses.replace(costs[name], dead=dead[name]) for name in dead}
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
