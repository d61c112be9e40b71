"""A table as a memory, for simulation only: the same module name and ports as the synthesizable ``case``
module of :mod:`.verilog_tables`, its rows in a hex file that the module reads once with ``$readmemh``.

A simulator walks a ``case`` branch by branch (iverilog compares the address with every label until one
matches: thousands of comparisons per lookup for a 12-bit table), where the memory model is one indexed read::

    module net_layer0_u0 (
        input  wire [11:0] address,
        output wire [2:0] codes
    );
        reg [2:0] rows [0:4095];
        initial $readmemh("net_layer0_u0_rows.hex", rows);
        assign codes = rows[address];
    endmodule

(that is Verilator's form; iverilog's reads the word in an ``always`` block, see :func:`memory_verilog`).

Line ``a`` of the hex file holds the codes of address ``a`` (the table's packed output, first output most
significant, in whole hex digits). Addresses the table lacks, and bit patterns that are no input code, hold
the fill: ``x`` digits (the ``case`` default of ``dont_cares="x"``: the same unknown bits in a 4-state
simulator) or ``0`` (``dont_cares="zero"``; also what a 2-state simulator such as Verilator makes of ``x``).
The contract of the ports is :mod:`.table`'s; the bits come from :mod:`iotable.bits`.

These modules are never written by :func:`~iotable.hdl.export` (synthesis reads the ``case`` files):
:func:`~iotable.hdl.simulate` writes them beside the design's other sources in the simulator's own folder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from .. import bits as bitfields
from ..errors import HDLError
from ..table import IOTable
from .build import build_netlist
from .design import Design
from .names import verilog_comment, verilog_name, verilog_string
from .netlist import Style
from .table import layout_of

__all__ = ["MEMORY_BITS", "memory_files", "memory_hex", "memory_verilog", "rows_file", "simulation_sources"]

#: Tables of more address bits than this keep their ``case`` module in simulation (a memory of ``2**bits`` words).
MEMORY_BITS = 22

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def rows_file(module: str) -> str:
    """The name of the hex file that the memory model of ``module`` reads."""
    return f"{module}_rows.hex"


def memory_hex(table: IOTable, *, fill: str) -> str:
    """The hex file of ``table``'s memory: one line per address ``0 .. 2**address_bits - 1``, the packed codes of
    that address in whole hex digits, or ``fill`` (``"x"`` or ``"0"``) digits where the table has no row.

    Example:
        >>> from iotable import Domain, IOTable
        >>> t = IOTable.dense([[0], [1], [2]], input_domains=[Domain([0.0, 1.0, 2.0])], output_domain=Domain.uniform(2))
        >>> memory_hex(t, fill="x").split()
        ['0', '1', '2', 'x']
    """
    layout = layout_of(table, what="memory_hex")
    if fill not in ("x", "0"):
        msg = f"memory_hex: fill must be 'x' or '0', received {fill!r}"
        raise HDLError(msg)
    code_widths = (layout.output_width,) * layout.fan_out
    digits = -(-layout.code_bits // 4)
    chars = np.full((1 << layout.address_bits, digits), ord(fill), dtype=np.uint8)
    if layout.rows:
        offsets = np.asarray(layout.input_offsets, dtype=np.int64)
        if table.fan_in:
            address = (table.inputs.astype(np.int64) << offsets).sum(axis=1)
        else:
            address = np.zeros(1, np.int64)
        packed = bitfields.digits(table.outputs, code_widths)  # (rows, code bits), most significant first
        padded = np.zeros((layout.rows, 4 * digits), dtype=np.uint8)
        padded[:, 4 * digits - layout.code_bits :] = packed
        nibbles = padded.reshape(layout.rows, digits, 4) @ np.array([8, 4, 2, 1], dtype=np.uint8)
        chars[address] = _HEX[nibbles]
    newline = np.full((chars.shape[0], 1), ord("\n"), dtype=np.uint8)
    return np.concatenate([chars, newline], axis=1).tobytes().decode("ascii")


def memory_verilog(table: IOTable, name: str, *, two_state: bool = False) -> str:
    """The memory model of ``table`` as a Verilog-2001 module ``name`` with the ports of its ``case`` module,
    reading :func:`rows_file` of ``name`` (from the folder the simulator runs in).

    For an event-driven simulator (iverilog) the read is an ``always`` block on the address, which iverilog
    runs about twice as fast as a continuous assignment from a memory word; it runs once more at time 1, after
    the rows are loaded and every process waits on its events, so the first address is looked up whatever the
    order of the processes at time 0 (the benches hold reset longer). ``two_state`` (Verilator, which schedules
    logic by its data, not by events): ``assign codes = rows[address]``.
    """
    layout = layout_of(table, what="memory_verilog")
    module = verilog_name(name)
    last = (1 << layout.address_bits) - 1
    comment = verilog_comment(
        f"Simulation model of table module {name}: its {layout.rows} rows read from {rows_file(name)}; not for "
        "synthesis (the case module is)."
    )
    read = f'$readmemh("{verilog_string(rows_file(name))}", rows);'
    if two_state:
        body = [f"    initial {read}", "    assign codes = rows[address];"]
    else:
        body = [
            "    reg loaded = 1'b0;",
            "    initial begin",
            f"        {read}",
            "        #1 loaded = 1'b1;",
            "    end",
            "    always @(address or loaded) codes = rows[address];",
        ]
    lines = [
        f"// {comment}",
        f"module {module} (",
        f"    input  wire [{layout.address_bits - 1}:0] address,",
        f"    output {'wire' if two_state else 'reg '} [{layout.code_bits - 1}:0] codes",
        ");",
        f"    reg [{layout.code_bits - 1}:0] rows [0:{last}];",
        *body,
        "endmodule",
        "",
    ]
    return "\n".join(lines)


def memory_files(table: IOTable, name: str, *, fill: str, two_state: bool = False) -> dict[str, str]:
    """``{"<name>.v": memory model, "<name>_rows.hex": its rows}``: what replaces the ``case`` file of the table
    module ``name`` in a simulation (``two_state``: for Verilator, see :func:`memory_verilog`)."""
    return {
        f"{name}.v": memory_verilog(table, name, two_state=two_state),
        rows_file(name): memory_hex(table, fill=fill),
    }


# The header line every case module of a table carries (verilog_tables.header_lines): what its default drives.
_DONT_CARES = re.compile(r"^// Rows the table lacks .* are don't-cares: (x|code 0)\.$", re.MULTILINE)


def simulation_sources(design: Design, sources: Mapping[str, str], *, two_state: bool) -> dict[str, str]:
    """The Verilog ``sources`` of ``design`` (file name -> text, as read from its directory) with every ``case``
    table module replaced by its memory model and the model's hex file: the same modules, ports and function,
    for simulation. The table modules are found again from the design's network (the netlist ``export``
    built); each keeps its own don't-care fill (read from its header), and ``two_state`` (Verilator) writes
    ``0`` where that fill is ``x``, as Verilator makes of an ``x``. Tables over :data:`MEMORY_BITS` address
    bits, the tables written inline in their layer modules, and the LUT netlists of ``tables="mapped"``, stay
    as written.

    Raises:
        HDLError: the design's network does not give the table modules its sources hold.
    """
    what = "simulate"
    if design.tables != "case":
        return dict(sources)
    net = design.network
    netlist = build_netlist(
        net.graph, net.layers, Style(design.style), top=design.top, pipeline=design.pipeline, keep_dead=design.keep_dead
    )
    modules = {f"{m.name}.v": m for m in netlist.modules.values() if m.layout.address_bits > design.inline_bits}
    files = [name for name in sources if name != f"{design.top}.v"]
    if sorted(modules) != sorted(files):
        msg = (
            f"{what}: the network of design {design.top!r} gives the table modules {sorted(modules)[:5]}, its "
            f"directory holds {sorted(files)[:5]}; simulate the Design that export returned with that network, "
            "or pass tables='sources'"
        )
        raise HDLError(msg)
    replaced = dict(sources)
    for file, module in modules.items():
        if module.layout.address_bits > MEMORY_BITS:
            continue
        found = _DONT_CARES.search(sources[file])
        if found is None:
            msg = f"{what}: {file!r} does not say what its don't-care rows drive; export the design again"
            raise HDLError(msg)
        fill = "0" if two_state or found.group(1) == "code 0" else "x"
        replaced.update(memory_files(module.table, module.name, fill=fill, two_state=two_state))
    return replaced
