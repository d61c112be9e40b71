"""One IOTable as one combinational Verilog module or VHDL entity: a ``case`` over the packed input bits.

The I/O contract (docs/hardware.md has worked examples):

- ``address``: input i's code as an unsigned bit field of ``max(1, ceil(log2(len(domain_i))))`` bits, the
  fields side by side with the **first input most significant** (the table's own digit order; when every
  domain has a power-of-two size this *is* the table's packed address).
- ``codes``: output j's code as a field of ``max(1, ceil(log2(len(output_domain))))`` bits, the **first
  output most significant**.
- Don't-cares: addresses a partial table lacks, and bit patterns that are not codes of a domain whose size
  is not a power of two, fall to the ``case``'s default: all ``x`` (Verilog) / ``'-'`` (VHDL) with
  ``dont_cares="x"``, code 0 with ``"zero"``.

Tables of more than :data:`FLAT_BITS` address bits are written as **nested** cases: an outer ``case`` over
the leading input fields whose branches are ``case`` statements over the next fields, each level at most
:data:`LEVEL_BITS` bits wide (whole fields). The rows and the contract are the same; a flat ``case`` of
2**18 branches takes iverilog minutes to compile and milliseconds per lookup (it compares branch by branch),
and verilator longer still, while the nested form compiles in about a second.

Tables of more than :data:`BLOCK_BITS` address bits are written as **blocks**, a row a line being more text
than simulators hold (the digits CNN's 32 tables of 2**16 to 2**18 rows are 270 MB of nested cases, past
ghdl's limits): a ``case`` over the high half of the address picks a constant holding the codes of the
``2**L`` addresses that share it (address ``j`` of the block at bits ``[j*C +: C]``, ``C`` the code bits),
and the low ``L`` address bits select the codes from it. The function and the ports are the same; synthesis
reads the constant select as multiplexers, as it reads a ``case``.

The ``case`` body is built as byte matrices (a row per table row, a column per character) with numpy and
interleaved with the nested levels' headers by one sort, never a Python loop over rows; case labels separate
the input fields with ``_`` so that a reader sees them.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import bits as bitfields
from ..errors import HDLError, OptionError
from ..table import IOTable
from .names import check_name, verilog_comment

__all__ = [
    "BLOCK_BITS",
    "FLAT_BITS",
    "LEVEL_BITS",
    "DontCares",
    "TableLayout",
    "layout_of",
    "table_verilog",
    "table_vhdl",
]

#: Tables of at most this many address bits are one flat ``case``.
FLAT_BITS = 12
#: Larger tables nest cases; each level spans whole input fields of at most this many bits (or one field).
LEVEL_BITS = 10
#: Tables of more address bits than this are written as blocks of rows selected by the high address bits.
BLOCK_BITS = 14


class DontCares(str, enum.Enum):
    """What a generated table drives where its table holds no row: anything (``x``/``'-'``) or code 0."""

    X = "x"
    ZERO = "zero"

    @classmethod
    def parse(cls, value: Any, *, what: str) -> DontCares:
        if isinstance(value, DontCares):
            return value
        if isinstance(value, str) and value.lower() in {m.value for m in cls}:
            return cls(value.lower())
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown dont_cares {value!r}; expected one of {accepted}"
        raise OptionError(msg)


@dataclass(frozen=True)
class TableLayout:
    """Where each input and output code sits in a table module's ports (bit fields, most significant first).

    ``input_widths[i]`` / ``input_offsets[i]``: width and lowest bit of input i's field in ``address``;
    ``output_width`` / ``output_offsets[j]``: the same for output j in ``codes``.
    """

    input_widths: tuple[int, ...]
    output_width: int
    fan_out: int
    rows: int
    space: int

    @property
    def address_bits(self) -> int:
        """Width of the ``address`` port."""
        return sum(self.input_widths)

    @property
    def code_bits(self) -> int:
        """Width of the ``codes`` port."""
        return self.output_width * self.fan_out

    @property
    def input_offsets(self) -> tuple[int, ...]:
        """Lowest bit of each input's field in ``address`` (the first input's is the highest)."""
        return bitfields.offsets(self.input_widths)

    @property
    def output_offsets(self) -> tuple[int, ...]:
        """Lowest bit of each output's field in ``codes`` (the first output's is the highest)."""
        return bitfields.offsets((self.output_width,) * self.fan_out)

    def input_slices(self, signal: str, *, language: str) -> list[str]:
        """Each input field of ``signal`` as an HDL slice, first input first."""
        return [
            _slice(signal, offset + width - 1, offset, language)
            for width, offset in zip(self.input_widths, self.input_offsets)
        ]

    def output_slices(self, signal: str, *, language: str) -> list[str]:
        """Each output field of ``signal`` as an HDL slice, first output first."""
        w = self.output_width
        return [_slice(signal, offset + w - 1, offset, language) for offset in self.output_offsets]


def _slice(signal: str, high: int, low: int, language: str) -> str:
    return f"{signal}[{high}:{low}]" if language == "verilog" else f"{signal}({high} downto {low})"


def layout_of(table: Any, *, what: str) -> TableLayout:
    """The port layout of ``table``, after checking it is an IOTable whose outputs are codes."""
    if not isinstance(table, IOTable):
        msg = f"{what}: expected an IOTable, received {type(table).__name__}"
        raise HDLError(msg)
    if table.output_domain is None:
        msg = (
            f"{what}: {table!r} holds raw output values, not codes; hardware needs a table whose unit ends in a "
            "quantizer (or one built with output_domain=)"
        )
        raise HDLError(msg)
    return TableLayout(
        input_widths=bitfields.widths(table.input_domains),
        output_width=bitfields.width(table.output_domain),
        fan_out=table.fan_out,
        rows=len(table),
        space=math.prod(table.radices),
    )


def _bit_chars(codes: np.ndarray, widths: tuple[int, ...], *, separator: bool) -> np.ndarray:
    """ASCII '0'/'1' of each column of ``codes`` (N, k), fields most significant first, optionally '_'-joined."""
    bits = bitfields.digits(codes, widths) + np.uint8(ord("0"))
    if not separator or len(widths) < 2:
        return bits
    cuts = np.cumsum(widths)[:-1]
    return np.insert(bits, cuts, np.uint8(ord("_")), axis=1)


def _lines(parts: list[np.ndarray | str], rows: int) -> str:
    """Rows of fixed-width text: constant strings and (rows, k) byte matrices side by side, one line a row."""
    columns = []
    for part in parts:
        if isinstance(part, str):
            raw = np.frombuffer(part.encode("ascii"), dtype=np.uint8)
            columns.append(np.broadcast_to(raw, (rows, raw.size)))
        else:
            columns.append(part)
    return np.concatenate(columns, axis=1).tobytes().decode("ascii") if rows else ""


def levels_of(widths: tuple[int, ...]) -> list[tuple[int, int]]:
    """The nesting of a table's ``case``: ``(first field, end field)`` of each level, outermost first.

    One level when the address has at most :data:`FLAT_BITS` bits; otherwise levels of whole fields of at most
    :data:`LEVEL_BITS` bits each (a wider field is a level of its own), filled from the last field, so that
    the outermost level holds what remains.
    """
    if sum(widths) <= FLAT_BITS:
        return [(0, len(widths))]
    levels = []
    end = len(widths)
    while end > 0:
        start, bits = end - 1, widths[end - 1]
        while start > 0 and bits + widths[start - 1] <= LEVEL_BITS:
            start -= 1
            bits += widths[start]
        levels.append((start, end))
        end = start
    return levels[::-1]


@dataclass(frozen=True)
class _Syntax:
    """The text of one language's (nested) case statement; ``{...}`` fields are filled per table."""

    top: str  # the outermost case line, then its items at item_indent(0)
    item: str  # a row: label and value around the '{label}'/'{value}' byte matrices
    header: tuple[str, str]  # an item opening a nested case: text around the label
    default: str  # the default item of a case
    end: str  # the end of a case statement
    step: int  # indentation of one level of nesting, in units of 4 spaces

    def indent(self, level: int) -> str:
        """The indentation of the items of the case over level ``level``."""
        return " " * (12 + 4 * level * self.step)


def _syntax(language: str, layout: TableLayout, mode: DontCares) -> _Syntax:
    cw = layout.code_bits
    if language == "verilog":
        fill = "x" * cw if mode is DontCares.X else "0" * cw
        return _Syntax(
            top="        case ({range})\n",
            item=f": codes = {cw}'b",
            header=("", ": case ({range})\n"),
            default=f"default: codes = {cw}'b{fill};\n",
            end="endcase\n",
            step=1,
        )
    fill = "'-'" if mode is DontCares.X else "'0'"
    return _Syntax(
        top="        case {range} is\n",
        item='" => codes <= b"',
        header=('when b"', '" =>\n{indent}    case {range} is\n'),
        default=f"when others => codes <= (others => {fill});\n",
        end="end case;\n",
        step=2,
    )


def _range(layout: TableLayout, level: tuple[int, int], language: str, *, whole: bool) -> str:
    """The address bits of a level's fields, as the case expression."""
    if whole:
        return "address"
    first, end = level
    high = layout.input_offsets[first] + layout.input_widths[first] - 1
    low = layout.input_offsets[end - 1]
    return _slice("address", high, low, language)


def _case_text(table: IOTable, layout: TableLayout, language: str, mode: DontCares) -> str:
    """The whole (nested) ``case`` statement of ``table``, from its first line to its ``endcase``/``end case``."""
    syntax = _syntax(language, layout, mode)
    widths = layout.input_widths
    levels = levels_of(widths)
    depth = len(levels) - 1
    inputs = table.inputs
    value = _bit_chars(table.outputs, (layout.output_width,) * layout.fan_out, separator=True)
    last = levels[-1]
    label = _bit_chars(inputs[:, last[0] : last[1]], widths[last[0] : last[1]], separator=True)
    bits = sum(widths[last[0] : last[1]])
    indent = syntax.indent(depth)
    item: list[np.ndarray | str]
    if language == "verilog":
        item = [f"{indent}{bits}'b", label, syntax.item, value, ";\n"]
    else:
        item = [f'{indent}when b"', label, syntax.item, value, '";\n']
    closing = f"{syntax.indent(0)}{syntax.default}        {syntax.end}"
    top = syntax.top.format(range=_range(layout, levels[0], language, whole=depth == 0))
    if depth == 0:
        return top + _lines(item, layout.rows) + closing
    return top + _nested(table, layout, language, syntax, levels, _lines(item, layout.rows)) + closing


def _nested(
    table: IOTable, layout: TableLayout, language: str, syntax: _Syntax, levels: list[tuple[int, int]], items: str
) -> str:
    """The rows' items (fixed-width lines, in address order) with the headers and ends of the nested cases
    interleaved: before a row that starts a new group at level k, the cases of levels k+1.. close (innermost
    first) and open again (outermost first). One stable sort over all segments, no loop over rows."""
    rows, depth = layout.rows, len(levels) - 1
    widths, inputs = layout.input_widths, table.inputs
    item_width = len(items) // rows
    segments: list[tuple[np.ndarray, int, np.ndarray]] = [
        (np.arange(rows), 2 * depth + 1, np.frombuffer(items.encode("ascii"), np.uint8).reshape(rows, item_width))
    ]
    new_group = np.zeros(rows, dtype=bool)
    new_group[0] = True
    for k in range(depth):  # level k's group changes where any field of levels 0..k changes
        end = levels[k][1]
        new_group[1:] |= (np.diff(inputs[:, :end].astype(np.int64), axis=0) != 0).any(axis=1)
        starts = np.flatnonzero(new_group)
        first, stop = levels[k]
        label = _bit_chars(inputs[starts, first:stop], widths[first:stop], separator=True)
        indent = syntax.indent(k)
        inner = _range(layout, levels[k + 1], language, whole=False)
        before = f"{indent}{sum(widths[first:stop])}'b" if language == "verilog" else indent + syntax.header[0]
        after = syntax.header[1].format(range=inner, indent=indent)
        segments.append((starts, depth + k, _matrix([before, label, after], len(starts))))
        close = f"{syntax.indent(k + 1)}{syntax.default}{indent}{' ' * 4 * (syntax.step - 1)}{syntax.end}"
        ends = np.append(starts[1:], rows)  # a group closes before the next one at its level, or at the end
        segments.append((ends, depth - 1 - k, _matrix([close], len(ends))))
    return _interleave(segments)


def _matrix(parts: list[np.ndarray | str], rows: int) -> np.ndarray:
    """:func:`_lines`'s rows as a byte matrix ``(rows, width)``."""
    text = _lines(parts, rows).encode("ascii")
    return np.frombuffer(text, np.uint8).reshape(rows, -1) if rows else np.zeros((0, 0), np.uint8)


def _interleave(segments: list[tuple[np.ndarray, int, np.ndarray]]) -> str:
    """Byte-matrix segments ``(row, order, text)`` joined in (row, order) order: one lexsort and one gather."""
    data = np.concatenate([m.reshape(-1) for _, _, m in segments])
    lengths = np.concatenate([np.full(len(r), m.shape[1], dtype=np.int64) for r, _, m in segments])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    row = np.concatenate([r for r, _, _ in segments])
    order = np.concatenate([np.full(len(r), o, dtype=np.int64) for r, o, _ in segments])
    sequence = np.lexsort((order, row))
    lengths, starts = lengths[sequence], starts[sequence]
    shift = starts - np.concatenate([[0], np.cumsum(lengths)[:-1]])
    gather = np.repeat(shift, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    return data[gather].tobytes().decode("ascii")


def _block_codes(table: IOTable, layout: TableLayout, fill: int) -> np.ndarray:
    """The codes of every address ``(2**A, C)`` as ASCII bits, most significant first; addresses the table
    lacks (and bit patterns that are no code) hold ``fill``."""
    chars = np.full((1 << layout.address_bits, layout.code_bits), fill, dtype=np.uint8)
    offsets = np.asarray(layout.input_offsets, dtype=np.int64)
    address = (table.inputs.astype(np.int64) << offsets).sum(axis=1) if table.fan_in else np.zeros(1, np.int64)
    chars[address] = _bit_chars(table.outputs, (layout.output_width,) * layout.fan_out, separator=False)
    return chars


def _blocks_text(table: IOTable, layout: TableLayout, language: str, mode: DontCares) -> str:
    """The blocks form (see the module docstring): a ``case`` over the high address bits assigning ``chunk``,
    the codes of ``2**low`` addresses; blocks holding no row fall to the default."""
    bits, cw = layout.address_bits, layout.code_bits
    low = bits // 2
    high = bits - low
    width = cw << low
    fill = ord(("x" if language == "verilog" else "-") if mode is DontCares.X else "0")
    chars = _block_codes(table, layout, fill)
    # block b's constant: address b*2**low + j at bits [j*cw +: cw], so the highest address comes first
    constants = chars.reshape(1 << high, 1 << low, cw)[:, ::-1, :].reshape(1 << high, width)
    used = np.flatnonzero(~(constants == fill).all(axis=1))
    labels = bitfields.digits(used.reshape(-1, 1), [high]) + np.uint8(ord("0"))
    indent = " " * 12
    if language == "verilog":
        item: list[np.ndarray | str] = [f"{indent}{high}'b", labels, f": chunk = {width}'b", constants[used], ";\n"]
        other = "x" if mode is DontCares.X else "0"
        return (
            f"        case (address[{bits - 1}:{low}])\n"
            + _lines(item, len(used))
            + f"{indent}default: chunk = {{{width}{{1'b{other}}}}};\n"
            + "        endcase\n"
            + f"        codes = chunk[address[{low - 1}:0] * {cw} +: {cw}];\n"
        )
    other = "'-'" if mode is DontCares.X else "'0'"
    item = [f'{indent}when b"', labels, '" => chunk <= b"', constants[used], '";\n']
    return (
        f"        case address({bits - 1} downto {low}) is\n"
        + _lines(item, len(used))
        + f"{indent}when others => chunk <= (others => {other});\n"
        + "        end case;\n"
    )


def _blocks_note(layout: TableLayout, marker: str) -> list[str]:
    low, cw = layout.address_bits // 2, layout.code_bits
    return [
        f"{marker} In blocks: chunk holds the codes of the {1 << low} addresses that share the high address bits, "
        f"address j of the block at bits [j*{cw} +: {cw}]; the low {low} address bits pick them.",
    ]


def _comment_text(value: object) -> str:
    """``value`` as the text of a one-line comment (both languages' comments escape alike)."""
    return verilog_comment(value)


def _header(table: IOTable, layout: TableLayout, mode: DontCares, marker: str) -> list[str]:
    origin = "" if table.layer is None else f" from layer {_comment_text(table.layer)}"
    origin += "" if table.unit is None else f" unit {table.unit}"
    widths = ", ".join(str(w) for w in layout.input_widths)
    care = "dense" if table.is_dense else "partial"
    dc = "x" if mode is DontCares.X else "code 0"
    if marker == "--":
        dc = "'-'" if mode is DontCares.X else "code 0"
    return [
        f"{marker} Generated by iotable: one table{origin}, {care}, {layout.rows} of {layout.space} rows.",
        f"{marker} address: {table.fan_in} input code(s) of {widths} bit(s), first input most significant.",
        f"{marker} codes: {layout.fan_out} output code(s) of {layout.output_width} bit(s), first output most "
        "significant.",
        f"{marker} Rows the table lacks and bit patterns that are no input code are don't-cares: {dc}.",
    ]


def table_verilog(table: IOTable, name: str, *, dont_cares: str = "x") -> str:
    """One IOTable as the source text of a combinational Verilog-2001 module (a ``case`` over the address).

    The module has an input port ``address`` (each input's code as a bit field, first input most
    significant) and an output port ``codes`` (each output's code as a bit field, first output most
    significant); see docs/hardware.md for the contract. Rows a partial table lacks and bit patterns that
    are not codes fall to the ``default`` branch: ``x`` with ``dont_cares="x"``, code 0 with ``"zero"``.

    Args:
        table: an IOTable whose outputs are codes (its unit ends in a quantizer).
        name: the module's name, a legal Verilog identifier that is not a keyword.
        dont_cares: ``"x"`` (synthesis may choose) or ``"zero"`` (code 0 everywhere the table has no row).

    Returns:
        The module's source text.

    Example:
        >>> from iotable import Domain, IOTable
        >>> t = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                   output_domain=Domain.uniform(1))
        >>> print(table_verilog(t, "xor2").split("begin")[1].split("endcase")[0].strip())
        case (address)
                    2'b0_0: codes = 1'b0;
                    2'b0_1: codes = 1'b1;
                    2'b1_0: codes = 1'b1;
                    2'b1_1: codes = 1'b0;
                    default: codes = 1'bx;
    """
    what = "table_verilog"
    layout = layout_of(table, what=what)
    name = check_name(name, language="verilog", what=what)
    mode = DontCares.parse(dont_cares, what=what)
    aw, cw = layout.address_bits, layout.code_bits
    blocks = aw > BLOCK_BITS
    head = "\n".join(_header(table, layout, mode, "//") + (_blocks_note(layout, "//") if blocks else []))
    return (
        f"{head}\n"
        f"module {name} (\n"
        f"    input  wire [{aw - 1}:0] address,\n"
        f"    output reg  [{cw - 1}:0] codes\n"
        ");\n"
        + (f"    reg [{(cw << (aw // 2)) - 1}:0] chunk;\n" if blocks else "")
        + "    always @(*) begin\n"
        + (_blocks_text(table, layout, "verilog", mode) if blocks else _case_text(table, layout, "verilog", mode))
        + "    end\n"
        "endmodule\n"
    )


def table_vhdl(table: IOTable, name: str, *, dont_cares: str = "x") -> str:
    """One IOTable as the source text of a combinational VHDL-2008 entity and architecture (a ``case``).

    Same ports and contract as :func:`table_verilog`: ``address : in std_logic_vector`` and
    ``codes : out std_logic_vector``, fields most significant first; the ``when others`` branch drives
    ``'-'`` (don't-care) with ``dont_cares="x"``, code 0 with ``"zero"``.

    Args:
        table: an IOTable whose outputs are codes (its unit ends in a quantizer).
        name: the entity's name, a legal VHDL basic identifier that is not a reserved word.
        dont_cares: ``"x"`` (drives ``'-'``, synthesis may choose) or ``"zero"``.

    Returns:
        The entity's source text (analyse with ``ghdl -a --std=08``).

    Example:
        >>> from iotable import Domain, IOTable
        >>> t = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                   output_domain=Domain.uniform(1))
        >>> print(table_vhdl(t, "xor2").split("case address is")[1].split("end case")[0].strip())
        when b"0_0" => codes <= b"0";
                    when b"0_1" => codes <= b"1";
                    when b"1_0" => codes <= b"1";
                    when b"1_1" => codes <= b"0";
                    when others => codes <= (others => '-');
    """
    what = "table_vhdl"
    layout = layout_of(table, what=what)
    name = check_name(name, language="vhdl", what=what)
    mode = DontCares.parse(dont_cares, what=what)
    aw, cw = layout.address_bits, layout.code_bits
    low = aw // 2
    blocks = aw > BLOCK_BITS
    head = "\n".join(_header(table, layout, mode, "--") + (_blocks_note(layout, "--") if blocks else []))
    select = f"to_integer(unsigned(address({low - 1} downto 0))) * {cw}"
    return (
        f"{head}\n"
        "library ieee;\n"
        "use ieee.std_logic_1164.all;\n" + ("use ieee.numeric_std.all;\n" if blocks else "") + "\n"
        f"entity {name} is\n"
        "    port (\n"
        f"        address : in  std_logic_vector({aw - 1} downto 0);\n"
        f"        codes   : out std_logic_vector({cw - 1} downto 0)\n"
        "    );\n"
        f"end entity {name};\n"
        "\n"
        f"architecture rtl of {name} is\n"
        + (f"    signal chunk : std_logic_vector({(cw << low) - 1} downto 0);\n" if blocks else "")
        + "begin\n"
        "    process (all)\n"
        "    begin\n"
        + (_blocks_text(table, layout, "vhdl", mode) if blocks else _case_text(table, layout, "vhdl", mode))
        + "    end process;\n"
        + (f"    codes <= chunk({select} + {cw - 1} downto {select});\n" if blocks else "")
        + "end architecture rtl;\n"
    )
