"""Exhaustive testbenches for one table module, in no language: the rows to drive and the vectors file.

The vectors file ``<name>_vectors.hex`` has one line per row the table holds, in address order: one
hexadecimal word whose low bits are the row's ``address`` followed by its expected ``codes`` (the word
``{address, codes}``, zero-padded on the left to whole hex digits, of any width). Both languages read the same
file. It is a :class:`~.table.Text` made a chunk of rows at a time, so a table of 2**24 rows gets its whole
vectors file in bounded memory.

A bench (the printers write it: :func:`~iotable.hdl.table_bench`) drives each address, waits 1 time unit, and
compares ``codes`` with the expected word. It prints ``N/N vectors match`` and ends with exit status 0, or
prints the first mismatch as ``mismatch at vector I: address A expected E got G`` (fields separated by ``_``,
as in the module's case labels) and stops with a non-zero exit status.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import numpy as np

from .. import bits as bitfields
from ..errors import HDLError
from ..table import IOTable
from .table import TableLayout, Text, lines, row_chunks

__all__ = ["check_bench", "vectors", "vectors_file", "word_bits"]


def check_bench(table: IOTable, layout: TableLayout, *, what: str) -> None:
    """Refuse a table a bench cannot test: one without rows."""
    if layout.rows == 0:
        msg = f"{what}: {table!r} holds no row, so there is nothing to test; give a table with rows"
        raise HDLError(msg)


def word_bits(layout: TableLayout) -> int:
    """Bits of a vector word as the bench reads it: ``{address, codes}`` rounded up to whole hex digits."""
    return 4 * -(-(layout.address_bits + layout.code_bits) // 4)


def vectors_file(name: str) -> str:
    """The name of the vectors file of the table module ``name``."""
    return f"{name}_vectors.hex"


def vectors(table: IOTable, layout: TableLayout) -> Text:
    """One hex word ``{address, codes}`` per row, made a chunk of rows at a time (:class:`~.table.Text`)."""
    return Text(partial(_vector_chunks, table, layout))


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _vector_chunks(table: IOTable, layout: TableLayout) -> Iterator[str]:
    """The vectors file's lines, a chunk of rows at a time: each row's bits (zero padding to whole bytes,
    address fields, code fields) packed into bytes and written as hex digits, so a word may be of any width."""
    digits = word_bits(layout) // 4
    pad = 8 * -(-digits // 2) - layout.address_bits - layout.code_bits  # whole bytes: one hex digit more if odd
    for inputs, outputs in row_chunks(table):
        n = len(outputs)
        bits = np.concatenate(
            [
                np.zeros((n, pad), np.uint8),
                bitfields.digits(inputs, layout.input_widths),
                bitfields.digits(outputs, (layout.output_width,) * layout.fan_out),
            ],
            axis=1,
        )
        packed = np.packbits(bits, axis=1)
        nibbles = np.stack([packed >> 4, packed & 15], axis=2).reshape(n, -1)[:, digits % 2 :]  # the padding's digit
        yield lines([_HEX[nibbles], "\n"], n)
