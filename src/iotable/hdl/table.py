"""One IOTable as one combinational module, whatever the language: its ports, and the rows of its ``case`` over
the packed input bits. The printers (:mod:`.verilog`, :mod:`.vhdl`) write the text around what this computes.

The I/O contract (docs/hardware.md has worked examples):

- ``address``: input i's code as an unsigned bit field of ``max(1, ceil(log2(len(domain_i))))`` bits, the
  fields side by side with the **first input most significant** (the table's own digit order; when every
  domain has a power-of-two size this *is* the table's packed address).
- ``codes``: output j's code as a field of ``max(1, ceil(log2(len(output_domain))))`` bits, the **first
  output most significant**.
- Don't-cares: addresses a partial table lacks, and bit patterns that are not codes of a domain whose size
  is not a power of two, fall to the ``case``'s default: all don't-care bits with ``dont_cares="x"``, code 0
  with ``"zero"``.

Tables of more than :data:`FLAT_BITS` address bits are written as **nested** cases: an outer ``case`` over
the leading input fields whose branches are ``case`` statements over the next fields, each level at most
:data:`LEVEL_BITS` bits wide (whole fields). The rows and the contract are the same; a flat ``case`` of
2**18 branches takes iverilog minutes to compile and milliseconds per lookup (it compares branch by branch),
and verilator longer still, while the nested form compiles in about a second.

Tables of more than :data:`BLOCK_BITS` address bits are written as **blocks**, a row a line being more text
than simulators hold (the digits CNN's 32 tables of 2**16 to 2**18 rows are 270 MB of nested cases, past
ghdl's limits): a ``case`` over the high half of the address (more, where a block's constant would pass
:data:`BLOCK_WIDTH` bits: :func:`block_low`) picks a constant holding the codes of the
``2**L`` addresses that share it (address ``j`` of the block at bits ``[j*C +: C]``, ``C`` the code bits),
and the low ``L`` address bits select the codes from it. The function and the ports are the same; synthesis
reads the constant select as multiplexers, as it reads a ``case``.

The ``case`` body is built as byte matrices (a row per table row, a column per character) with numpy and
interleaved with the nested levels' headers by one sort, never a Python loop over rows; case labels separate
the input fields with ``_`` so that a reader sees them.

A table's text is a :class:`Text`: made on demand, a chunk at a time, so that a table of 2**24 rows and its
vectors are written to disk in bounded memory (:func:`~.tools.write_files` streams it). Blocks are made in
groups (:func:`block_groups`) from rows read in chunks (:func:`row_chunks`), each chunk vectorized.
"""

from __future__ import annotations

import enum
import math
from collections import UserString
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import numpy as np

from .. import bits as bitfields
from ..errors import HDLError, OptionError
from ..table import IOTable

__all__ = [
    "BLOCK_BITS",
    "BLOCK_WIDTH",
    "CHUNK_ROWS",
    "FLAT_BITS",
    "LEVEL_BITS",
    "Blocks",
    "CaseText",
    "DontCares",
    "TableLayout",
    "Text",
    "bit_chars",
    "block_groups",
    "block_low",
    "case_text",
    "header_lines",
    "in_blocks",
    "layout_of",
    "levels_of",
    "lines",
    "row_chunks",
]

#: Tables of at most this many address bits are one flat ``case``.
FLAT_BITS = 12
#: Larger tables nest cases; each level spans whole input fields of at most this many bits (or one field).
LEVEL_BITS = 10
#: Tables of more address bits than this are written as blocks of rows selected by the high address bits.
BLOCK_BITS = 14
#: A block's constant has at most this many bits where the table allows (iverilog's lexer refuses a literal of
#: 16,384 digits: a 2**24-row table of 8-bit codes, in halves, would have 32,768).
BLOCK_WIDTH = 8192
#: Rows of a table read (and written as text) at a time: large tables are made a chunk at a time.
CHUNK_ROWS = 1 << 16
#: Bytes of block constants made at a time.
_GROUP_BYTES = 1 << 24


class Text(UserString):
    """Text made on demand, in chunks: :meth:`chunks` calls ``make`` again each time, so a large table's text is
    written (:func:`~.tools.write_files` streams it) without ever being held whole. Read as a string (``==``,
    ``in``, ``splitlines``, ``str(text)``...), it is joined first.

    Example:
        >>> text = Text(lambda: iter(["module a;", " endmodule\\n"]))
        >>> list(text.chunks()), text == "module a; endmodule\\n", text.splitlines()
        (['module a;', ' endmodule\\n'], True, ['module a; endmodule'])
    """

    def __init__(self, make: str | Callable[[], Iterator[str]]) -> None:
        # UserString's methods make new values from a str
        self._make = partial(iter, (make,)) if isinstance(make, str) else make

    @property  # type: ignore[override]
    def data(self) -> str:
        """The whole text, joined."""
        return "".join(self._make())

    @data.setter
    def data(self, value: str) -> None:
        self._make = partial(iter, (value,))

    def chunks(self) -> Iterator[str]:
        """The text's chunks, made again."""
        return iter(self._make())

    def __repr__(self) -> str:
        return f"Text({self._make!r})"


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

    @property
    def input_ranges(self) -> tuple[tuple[int, int], ...]:
        """``(highest, lowest)`` bit of each input's field in ``address``, first input first."""
        return tuple((offset + width - 1, offset) for width, offset in zip(self.input_widths, self.input_offsets))

    @property
    def output_ranges(self) -> tuple[tuple[int, int], ...]:
        """``(highest, lowest)`` bit of each output's field in ``codes``, first output first."""
        return tuple((offset + self.output_width - 1, offset) for offset in self.output_offsets)

    def level_range(self, level: tuple[int, int]) -> tuple[int, int]:
        """``(highest, lowest)`` address bit of the fields ``level`` (``(first, end)``) spans."""
        first, end = level
        return self.input_offsets[first] + self.input_widths[first] - 1, self.input_offsets[end - 1]


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


def bit_chars(codes: np.ndarray, widths: tuple[int, ...], *, separator: bool) -> np.ndarray:
    """ASCII '0'/'1' of each column of ``codes`` (N, k), fields most significant first, optionally '_'-joined."""
    bits = bitfields.digits(codes, widths) + np.uint8(ord("0"))
    if not separator or len(widths) < 2:
        return bits
    cuts = np.cumsum(widths)[:-1]
    return np.insert(bits, cuts, np.uint8(ord("_")), axis=1)


def lines(parts: list[np.ndarray | str], rows: int) -> str:
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


Bits = tuple[int, int]


class CaseText(Protocol):
    """The text of one language's (nested) ``case`` over ``address`` driving ``codes``: a printer makes one for a
    table; :func:`case_text` puts it around the rows. ``level`` 0 is the outermost case."""

    def case(self, bits: Bits | None) -> str:
        """The line opening the outermost case, over address bits ``bits`` (``None``: the whole address)."""
        ...

    def row(self, level: int, width: int) -> tuple[str, str, str]:
        """The text before a row's label of ``width`` bits, between it and the row's codes, and after them."""
        ...

    def branch(self, level: int, width: int, inner: Bits) -> tuple[str, str]:
        """The text before and after the label of an item of ``level`` that opens the case over ``inner``."""
        ...

    def close(self, level: int) -> str:
        """The default item and the end of a case of ``level``."""
        ...


def case_text(table: IOTable, layout: TableLayout, text: CaseText) -> str:
    """The whole (nested) ``case`` statement of ``table``, from its first line to its end."""
    widths = layout.input_widths
    levels = levels_of(widths)
    depth = len(levels) - 1
    value = bit_chars(table.outputs, (layout.output_width,) * layout.fan_out, separator=True)
    first, end = levels[-1]
    label = bit_chars(table.inputs[:, first:end], widths[first:end], separator=True)
    before, middle, after = text.row(depth, sum(widths[first:end]))
    items = lines([before, label, middle, value, after], layout.rows)
    if depth == 0:
        return text.case(None) + items + text.close(0)
    return text.case(layout.level_range(levels[0])) + _nested(table, layout, text, levels, items) + text.close(0)


def _nested(table: IOTable, layout: TableLayout, text: CaseText, levels: list[tuple[int, int]], items: str) -> str:
    """The rows' items (fixed-width lines, in address order) with the headers and ends of the nested cases
    interleaved: before a row that starts a new group at level k, the cases of levels k+1.. close (innermost
    first) and open again (outermost first). One stable sort over all segments, no loop over rows."""
    rows, depth = layout.rows, len(levels) - 1
    if rows == 0:  # a partial table without rows: the outermost case holds its default alone
        return ""
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
        label = bit_chars(inputs[starts, first:stop], widths[first:stop], separator=True)
        before, after = text.branch(k, sum(widths[first:stop]), layout.level_range(levels[k + 1]))
        segments.append((starts, depth + k, _matrix([before, label, after], len(starts))))
        ends = np.append(starts[1:], rows)  # a group closes before the next one at its level, or at the end
        segments.append((ends, depth - 1 - k, _matrix([text.close(k + 1)], len(ends))))
    return _interleave(segments)


def _matrix(parts: list[np.ndarray | str], rows: int) -> np.ndarray:
    """:func:`lines`'s rows as a byte matrix ``(rows, width)``."""
    text = lines(parts, rows).encode("ascii")
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


@dataclass(frozen=True)
class Blocks:
    """Some blocks of a table (see the module docstring): the ``high`` address bits pick a block, a constant of
    ``width`` bits holding the codes of the ``2**low`` addresses that share them; only blocks holding a code
    other than the fill are listed (the others fall to the default).

    ``labels`` / ``constants``: the ASCII bits of each listed block's number and constant, one row each.
    """

    high: int
    low: int
    width: int
    labels: np.ndarray
    constants: np.ndarray

    @property
    def count(self) -> int:
        """How many blocks are listed."""
        return len(self.labels)


def row_chunks(table: IOTable, rows: int = CHUNK_ROWS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The input codes and outputs of ``table``'s rows, ``rows`` at a time in address order: a dense table's
    codes are computed a chunk at a time, never for the whole table at once."""
    for first in range(0, len(table), rows):
        stop = min(first + rows, len(table))
        inputs = _dense_inputs(table.radices, first, stop) if table.is_dense else table.inputs[first:stop]
        yield inputs, table.outputs[first:stop]


def _dense_inputs(radices: tuple[int, ...], first: int, stop: int) -> np.ndarray:
    """The input codes of addresses ``first..stop-1`` of a dense table, ``(rows, fan_in)`` ``int64``: the
    address's mixed-radix digits, the last input least significant (a shift and a mask for power-of-two
    radices)."""
    address = np.arange(first, stop, dtype=np.int64)
    columns = []
    for radix in reversed(radices):  # a loop over inputs, not rows
        if radix & (radix - 1) == 0:
            columns.append(address & (radix - 1))
            address = address >> (radix.bit_length() - 1)
        else:
            address, code = np.divmod(address, radix)
            columns.append(code)
    return np.stack(columns[::-1], axis=1) if columns else np.zeros((stop - first, 0), np.int64)


def _bit_address(inputs: np.ndarray, layout: TableLayout) -> np.ndarray:
    """Each row's ``address`` port value: its input fields side by side."""
    address = np.zeros(len(inputs), dtype=np.int64)
    for j, offset in enumerate(layout.input_offsets):  # a loop over fields, not rows
        address |= inputs[:, j].astype(np.int64) << offset
    return address


def block_groups(table: IOTable, layout: TableLayout, fill: str) -> Iterator[Blocks]:
    """``table`` in blocks, a group of blocks at a time in address order (each group's constants at most about
    16 MB); addresses the table lacks (and bit patterns that are no code) hold the character ``fill``.

    Rows are read in chunks; the rows of a chunk's last block wait for the next chunk (a block may straddle
    two), so each block is made once, from all its rows."""
    low = block_low(layout)
    address, chars = np.zeros(0, np.int64), np.zeros((0, layout.code_bits), np.uint8)
    for inputs, outputs in row_chunks(table, max(CHUNK_ROWS, 1 << low)):
        address = np.concatenate([address, _bit_address(inputs, layout)])
        codes = bit_chars(outputs, (layout.output_width,) * layout.fan_out, separator=False)
        chars = np.concatenate([chars, codes])
        done = int(np.searchsorted(address >> low, address[-1] >> low))  # the last block may go on
        yield from _groups(layout, fill, address[:done], chars[:done])
        address, chars = address[done:], chars[done:]
    yield from _groups(layout, fill, address, chars)


def _groups(layout: TableLayout, fill: str, address: np.ndarray, chars: np.ndarray) -> Iterator[Blocks]:
    """The blocks holding the rows at ``address`` (ascending, whole blocks) with code characters ``chars``, in
    groups of at most :data:`_GROUP_BYTES` of constants."""
    bits, cw = layout.address_bits, layout.code_bits
    low = block_low(layout)
    high, width = bits - low, cw << low
    block = address >> low
    starts = np.flatnonzero(np.diff(block, prepend=-1))  # the first row of each block that holds rows
    per_group = max(1, _GROUP_BYTES // max(width, 1))
    for g in range(0, len(starts), per_group):  # a loop over groups of blocks, never over rows
        first = int(starts[g])
        stop = int(starts[g + per_group]) if g + per_group < len(starts) else len(address)
        count = min(per_group, len(starts) - g)
        slot = np.repeat(np.arange(count), np.diff(np.append(starts[g : g + count], stop)))
        matrix = np.full((count, 1 << low, cw), ord(fill), dtype=np.uint8)
        matrix[slot, address[first:stop] & ((1 << low) - 1)] = chars[first:stop]
        # block b's constant: address b*2**low + j at bits [j*cw +: cw], so the highest address comes first
        constants = matrix[:, ::-1, :].reshape(count, width)
        used = np.flatnonzero(~(constants == ord(fill)).all(axis=1))
        labels = bitfields.digits(block[starts[g : g + count][used]].reshape(-1, 1), [high]) + np.uint8(ord("0"))
        yield Blocks(high, low, width, labels, constants[used])


def block_low(layout: TableLayout) -> int:
    """The address bits a block spans (its low bits select the codes in it): half the address, fewer where the
    block's constant would pass :data:`BLOCK_WIDTH` bits (one at least)."""
    return max(1, min(layout.address_bits // 2, (BLOCK_WIDTH // max(layout.code_bits, 1)).bit_length() - 1))


def in_blocks(layout: TableLayout) -> bool:
    """Whether a table of this layout is written as blocks rather than as a ``case`` over its rows."""
    return layout.address_bits > BLOCK_BITS


def header_lines(table: IOTable, layout: TableLayout, *, dont_cares: str, netlist: bool = False) -> list[str]:
    """The text of a table module's header comment (unescaped: the printer escapes it); ``dont_cares``: what the
    module drives where the table has no row, in words; ``netlist``: the module is the table's LUT netlist."""
    origin = "" if table.layer is None else f" from layer {table.layer}"
    origin += "" if table.unit is None else f" unit {table.unit}"
    widths = ", ".join(str(w) for w in layout.input_widths)
    care = "dense" if table.is_dense else "partial"
    form = ", as its LUT netlist" if netlist else ""
    text = [
        f"Generated by iotable: one table{origin}, {care}, {layout.rows} of {layout.space} rows{form}.",
        f"address: {table.fan_in} input code(s) of {widths} bit(s), first input most significant.",
        f"codes: {layout.fan_out} output code(s) of {layout.output_width} bit(s), first output most significant.",
    ]
    if netlist:
        return text
    text.append(f"Rows the table lacks and bit patterns that are no input code are don't-cares: {dont_cares}.")
    if in_blocks(layout):
        low, cw = block_low(layout), layout.code_bits
        text.append(
            f"In blocks: chunk holds the codes of the {1 << low} addresses that share the high address bits, "
            f"address j of the block at bits [j*{cw} +: {cw}]; the low {low} address bits pick them."
        )
    return text
