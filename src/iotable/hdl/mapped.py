"""One IOTable as its mapped LUT netlist, in no language: the same ports as the ``case`` module, LUTs inside.

:func:`lut_body` turns the netlist :func:`iotable.synth.map_table` (or :func:`~iotable.synth.map_luts`) found
for a table into what a printer writes (:func:`~iotable.hdl.mapped_verilog`, :func:`~iotable.hdl.mapped_vhdl`):
a module whose ports, widths and bit packing are exactly those of the table's ``case`` module (``address``: the
input codes, first input most significant; ``codes``: the output codes, first output most significant), so that
the table's benches and the layer modules that instantiate it do not change.

The body is a generic, vendor-neutral LUT per netlist node, in the netlist's topological order (a
:class:`Cell`): a constant INIT mask and a signal ``n<k>`` that selects its bit by the LUT's inputs. A LUT's
inputs are listed most significant first in the select: its first netlist input (``I0``) is the least
significant, and bit ``i`` of ``INIT`` is its output where its inputs, read as that binary number, equal
``i``. Wires (buffers) and constants are plain assignments. The netlist names address bits ``x<input>_<bit>``
and code bits ``y<output>_<bit>`` (``<bit>`` 0 the least significant bit of the code,
:meth:`iotable.lutnet.BitFunction.input_names`): ``x<j>_<b>`` is bit ``offset_j + b`` of ``address`` and
``y<j>_<b>`` bit ``offset_j + b`` of ``codes``, offsets from :class:`~iotable.hdl.TableLayout`.

Don't-cares: a mapped netlist drives *some* value on rows a partial table lacks and on bit patterns that are
no code (the mapper chose them to save LUTs); the exhaustive bench of a table checks the rows it holds only.

:func:`map_modules` maps every distinct table module of an export's netlist (each distinct function once,
through :func:`~iotable.synth.map_luts`), after refusing, by name, tables too wide to map.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import HDLError, OptionError
from ..table import IOTable
from .table import TableLayout, header_lines, layout_of

__all__ = [
    "Cell",
    "CellKind",
    "LutBody",
    "Source",
    "Tables",
    "check_mapped_options",
    "layer_luts",
    "lut_body",
    "lut_init",
    "map_modules",
    "staged",
    "stages_of",
    "table_latency",
]


class Tables(str, enum.Enum):
    """How a design writes its table modules: a ``case`` over the rows, or the table's mapped LUT netlist."""

    CASE = "case"
    MAPPED = "mapped"

    @classmethod
    def parse(cls, value: Any, *, what: str) -> Tables:
        if isinstance(value, Tables):
            return value
        if isinstance(value, str) and value.lower() in {m.value for m in cls}:
            return cls(value.lower())
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown tables {value!r}; expected one of {accepted}"
        raise OptionError(msg)


# Names the generated body uses itself: a table module must not be called like one of them.
_OWN_NAMES = re.compile(r"(n|init)\d+|(n|a)\d+_q\d+|luts?|clk|en", re.IGNORECASE)


@functools.cache
def _input_mask(position: int, inputs: int) -> int:
    """The truth table of a LUT's input ``position`` alone: bit ``i`` set where bit ``position`` of ``i`` is 1."""
    size, period = 1 << inputs, 1 << (position + 1)
    block = ((1 << (period // 2)) - 1) << (period // 2)  # the upper half of one period
    return block * (((1 << size) - 1) // ((1 << period) - 1))  # repeated size // period times


def lut_init(node: Any) -> int:
    """The INIT mask of a netlist node (:class:`~iotable.lutnet.Lut`): bit ``i`` is its output where its
    inputs, the first one least significant, read ``i``. Its cover becomes whole-mask integer operations: a
    cube is the AND of its literals' masks, the cover the OR of its cubes (complemented for an off-set).

    Example:
        >>> from iotable.lutnet import Lut
        >>> hex(lut_init(Lut("y", ("a", "b"), ("11",))))  # a AND b: only i = 3
        '0x8'
        >>> hex(lut_init(Lut("y", ("a", "b", "c"), ("1--",))))  # a: the odd i
        '0xaa'
    """
    inputs = len(node.inputs)
    full = (1 << (1 << inputs)) - 1
    cover = 0
    for cube in node.cubes:  # a loop over the cubes of one node, each a few integer operations
        term = full
        for position, literal in enumerate(cube):
            if literal == "1":
                term &= _input_mask(position, inputs)
            elif literal == "0":
                term &= ~_input_mask(position, inputs)
        cover |= term
    cover &= full
    return cover if node.onset else full & ~cover


def _netlist_of(mapped: Any, *, what: str) -> tuple[Any, list[str]]:
    """The :class:`~iotable.lutnet.LutNetlist` and the header's lines about how it was mapped."""
    from ..lutnet import LutNetlist
    from ..synth import MappedTable

    if isinstance(mapped, MappedTable):
        netlist = mapped.netlist
        done = (
            f"{mapped.luts} LUT(s) of at most {mapped.k} inputs, depth {mapped.depth}; mapped by {mapped.method} "
            f"with {mapped.abc_version},"
        )
        return netlist, [done, f"script '{mapped.script}', don't-cares: {mapped.completion}."]
    if isinstance(mapped, LutNetlist):
        return mapped, [f"{mapped.luts} LUT(s), depth {mapped.depth}; a netlist given directly."]
    msg = f"{what}: expected a MappedTable (iotable.synth.map_table) or a LutNetlist, received {type(mapped).__name__}"
    raise HDLError(msg)


def _wiring(table: IOTable, layout: TableLayout, netlist: Any, *, what: str) -> tuple[dict[str, int], list[int]]:
    """Address bit of each netlist input name; for each ``codes`` bit from the lowest, the node that drives it.

    Checks the netlist is one of this table's function: its inputs among the table's address bits, its
    outputs exactly the table's code bits.
    """
    address = {
        f"x{j}_{b}": offset + b
        for j, (width, offset) in enumerate(zip(layout.input_widths, layout.input_offsets))
        for b in range(width)
    }
    code = {
        f"y{j}_{b}": offset + b for j, offset in enumerate(layout.output_offsets) for b in range(layout.output_width)
    }
    if set(netlist.inputs) - set(address) or set(netlist.outputs) != set(code):
        msg = (
            f"{what}: the netlist has inputs {list(netlist.inputs)} and outputs {list(netlist.outputs)}; {table!r} "
            f"has address bits {list(address)} and code bits {list(code)}; map this table (iotable.synth.map_table)"
        )
        raise HDLError(msg)
    node_of = {node.output: k for k, node in enumerate(netlist.nodes)}
    drivers = [0] * layout.code_bits
    for name, bit in code.items():
        drivers[bit] = node_of[name]
    return {name: bit for name, bit in address.items() if name in netlist.inputs}, drivers


class CellKind(enum.Enum):
    """What a netlist node is in the module: a wire (buffer), a constant, or a LUT."""

    BUFFER = "buffer"
    CONSTANT = "constant"
    LUT = "lut"


@dataclass(frozen=True)
class Source:
    """A bit the body reads: the output of node ``n<k>`` (``bit`` is ``None``) or bit ``bit`` of ``address``."""

    signal: str
    bit: int | None = None


@dataclass(frozen=True)
class Cell:
    """One netlist node as the module computes it.

    ``output``: its signal; ``inputs``: a buffer's one source, or a LUT's select, **most significant first**
    (its last netlist input first); ``init``: a LUT's INIT mask, a constant's bit; ``mask``: the LUT's constant.
    """

    output: str
    kind: CellKind
    inputs: tuple[Source, ...]
    init: int
    mask: str

    @property
    def size(self) -> int:
        """Bits of a LUT's INIT mask."""
        return 1 << len(self.inputs)

    @property
    def digits(self) -> tuple[str, str]:
        """A LUT's INIT mask as a radix (``"h"``: hexadecimal, from 2 inputs; ``"b"``: binary) and its digits."""
        if self.size % 4 == 0:
            return "h", format(self.init, f"0{self.size // 4}x")
        return "b", format(self.init, f"0{self.size}b")


@dataclass(frozen=True)
class Register:
    """A pipeline register inside a table module: ``output`` loads ``source`` on a clock edge where ``en``."""

    output: str
    source: Source


@dataclass(frozen=True)
class LutBody:
    """A table module as its LUT netlist, in no language: the cells in topological order, the cells that drive
    ``codes`` (most significant bit first), and the header comment's text (unescaped). With ``registers``
    (:func:`staged`), the module has ports ``clk`` and ``en`` too and ``codes`` follow ``address`` by
    ``latency`` clock edges where ``en`` is high."""

    layout: TableLayout
    cells: tuple[Cell, ...]
    outputs: tuple[str, ...]
    header: tuple[str, ...]
    registers: tuple[Register, ...] = ()
    latency: int = 0


def _levels(cells: tuple[Cell, ...]) -> dict[str, int]:
    """Each cell's LUT level: a LUT one more than its deepest input (``address`` bits are level 0), a buffer
    its input's, a constant 0."""
    level: dict[str, int] = {}
    for cell in cells:
        below = max((level.get(s.signal, 0) if s.bit is None else 0 for s in cell.inputs), default=0)
        level[cell.output] = below + (cell.kind is CellKind.LUT)
    return level


def _stage(level: int, every: int) -> int:
    """The stage of a cell at ``level`` with a register after every ``every`` LUT levels (levels 1 to
    ``every`` are stage 0)."""
    return max(level - 1, 0) // every


def stages_of(body: LutBody, every: int) -> int:
    """The registers a table module needs inside with one after every ``every`` LUT levels: one fewer than
    its stages (a table of depth ``d`` has ``ceil(d / every)``)."""
    level = _levels(body.cells)
    return _stage(max((level[o] for o in body.outputs), default=0), every)


def staged(body: LutBody, every: int, latency: int) -> LutBody:
    """``body`` cut by LUT depth into stages with ``latency`` registers in all: a rank of registers after every
    ``every`` LUT levels (at least :func:`stages_of` ranks; more pad the outputs, so that every table of a
    layer has the same latency). Every signal that crosses a rank is registered there, the ``address`` bits
    and cell outputs that a later stage reads included, so every path from ``address`` to ``codes`` passes
    ``latency`` registers. Registers are named ``<signal>_q<rank>`` (``a<bit>`` for an address bit)."""
    level = _levels(body.cells)
    kinds = {cell.output: cell.kind for cell in body.cells}
    stage = {cell.output: min(_stage(level[cell.output], every), latency) for cell in body.cells}
    registers: list[Register] = []
    made: dict[tuple[Source, int], Source] = {}

    def at(source: Source, rank: int) -> Source:
        """``source`` after ``rank`` registers (a constant needs none)."""
        if source.bit is None and kinds[source.signal] is CellKind.CONSTANT:
            return source
        current, start = source, 0 if source.bit is not None else stage[source.signal]
        base = source.signal if source.bit is None else f"a{source.bit}"
        for k in range(start + 1, rank + 1):
            if (source, k) not in made:
                made[source, k] = Source(f"{base}_q{k}")
                registers.append(Register(made[source, k].signal, current))
            current = made[source, k]
        return current

    cells = tuple(
        dataclasses.replace(cell, inputs=tuple(at(s, stage[cell.output]) for s in cell.inputs)) for cell in body.cells
    )
    outputs = tuple(at(Source(o), latency).signal for o in body.outputs)
    header = (*body.header, f"Pipelined: a register after every {every} LUT level(s), {latency} clock edge(s) "
              "from address to codes (clk, loaded where en is high).")  # fmt: skip
    return dataclasses.replace(
        body, cells=cells, outputs=outputs, header=header, registers=tuple(registers), latency=latency
    )


def _cells(netlist: Any, address: dict[str, int]) -> tuple[Cell, ...]:
    """A cell per netlist node (a loop over nodes, never over table rows)."""
    index = {node.output: k for k, node in enumerate(netlist.nodes)}

    def source(name: str) -> Source:
        return Source(f"n{index[name]}") if name in index else Source("address", address[name])

    cells = []
    inputs: tuple[Source, ...]
    for k, node in enumerate(netlist.nodes):
        if node.is_buffer:
            kind, inputs, init = CellKind.BUFFER, (source(node.inputs[0]),), 0
        elif not node.inputs:
            kind, inputs, init = CellKind.CONSTANT, (), lut_init(node) & 1
        else:  # I0, the first input, least significant
            kind, inputs, init = CellKind.LUT, tuple(source(s) for s in reversed(node.inputs)), lut_init(node)
        cells.append(Cell(f"n{k}", kind, inputs, init, f"INIT{k}"))
    return tuple(cells)


def lut_body(table: Any, mapped: Any, name: str, *, what: str) -> LutBody:
    """The :class:`LutBody` of ``table`` from its mapped netlist, after checking the name and the netlist."""
    layout = layout_of(table, what=what)
    if _OWN_NAMES.fullmatch(name):
        msg = (
            f"{what}: the module name {name!r} is one the mapped netlist uses inside (n<k>, INIT<k>, lut, luts); "
            f"choose another (e.g. {name}_t)"
        )
        raise HDLError(msg)
    netlist, how = _netlist_of(mapped, what=what)
    address, drivers = _wiring(table, layout, netlist, what=what)
    header = [
        *header_lines(table, layout, dont_cares="", netlist=True),
        *how,
        "A LUT is bit i of its INIT mask, i its inputs as a binary number (in the select, most significant first).",
        "Rows the table lacks and bit patterns that are no input code are don't-cares: the netlist drives some code.",
    ]
    outputs = tuple(f"n{drivers[bit]}" for bit in range(len(drivers) - 1, -1, -1))  # most significant first
    return LutBody(layout, _cells(netlist, address), outputs, tuple(header))


def map_modules(modules: Mapping[str, Any], *, k: int, executor: Any, cache_dir: Any, what: str) -> dict[str, Any]:
    """The :class:`~iotable.synth.MappedTable` of every table module (``name -> TableModule``), each
    distinct function mapped once by :func:`~iotable.synth.map_luts`; tables too wide to map are refused
    first, by name (layer and unit)."""
    from ..lutnet import MAX_INPUT_BITS
    from ..synth import map_luts

    for module in modules.values():
        if module.layout.address_bits > MAX_INPUT_BITS:
            layer, unit = module.uses[0]
            msg = (
                f"{what}: tables='mapped' cannot map the table of layer {layer!r} unit {unit} (module "
                f"{module.name}): {module.layout.address_bits} address bits, more than iotable.synth maps "
                f"({MAX_INPUT_BITS}); export it with tables='case', or decompose the layer into narrower units"
            )
            raise HDLError(msg)
    names = list(modules)
    report = map_luts([modules[n].table for n in names], k=k, executor=executor, cache_dir=cache_dir)
    return dict(zip(names, report.tables))


def check_mapped_options(tables: Any, k: Any, dont_cares: str, *, what: str) -> Tables:
    """``tables`` as a :class:`Tables`; with ``"mapped"``, ``k`` checked and ``dont_cares`` ``"x"``: a mapped
    table spends its don't-cares on fewer LUTs, so code 0 there cannot be promised."""
    from ..errors import SynthError
    from ..lutcount import check_k

    chosen = Tables.parse(tables, what=what)
    if chosen is Tables.MAPPED:
        try:
            check_k(k, what=what)
        except SynthError as exc:
            raise OptionError(str(exc)) from None
        if dont_cares != "x":
            msg = (
                f"{what}: dont_cares={dont_cares!r} promises code 0 on rows a table lacks, but tables='mapped' "
                "lets the mapper choose those rows' codes to save LUTs; use dont_cares='x' with mapped tables, or "
                "tables='case'"
            )
            raise OptionError(msg)
    return chosen


def layer_luts(layers: tuple[Any, ...], netlist: Any, mapped: Mapping[str, Any]) -> tuple[Any, ...]:
    """Each layer's :class:`~iotable.synth.LayerCost` with ``luts``: its instances' LUTs (an instance of a
    table costs that table's LUTs, however many instances share the module)."""
    from .netlist import Layer

    blocks = [block for block in netlist.blocks if isinstance(block, Layer)]
    return tuple(
        dataclasses.replace(layer, luts=sum(mapped[module].luts for _, module, _ in block.instances))
        for layer, block in zip(layers, blocks)
    )


def table_latency(netlist: Any, mapped: Mapping[str, Any], every: int, *, what: str) -> dict[str, int]:
    """The registers inside each table module of ``netlist`` (by name) with one after every ``every`` LUT
    levels: its own :func:`stages_of`, raised to the most of any module it shares a layer with (through
    every layer that shares modules), so that all tables of a layer have one latency and a module serves
    every layer that instantiates it."""
    from .netlist import Layer

    need = {
        name: stages_of(lut_body(module.table, mapped[name], name, what=what), every)
        for name, module in netlist.modules.items()
    }
    parent = {name: name for name in need}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    for block in netlist.blocks:
        if isinstance(block, Layer):
            names = [module for _, module, _ in block.instances]
            for name in names[1:]:
                parent[root(name)] = root(names[0])
    most: dict[str, int] = {}
    for name, registers in need.items():
        most[root(name)] = max(most.get(root(name), 0), registers)
    return {name: most[root(name)] for name in need}


def check_pipeline_luts(value: Any, *, tables: Tables, style: str, what: str) -> int:
    """``pipeline_luts`` checked: a number of LUT levels between registers inside mapped tables, 0 or ``None``
    for none; it needs ``tables="mapped"`` and the unrolled style."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = (
            f"{what}: pipeline_luts must be a number of LUT levels between registers inside each mapped table "
            f"(1: after every level, k: after every k-th) or 0 / None (none), received {value!r}"
        )
        raise OptionError(msg)
    if value and tables is not Tables.MAPPED:
        msg = (
            f"{what}: pipeline_luts={value} cuts each table's LUT netlist by depth, but tables={tables.value!r} "
            "writes no LUT netlist; use tables='mapped', or leave pipeline_luts out"
        )
        raise OptionError(msg)
    if value and style != "unrolled":
        msg = (
            f"{what}: pipeline_luts={value} is built for style 'unrolled' only, received style {style!r}; export "
            "with style='unrolled', or leave pipeline_luts out (pipeline= still registers between table layers)"
        )
        raise OptionError(msg)
    return value
