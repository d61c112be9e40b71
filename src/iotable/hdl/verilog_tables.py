"""Verilog-2001 of one table: the language's names, comments, strings and slices, the table module (a ``case``
over ``address``, nested cases, or blocks), the table as its LUT netlist, and the table's exhaustive bench.

:mod:`.verilog` re-exports all of it, so that it and this module are one :class:`~.emit.Printer`. The rows,
the nesting, the blocks and the LUTs come from :mod:`.table`, :mod:`.mapped` and :mod:`.bench`; only the text
is here. A LUT is ``localparam [15:0] INIT7 = 16'h8a3c;`` and ``wire n7 = INIT7[{n3, address[5], address[2],
address[0]}];``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np

from ..table import IOTable
from .bench import vectors_file, word_bits
from .language import Language
from .mapped import CellKind, LutBody, Source
from .names import verilog_comment, verilog_name, verilog_string
from .results import results_file, verilog_nonce
from .table import (
    Bits,
    DontCares,
    TableLayout,
    Text,
    block_groups,
    block_low,
    case_text,
    header_lines,
    in_blocks,
    layout_of,
    lines,
)

__all__ = [
    "comment",
    "concat",
    "constant",
    "mapped",
    "name",
    "slice",
    "string",
    "suffix",
    "table",
    "table_bench",
]


def suffix() -> str:
    return Language.VERILOG.suffixes[0]


def name(name: str) -> str:
    return verilog_name(name)


def comment(text: object) -> str:
    return f"// {verilog_comment(text)}"


def string(text: object) -> str:
    return verilog_string(text)


def slice(signal: str, high: int, low: int) -> str:
    return f"{signal}[{high}:{low}]"


def constant(width: int, value: int) -> str:
    return f"{width}'d{value}"


def concat(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "{" + ", ".join(parts) + "}"


def _indent(level: int) -> str:
    return " " * (12 + 4 * level)


def _address(bits: Bits | None) -> str:
    return "address" if bits is None else slice("address", *bits)


@dataclass(frozen=True)
class _Case:
    """A :class:`~.table.CaseText`: ``case (...)``, labels ``W'b...``, a nested case inline after its label."""

    code_bits: int
    fill: str

    def case(self, bits: Bits | None) -> str:
        return f"        {ROM_STYLE} case ({_address(bits)})\n"

    def row(self, level: int, width: int) -> tuple[str, str, str]:
        return f"{_indent(level)}{width}'b", f": codes = {self.code_bits}'b", ";\n"

    def branch(self, level: int, width: int, inner: Bits) -> tuple[str, str]:
        return f"{_indent(level)}{width}'b", f": case ({_address(inner)})\n"

    def close(self, level: int) -> str:
        default = f"default: codes = {self.code_bits}'b{self.fill * self.code_bits};\n"
        return f"{_indent(level)}{default}{' ' * (8 + 4 * level)}endcase\n"


#: On a table's ``case``: keep it logic (LUTs), not block RAM. yosys honours ``rom_style = "logic"`` on the
#: ``case`` itself (the ``always`` block's registers would otherwise let it infer a ROM), Vivado ``rom_style``,
#: Synplify and Lattice ``syn_romstyle``.
ROM_STYLE = '(* rom_style = "logic", syn_romstyle = "logic" *)'


def _blocks(table: IOTable, layout: TableLayout, fill: str) -> Iterator[str]:
    """The blocks form: a ``case`` over the high address bits assigning ``chunk``, then the low bits' select;
    the items a group of blocks at a time."""
    bits, cw, low, indent = layout.address_bits, layout.code_bits, block_low(layout), _indent(0)
    yield f"        {ROM_STYLE} case ({slice('address', bits - 1, low)})\n"
    for blocks in block_groups(table, layout, fill):
        item: list[np.ndarray | str] = [
            f"{indent}{blocks.high}'b",
            blocks.labels,
            f": chunk = {blocks.width}'b",
            blocks.constants,
            ";\n",
        ]
        yield lines(item, blocks.count)
    yield (
        f"{indent}default: chunk = {{{cw << low}{{1'b{fill}}}}};\n"
        + "        endcase\n"
        + f"        codes = chunk[{slice('address', low - 1, 0)} * {cw} +: {cw}];\n"
    )


def _ports(module: str, layout: TableLayout, codes: str, *, clocked: bool = False) -> list[str]:
    return [
        f"module {name(module)} (",
        *(["    input  wire clk,", "    input  wire en,"] if clocked else []),
        f"    input  wire [{layout.address_bits - 1}:0] address,",
        f"    output {codes} [{layout.code_bits - 1}:0] codes",
        ");",
    ]


def table(table: IOTable, name: str, *, dont_cares: DontCares) -> Text:
    layout = layout_of(table, what="table_verilog")
    return Text(partial(_table, table, layout, name, dont_cares))


def _table(table: IOTable, layout: TableLayout, name: str, dont_cares: DontCares) -> Iterator[str]:
    fill = "x" if dont_cares is DontCares.X else "0"
    blocks = in_blocks(layout)
    head = header_lines(table, layout, dont_cares="x" if dont_cares is DontCares.X else "code 0")
    chunk = [f"    reg [{(layout.code_bits << block_low(layout)) - 1}:0] chunk;"] if blocks else []
    text = [*map(comment, head), *_ports(name, layout, "reg "), *chunk, "    always @(*) begin"]
    yield "\n".join(text) + "\n"
    if blocks:
        yield from _blocks(table, layout, fill)
    else:
        yield case_text(table, layout, _Case(layout.code_bits, fill))
    yield "    end\nendmodule\n"


def _source(source: Source) -> str:
    return name(source.signal) if source.bit is None else f"{source.signal}[{source.bit}]"


def mapped(body: LutBody, module: str) -> str:
    lines = [*map(comment, body.header), *_ports(module, body.layout, "wire", clocked=body.latency > 0)]
    lines += register_declarations(body)
    for cell in body.cells:  # a loop over netlist nodes, never over table rows
        if cell.kind is CellKind.BUFFER:
            value = _source(cell.inputs[0])
        elif cell.kind is CellKind.CONSTANT:
            value = f"1'b{cell.init}"
        else:
            radix, digits = cell.digits
            lines.append(f"    localparam [{cell.size - 1}:0] {name(cell.mask)} = {cell.size}'{radix}{digits};")
            value = f"{name(cell.mask)}[{{{', '.join(map(_source, cell.inputs))}}}]"
        lines.append(f"    wire {name(cell.output)} = {value};")
    lines += register_loads(body)
    lines += [f"    assign codes = {{{', '.join(map(name, body.outputs))}}};", "endmodule", ""]
    return "\n".join(lines)


def register_declarations(body: LutBody) -> list[str]:
    """The registers of a pipelined LUT netlist, declared before the cells that read them."""
    return [f"    reg {name(r.output)};" for r in body.registers]


def register_loads(body: LutBody) -> list[str]:
    """The registers of a pipelined LUT netlist loading on ``clk`` where ``en`` is high."""
    if not body.registers:
        return []
    loads = [f"            {name(r.output)} <= {_source(r.source)};" for r in body.registers]
    return ["    always @(posedge clk) begin", "        if (en) begin", *loads, "        end", "    end"]


def table_bench(module: str, layout: TableLayout, latency: int = 0) -> str:
    aw, cw, rows, vectors = layout.address_bits, layout.code_bits, layout.rows, vectors_file(module)
    fields_a = [slice("address", *r) for r in layout.input_ranges]
    fields_e = [slice("expected", *r) for r in layout.output_ranges]
    fields_c = [slice("codes", *r) for r in layout.output_ranges]
    fmt = "mismatch at vector %0d: address {} expected {} got {}".format(
        "_".join(["%b"] * len(fields_a)), "_".join(["%b"] * len(fields_e)), "_".join(["%b"] * len(fields_c))
    )
    args = ", ".join(["row", *fields_a, *fields_e, *fields_c])
    module = name(module)
    # a pipelined table: clocked, each address held for its latency's clock edges
    dut = f"    {module} dut (.address(address), .codes(codes));\n"
    hold = ""
    if latency:
        dut = f"    reg  clk = 1'b0;\n    {module} dut (.clk(clk), .en(1'b1), .address(address), .codes(codes));\n"
        hold = f"            repeat ({latency}) begin #1 clk = 1'b1; #1 clk = 1'b0; end\n"
    return (
        f"{comment(f'Exhaustive testbench of table module {module}: every row it holds, from {vectors}.')}\n"
        f"module {name(module + '_tb')};\n"
        f"    reg  [{word_bits(layout) - 1}:0] vectors [0:{rows - 1}];\n"
        f"    reg  [{aw - 1}:0] address;\n"
        f"    reg  [{cw - 1}:0] expected;\n"
        f"    wire [{cw - 1}:0] codes;\n"
        "    integer row, results;\n"
        f"{verilog_nonce('    ')[0]}\n"
        "\n"
        f"{dut}"
        "\n"
        "    initial begin\n"
        f'        results = $fopen("{string(results_file(module + "_tb"))}", "w");\n'
        f"{verilog_nonce('    ')[1]}\n"
        '        $fdisplay(results, "expect 0");\n'
        f'        $readmemh("{string(vectors)}", vectors);\n'
        f"        for (row = 0; row < {rows}; row = row + 1) begin\n"
        f"            {{address, expected}} = vectors[row][{aw + cw - 1}:0];\n"
        f"{hold}"
        "            #1;\n"
        "            if (codes !== expected) begin\n"
        f'                $display("{fmt}", {args});\n'
        f'                $fdisplay(results, "{fmt}", {args});\n'
        f'                $fdisplay(results, "fail %0d/%0d", row, {rows});\n'
        "                $fclose(results);\n"
        f'                $fatal(1, "{string(f"table {module} differs from {vectors}")}");\n'
        "            end\n"
        "        end\n"
        f'        $display("%0d/%0d vectors match", row, {rows});\n'
        f'        $fdisplay(results, "pass %0d/%0d %0s", row, {rows}, iotable_nonce);\n'
        "        $fclose(results);\n"
        "        $finish;\n"
        "    end\n"
        "endmodule\n"
    )
