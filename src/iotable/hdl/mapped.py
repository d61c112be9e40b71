"""One IOTable as its mapped LUT netlist in Verilog or VHDL: the same ports as the ``case`` module, LUTs inside.

:func:`mapped_verilog` / :func:`mapped_vhdl` write the netlist :func:`iotable.synth.map_table` (or
:func:`~iotable.synth.map_luts`) found for a table as a module (entity) whose ports, widths and bit packing are
exactly those of :func:`~iotable.hdl.table_verilog` / :func:`~iotable.hdl.table_vhdl` (``address``: the input
codes, first input most significant; ``codes``: the output codes, first output most significant), so that the
table's benches and the layer modules that instantiate it do not change.

The body is a generic, vendor-neutral LUT per netlist node, in the netlist's topological order:

- Verilog: ``localparam [15:0] INIT7 = 16'h8a3c;`` and ``wire n7 = INIT7[{n3, address[5], address[2],
  address[0]}];``
- VHDL: ``constant INIT7 : std_logic_vector(15 downto 0) := x"8a3c";`` and ``n7 <= lut(INIT7, n3 &
  address(5) & address(2) & address(0));`` (``lut`` selects bit ``sel`` of the mask, ``'X'`` when ``sel`` is
  unknown, as a Verilog bit-select gives ``x``).

A LUT's inputs are listed most significant first in the select: its first netlist input (``I0``) is the least
significant, and bit ``i`` of ``INIT`` is its output where its inputs, read as that binary number, equal
``i``. Wires (buffers) and constants are plain assignments. The netlist names address bits ``x<input>_<bit>``
and code bits ``y<output>_<bit>`` (``<bit>`` 0 the least significant bit of the code,
:meth:`iotable.lutnet.BitFunction.input_names`): ``x<j>_<b>`` is ``address[offset_j + b]`` and ``y<j>_<b>`` is
``codes[offset_j + b]``, offsets from :class:`~iotable.hdl.TableLayout`.

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
from typing import Any

from ..errors import HDLError, OptionError
from ..table import IOTable
from .names import check_name
from .table import TableLayout, _comment_text, layout_of

__all__ = [
    "Tables",
    "check_mapped_options",
    "layer_luts",
    "lut_init",
    "map_modules",
    "mapped_verilog",
    "mapped_vhdl",
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
_OWN_NAMES = re.compile(r"(n|init)\d+|luts?", re.IGNORECASE)


@functools.cache
def _input_mask(position: int, inputs: int) -> int:
    """The truth table of a LUT's input ``position`` alone: bit ``i`` set where bit ``position`` of ``i`` is 1."""
    size, period = 1 << inputs, 1 << (position + 1)
    block = ((1 << (period // 2)) - 1) << (period // 2)  # the upper half of one period
    return block * (((1 << size) - 1) // ((1 << period) - 1))  # repeated size // period times


def lut_init(node: Any) -> int:
    """The INIT mask of a netlist node (:class:`~iotable.synth.Lut`): bit ``i`` is its output where its
    inputs, the first one least significant, read ``i``. Its cover becomes whole-mask integer operations: a
    cube is the AND of its literals' masks, the cover the OR of its cubes (complemented for an off-set).

    Example:
        >>> from iotable.synth import Lut
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
    """The :class:`~iotable.synth.LutNetlist` and the header's lines about how it was mapped."""
    from ..synth import LutNetlist, MappedTable

    if isinstance(mapped, MappedTable):
        netlist = mapped.netlist
        done = (
            f"{mapped.luts} LUT(s) of at most {mapped.k} inputs, depth {mapped.depth}; mapped by {mapped.method} "
            f"with {_comment_text(mapped.abc_version)},"
        )
        return netlist, [done, f"script '{_comment_text(mapped.script)}', don't-cares: {mapped.completion}."]
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


def _mask_literal(init: int, inputs: int, *, verilog: bool) -> str:
    """An INIT mask of ``2**inputs`` bits as a sized literal: hexadecimal from 2 inputs, else binary."""
    size = 1 << inputs
    if size % 4 == 0:
        digits = format(init, f"0{size // 4}x")
        return f"{size}'h{digits}" if verilog else f'x"{digits}"'
    bits = format(init, f"0{size}b")
    return f"{size}'b{bits}" if verilog else f'b"{bits}"'


def _body(netlist: Any, address: dict[str, int], drivers: list[int], *, verilog: bool) -> list[str]:
    """Declarations and statements: a LUT, wire or constant per node (topological order), then the outputs.

    Verilog: the lines of the module body. VHDL: the declarations, a ``begin`` line, then the statements.
    """
    index = {node.output: k for k, node in enumerate(netlist.nodes)}

    def ref(name: str) -> str:
        if name in index:
            return f"n{index[name]}"
        return f"address[{address[name]}]" if verilog else f"address({address[name]})"

    declarations, statements = [], []
    for k, node in enumerate(netlist.nodes):  # a loop over netlist nodes, never over table rows
        if node.is_buffer:
            value = ref(node.inputs[0])
        elif not node.inputs:
            bit = lut_init(node) & 1
            value = f"1'b{bit}" if verilog else f"'{bit}'"
        else:
            n = len(node.inputs)
            mask = _mask_literal(lut_init(node), n, verilog=verilog)
            select = [ref(s) for s in reversed(node.inputs)]  # I0, the first input, least significant
            if verilog:
                declarations.append(f"    localparam [{(1 << n) - 1}:0] INIT{k} = {mask};")
                value = f"INIT{k}[{{{', '.join(select)}}}]"
            else:
                declarations.append(f"    constant INIT{k} : std_logic_vector({(1 << n) - 1} downto 0) := {mask};")
                value = f"lut(INIT{k}, {' & '.join(select) if n > 1 else f'(0 => {select[0]})'})"
        if verilog:
            declarations.append(f"    wire n{k} = {value};")
        else:
            declarations.append(f"    signal n{k} : std_logic;")
            statements.append(f"    n{k} <= {value};")
    outputs = [f"n{drivers[bit]}" for bit in range(len(drivers) - 1, -1, -1)]  # codes, most significant first
    if verilog:
        return [*declarations, f"    assign codes = {{{', '.join(outputs)}}};"]
    value = " & ".join(outputs) if len(outputs) > 1 else f"(0 => {outputs[0]})"
    return [*declarations, "begin", *statements, f"    codes <= {value};"]


def _prepare(table: Any, mapped: Any, name: str, language: str, *, what: str) -> tuple[Any, list[str], list[str]]:
    layout = layout_of(table, what=what)
    name = check_name(name, language=language, what=what)
    if _OWN_NAMES.fullmatch(name):
        msg = (
            f"{what}: the module name {name!r} is one the mapped netlist uses inside (n<k>, INIT<k>, lut, luts); "
            f"choose another (e.g. {name}_t)"
        )
        raise HDLError(msg)
    netlist, how = _netlist_of(mapped, what=what)
    address, drivers = _wiring(table, layout, netlist, what=what)
    body = _body(netlist, address, drivers, verilog=language == "verilog")
    origin = "" if table.layer is None else f" from layer {_comment_text(table.layer)}"
    origin += "" if table.unit is None else f" unit {table.unit}"
    widths = ", ".join(str(w) for w in layout.input_widths)
    care = "dense" if table.is_dense else "partial"
    header = [
        f"Generated by iotable: one table{origin}, {care}, {layout.rows} of {layout.space} rows, as its LUT netlist.",
        f"address: {table.fan_in} input code(s) of {widths} bit(s), first input most significant.",
        f"codes: {layout.fan_out} output code(s) of {layout.output_width} bit(s), first output most significant.",
        *how,
        "A LUT is bit i of its INIT mask, i its inputs as a binary number (in the select, most significant first).",
        "Rows the table lacks and bit patterns that are no input code are don't-cares: the netlist drives some code.",
    ]
    return layout, header, body


def mapped_verilog(table: IOTable, mapped: Any, name: str) -> str:
    """A table's mapped LUT netlist as a Verilog-2001 module with the ports of :func:`table_verilog`.

    Each LUT is a ``localparam`` INIT mask and a bit-select of it by the LUT's inputs (a generic LUT, no
    vendor primitive); ``address`` and ``codes`` are packed exactly as in :func:`table_verilog`, so the
    table's bench (:func:`table_bench`) and its instances do not change. On rows the table lacks the netlist
    drives the codes the mapper chose (no ``x``).

    Args:
        table: the IOTable the netlist was mapped from (outputs must be codes).
        mapped: its :class:`~iotable.synth.MappedTable` (from :func:`~iotable.synth.map_table` or
            :func:`~iotable.synth.map_luts`, checked on every row of the table) or a
            :class:`~iotable.synth.LutNetlist` with the same signal names.
        name: the module's name, a legal Verilog identifier that is not a keyword.

    Returns:
        The module's source text.

    Example:
        >>> from iotable import Domain, IOTable
        >>> from iotable.synth import LutNetlist
        >>> t = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                   output_domain=Domain.uniform(1))
        >>> xor = LutNetlist.from_blif(".model m\\n.inputs x0_0 x1_0\\n.outputs y0_0\\n.names x0_0 x1_0 y0_0\\n"
        ...                            "01 1\\n10 1\\n.end\\n")
        >>> print("\\n".join(mapped_verilog(t, xor, "xor2").splitlines()[-5:]))
        );
            localparam [3:0] INIT0 = 4'h6;
            wire n0 = INIT0[{address[0], address[1]}];
            assign codes = {n0};
        endmodule
    """
    what = "mapped_verilog"
    layout, header, body = _prepare(table, mapped, name, "verilog", what=what)
    head = "\n".join(f"// {line}" for line in header)
    return (
        f"{head}\n"
        f"module {name} (\n"
        f"    input  wire [{layout.address_bits - 1}:0] address,\n"
        f"    output wire [{layout.code_bits - 1}:0] codes\n"
        ");\n" + "\n".join(body) + "\nendmodule\n"
    )


def mapped_vhdl(table: IOTable, mapped: Any, name: str) -> str:
    """A table's mapped LUT netlist as a VHDL-2008 entity with the ports of :func:`table_vhdl`.

    Each LUT is a constant INIT mask (``std_logic_vector``) indexed by its inputs through a small function
    ``lut`` (``'X'`` when an input is unknown); ports and packing as in :func:`table_vhdl`.

    Args:
        table: the IOTable the netlist was mapped from (outputs must be codes).
        mapped: its :class:`~iotable.synth.MappedTable` or a :class:`~iotable.synth.LutNetlist`.
        name: the entity's name, a legal VHDL basic identifier that is not a reserved word.

    Returns:
        The entity's source text (analyse with ``ghdl -a --std=08``).

    Example:
        >>> from iotable import Domain, IOTable
        >>> from iotable.synth import LutNetlist
        >>> t = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                   output_domain=Domain.uniform(1))
        >>> xor = LutNetlist.from_blif(".model m\\n.inputs x0_0 x1_0\\n.outputs y0_0\\n.names x0_0 x1_0 y0_0\\n"
        ...                            "01 1\\n10 1\\n.end\\n")
        >>> print("\\n".join(mapped_vhdl(t, xor, "xor2").splitlines()[-6:]))
            constant INIT0 : std_logic_vector(3 downto 0) := x"6";
            signal n0 : std_logic;
        begin
            n0 <= lut(INIT0, address(0) & address(1));
            codes <= (0 => n0);
        end architecture luts;
    """
    what = "mapped_vhdl"
    layout, header, body = _prepare(table, mapped, name, "vhdl", what=what)
    head = "\n".join(f"-- {line}" for line in header)
    return (
        f"{head}\n"
        "library ieee;\n"
        "use ieee.std_logic_1164.all;\n"
        "use ieee.numeric_std.all;\n"
        "\n"
        f"entity {name} is\n"
        "    port (\n"
        f"        address : in  std_logic_vector({layout.address_bits - 1} downto 0);\n"
        f"        codes   : out std_logic_vector({layout.code_bits - 1} downto 0)\n"
        "    );\n"
        f"end entity {name};\n"
        "\n"
        f"architecture luts of {name} is\n"
        "    -- A generic LUT: bit sel of its INIT mask; 'X' where sel is unknown (as a Verilog bit-select).\n"
        "    function lut(init : std_logic_vector; sel : std_logic_vector) return std_logic is\n"
        "    begin\n"
        "        if is_x(sel) then\n"
        "            return 'X';\n"
        "        end if;\n"
        "        return init(to_integer(unsigned(sel)));\n"
        "    end function lut;\n" + "\n".join(body) + "\nend architecture luts;\n"
    )


def map_modules(modules: Mapping[str, Any], *, k: int, executor: Any, cache_dir: Any, what: str) -> dict[str, Any]:
    """The :class:`~iotable.synth.MappedTable` of every table module (``name -> TableModule``), each
    distinct function mapped once by :func:`~iotable.synth.map_luts`; tables too wide to map are refused
    first, by name (layer and unit)."""
    from ..synth import MAX_INPUT_BITS, map_luts

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
    """Each layer's :class:`~iotable.hdl.LayerResources` with ``luts``: its instances' LUTs (an instance of a
    table costs that table's LUTs, however many instances share the module)."""
    from .netlist import Layer

    blocks = [block for block in netlist.blocks if isinstance(block, Layer)]
    return tuple(
        dataclasses.replace(layer, luts=sum(mapped[module].luts for _, module, _ in block.instances))
        for layer, block in zip(layers, blocks)
    )
