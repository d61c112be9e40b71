"""VHDL-2008 of one table: the language's names, comments, strings and slices, the table entity (a ``case``
over ``address``, nested cases, or blocks), the table as its LUT netlist, and the table's exhaustive bench.

:mod:`.vhdl` re-exports all of it, so that it and this module are one :class:`~.emit.Printer`. The rows, the
nesting, the blocks and the LUTs come from :mod:`.table`, :mod:`.mapped` and :mod:`.bench`; only the text is
here. A LUT is ``constant INIT7 : std_logic_vector(15 downto 0) := x"8a3c";`` and ``n7 <= lut(INIT7, n3 &
address(5) & address(2) & address(0));`` (``lut`` selects bit ``sel`` of the mask, ``'X'`` when ``sel`` is
unknown, as a Verilog bit-select gives ``x``).
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
from .names import vhdl_comment, vhdl_name, vhdl_string
from .results import results_file, vhdl_nonce
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
    return Language.VHDL.suffixes[0]


def name(name: str) -> str:
    return vhdl_name(name)


def comment(text: object) -> str:
    return f"-- {vhdl_comment(text)}"


def string(text: object) -> str:
    return vhdl_string(text)


def slice(signal: str, high: int, low: int) -> str:
    return f"{signal}({high} downto {low})"


def constant(width: int, value: int) -> str:
    return '"' + format(value, f"0{width}b") + '"'


def concat(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else " & ".join(parts)


def _indent(level: int) -> str:
    return " " * (12 + 8 * level)


def _address(bits: Bits | None) -> str:
    return "address" if bits is None else slice("address", *bits)


@dataclass(frozen=True)
class _Case:
    """A :class:`~.table.CaseText`: ``case ... is``, labels ``b"..."``, a nested case on the line after its label."""

    fill: str

    def case(self, bits: Bits | None) -> str:
        return f"        case {_address(bits)} is\n"

    def row(self, level: int, width: int) -> tuple[str, str, str]:
        return f'{_indent(level)}when b"', '" => codes <= b"', '";\n'

    def branch(self, level: int, width: int, inner: Bits) -> tuple[str, str]:
        return f'{_indent(level)}when b"', f'" =>\n{_indent(level)}    case {_address(inner)} is\n'

    def close(self, level: int) -> str:
        default = f"when others => codes <= (others => {self.fill});\n"
        return f"{_indent(level)}{default}{' ' * (8 + 8 * level)}end case;\n"


def _blocks(table: IOTable, layout: TableLayout, fill: str) -> Iterator[str]:
    """The blocks form: a ``case`` over the high address bits assigning ``chunk`` (the select follows the
    process); the items a group of blocks at a time."""
    indent = _indent(0)
    yield f"        case {slice('address', layout.address_bits - 1, block_low(layout))} is\n"
    for blocks in block_groups(table, layout, fill):
        item: list[np.ndarray | str] = [f'{indent}when b"', blocks.labels, '" => chunk <= b"', blocks.constants, '";\n']
        yield lines(item, blocks.count)
    yield f"{indent}when others => chunk <= (others => '{fill}');\n" + "        end case;\n"


# A case table stays logic (LUTs), not block RAM, in the tools that read these attributes: Vivado's
# rom_style, Synplify's and Lattice's syn_romstyle (yosys reads the Verilog case's own attribute).
_ROM_STYLE = [
    "    attribute rom_style : string;",
    '    attribute rom_style of codes : signal is "logic";',
    "    attribute syn_romstyle : string;",
    '    attribute syn_romstyle of codes : signal is "logic";',
]


def _entity(entity: str, layout: TableLayout, *, numeric: bool, rom: bool = False, clocked: bool = False) -> list[str]:
    return [
        "library ieee;",
        "use ieee.std_logic_1164.all;",
        *(["use ieee.numeric_std.all;"] if numeric else []),
        "",
        f"entity {name(entity)} is",
        "    port (",
        *(["        clk     : in  std_logic;", "        en      : in  std_logic;"] if clocked else []),
        f"        address : in  std_logic_vector({layout.address_bits - 1} downto 0);",
        f"        codes   : out std_logic_vector({layout.code_bits - 1} downto 0)",
        "    );",
        *(_ROM_STYLE if rom else []),
        f"end entity {name(entity)};",
        "",
    ]


def table(table: IOTable, name: str, *, dont_cares: DontCares) -> Text:
    layout = layout_of(table, what="table_vhdl")
    return Text(partial(_table, table, layout, name, dont_cares))


def _table(table: IOTable, layout: TableLayout, name: str, dont_cares: DontCares) -> Iterator[str]:
    cw = layout.code_bits
    fill = "-" if dont_cares is DontCares.X else "0"
    blocks, low = in_blocks(layout), block_low(layout)
    head = header_lines(table, layout, dont_cares="'-'" if dont_cares is DontCares.X else "code 0")
    select = f"to_integer(unsigned({slice('address', low - 1, 0)})) * {cw}"
    text = [
        *map(comment, head),
        *_entity(name, layout, numeric=blocks, rom=True),
        f"architecture rtl of {name} is",
        *([f"    signal chunk : std_logic_vector({(cw << low) - 1} downto 0);"] if blocks else []),
        "begin",
        "    process (all)",
        "    begin",
    ]
    yield "\n".join(text) + "\n"
    if blocks:
        yield from _blocks(table, layout, fill)
    else:
        yield case_text(table, layout, _Case(f"'{fill}'"))
    yield (
        "    end process;\n"
        + (f"    codes <= chunk({select} + {cw - 1} downto {select});\n" if blocks else "")
        + "end architecture rtl;\n"
    )


def _source(source: Source) -> str:
    return name(source.signal) if source.bit is None else f"{source.signal}({source.bit})"


def _select(parts: list[str]) -> str:
    return " & ".join(parts) if len(parts) > 1 else f"(0 => {parts[0]})"


def mapped(body: LutBody, entity: str) -> str:
    declarations, statements = [], []
    for cell in body.cells:  # a loop over netlist nodes, never over table rows
        if cell.kind is CellKind.BUFFER:
            value = _source(cell.inputs[0])
        elif cell.kind is CellKind.CONSTANT:
            value = f"'{cell.init}'"
        else:
            radix, digits = cell.digits
            mask = f'{"x" if radix == "h" else "b"}"{digits}"'
            vector = f"std_logic_vector({cell.size - 1} downto 0)"
            declarations.append(f"    constant {name(cell.mask)} : {vector} := {mask};")
            value = f"lut({name(cell.mask)}, {_select([_source(s) for s in cell.inputs])})"
        declarations.append(f"    signal {name(cell.output)} : std_logic;")
        statements.append(f"    {name(cell.output)} <= {value};")
    declarations += [f"    signal {name(r.output)} : std_logic;" for r in body.registers]
    statements += _register_process(body)
    lines = [
        *map(comment, body.header),
        *_entity(entity, body.layout, numeric=True, clocked=body.latency > 0),
        f"architecture luts of {name(entity)} is",
        "    "
        + comment("A generic LUT: bit sel of its INIT mask; 'X' where sel is unknown (as a Verilog bit-select)."),
        "    function lut(init : std_logic_vector; sel : std_logic_vector) return std_logic is",
        "    begin",
        "        if is_x(sel) then",
        "            return 'X';",
        "        end if;",
        "        return init(to_integer(unsigned(sel)));",
        "    end function lut;",
        *declarations,
        "begin",
        *statements,
        f"    codes <= {_select([name(n) for n in body.outputs])};",
        "end architecture luts;",
        "",
    ]
    return "\n".join(lines)


def _register_process(body: LutBody) -> list[str]:
    """The registers of a pipelined LUT netlist loading on ``clk`` where ``en`` is high."""
    if not body.registers:
        return []
    loads = [f"                {name(r.output)} <= {_source(r.source)};" for r in body.registers]
    head = ["    process (clk)", "    begin", "        if rising_edge(clk) then", "            if en = '1' then"]
    return [*head, *loads, "            end if;", "        end if;", "    end process;"]


def table_bench(entity: str, layout: TableLayout, latency: int = 0) -> str:
    aw, cw, rows, vectors = layout.address_bits, layout.code_bits, layout.rows, vectors_file(entity)

    def shown(slices: list[str]) -> str:
        return ' & "_" & '.join(f"to_string({s})" for s in slices)

    address = shown([slice("address", *r) for r in layout.input_ranges])
    expected = shown([slice("expected", *r) for r in layout.output_ranges])
    codes = shown([slice("codes", *r) for r in layout.output_ranges])
    entity = name(entity)
    # a pipelined table: clocked, each address held for its latency's clock edges
    clock, hold = "", ""
    dut = f"    dut : entity work.{entity} port map (address => address, codes => codes);\n"
    if latency:
        clock = "    signal clk : std_logic := '0';\n"
        dut = f"    dut : entity work.{entity} port map (clk => clk, en => '1', address => address, codes => codes);\n"
        hold = (
            f"            for edge in 1 to {latency} loop\n"
            "                wait for 1 ns;\n                clk <= '1';\n                wait for 1 ns;\n"
            "                clk <= '0';\n            end loop;\n"
        )
    return (
        f"{comment(f'Exhaustive testbench of table entity {entity}: every row it holds, from {vectors}.')}\n"
        "library ieee;\n"
        "use ieee.std_logic_1164.all;\n"
        "use std.textio.all;\n"
        "\n"
        f"entity {name(entity + '_tb')} is\n"
        f"end entity {entity}_tb;\n"
        "\n"
        f"architecture bench of {entity}_tb is\n"
        f"    signal address : std_logic_vector({aw - 1} downto 0);\n"
        f"    signal codes : std_logic_vector({cw - 1} downto 0);\n"
        f"{clock}"
        "begin\n"
        f"{dut}"
        "\n"
        "    process\n"
        f'        file vectors : text open read_mode is "{string(vectors)}";\n'
        f'        file results : text open write_mode is "{string(results_file(entity + "_tb"))}";\n'
        "        variable l, text_line, record_line : line;\n"
        f"        variable word : std_logic_vector({word_bits(layout) - 1} downto 0);\n"
        f"        variable expected : std_logic_vector({cw - 1} downto 0);\n"
        + "".join(line + "\n" for line in vhdl_nonce("        "))
        + "    begin\n"
        '        write(record_line, string\'("expect 0"));\n'
        "        writeline(results, record_line);\n"
        f"        for row in 0 to {rows - 1} loop\n"
        "            readline(vectors, l);\n"
        "            hread(l, word);\n"
        f"            address <= word({aw + cw - 1} downto {cw});\n"
        f"            expected := word({cw - 1} downto 0);\n"
        f"{hold}"
        "            wait for 1 ns;\n"
        "            if codes /= expected then\n"
        '                write(text_line, string\'("mismatch at vector " & integer\'image(row) & ": address " &\n'
        f'                    {address} & " expected " &\n'
        f'                    {expected} & " got " &\n'
        f"                    {codes}));\n"
        "                writeline(output, text_line);\n"
        "                write(record_line, string'(\"fail \") & integer'image(row));\n"
        f'                write(record_line, string\'("/{rows}"));\n'
        "                writeline(results, record_line);\n"
        "                file_close(results);\n"
        f'                assert false report "{string(f"table {entity} differs from {vectors}")}" severity failure;\n'
        "            end if;\n"
        "        end loop;\n"
        f"        write(text_line, string'(integer'image({rows}) & \"/\" & integer'image({rows}) &\n"
        '            " vectors match"));\n'
        "        writeline(output, text_line);\n"
        f'        write(record_line, string\'("pass {rows}/{rows}") & run_nonce);\n'
        "        writeline(results, record_line);\n"
        "        file_close(results);\n"
        "        wait;\n"
        "    end process;\n"
        "end architecture bench;\n"
    )
