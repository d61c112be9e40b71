"""Exhaustive testbenches for one table module, in no language: the rows to drive and the vectors file.

The vectors file ``<name>_vectors.hex`` has one line per row the table holds, in address order: one
hexadecimal word whose low bits are the row's ``address`` followed by its expected ``codes`` (the word
``{address, codes}``, zero-padded on the left to whole hex digits). Both languages read the same file.

A bench (the printers write it: :func:`~iotable.hdl.table_bench`) drives each address, waits 1 time unit, and
compares ``codes`` with the expected word. It prints ``N/N vectors match`` and ends with exit status 0, or
prints the first mismatch as ``mismatch at vector I: address A expected E got G`` (fields separated by ``_``,
as in the module's case labels) and stops with a non-zero exit status.
"""

from __future__ import annotations

import numpy as np

from ..errors import HDLError
from ..table import IOTable
from .table import TableLayout, lines

__all__ = ["check_bench", "vectors", "vectors_file", "word_bits"]


def check_bench(table: IOTable, layout: TableLayout, *, what: str) -> None:
    """Refuse a table a bench cannot test: one without rows, or one whose vector word passes 64 bits."""
    if layout.rows == 0:
        msg = f"{what}: {table!r} holds no row, so there is nothing to test; give a table with rows"
        raise HDLError(msg)
    if layout.address_bits + layout.code_bits > 64:
        msg = (
            f"{what}: {table!r} needs {layout.address_bits} address and {layout.code_bits} code bits; "
            "expected at most 64 in all (one vector word per row)"
        )
        raise HDLError(msg)


def word_bits(layout: TableLayout) -> int:
    """Bits of a vector word as the bench reads it: ``{address, codes}`` rounded up to whole hex digits."""
    return 4 * -(-(layout.address_bits + layout.code_bits) // 4)


def vectors_file(name: str) -> str:
    """The name of the vectors file of the table module ``name``."""
    return f"{name}_vectors.hex"


def vectors(table: IOTable, layout: TableLayout) -> str:
    """One hex word ``{address, codes}`` per row, vectorized: shifted fields summed, then hex digits."""
    inputs = table.inputs.astype(np.uint64)
    outputs = table.outputs.astype(np.uint64)
    word = np.zeros(len(table), dtype=np.uint64)
    for j, offset in enumerate(layout.input_offsets):  # a loop over fields, not rows
        word |= inputs[:, j] << np.uint64(offset + layout.code_bits)
    for j, offset in enumerate(layout.output_offsets):
        word |= outputs[:, j] << np.uint64(offset)
    digits = word_bits(layout) // 4
    shifts = np.arange(4 * (digits - 1), -1, -4, dtype=np.uint64)
    nibbles = ((word[:, None] >> shifts) & np.uint64(15)).astype(np.uint8)
    chars = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nibbles]
    return lines([chars, "\n"], len(table))
