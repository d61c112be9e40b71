"""Exhaustive testbenches for one table module: every row the table holds, read from a vectors file.

The vectors file ``<name>_vectors.hex`` has one line per row the table holds, in address order: one
hexadecimal word whose low bits are the row's ``address`` followed by its expected ``codes`` (the word
``{address, codes}``, zero-padded on the left to whole hex digits). Both languages read the same file.

A bench drives each address, waits 1 time unit, and compares ``codes`` with the expected word. It prints
``N/N vectors match`` and ends with exit status 0, or prints the first mismatch as
``mismatch at vector I: address A expected E got G`` (fields separated by ``_``, as in the module's case
labels) and stops with a non-zero exit status (``$fatal`` / an assertion of severity failure).
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ..errors import HDLError, OptionError
from ..table import IOTable
from .names import check_name
from .table import TableLayout, _lines, layout_of

__all__ = ["Language", "table_bench"]


class Language(str, enum.Enum):
    """A hardware description language iotable writes."""

    VERILOG = "verilog"
    VHDL = "vhdl"

    @classmethod
    def parse(cls, value: Any, *, what: str) -> Language:
        if isinstance(value, Language):
            return value
        if isinstance(value, str) and value.lower() in {m.value for m in cls}:
            return cls(value.lower())
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown language {value!r}; expected one of {accepted}"
        raise OptionError(msg)


def _vectors(table: IOTable, layout: TableLayout) -> str:
    """One hex word ``{address, codes}`` per row, vectorized: shifted fields summed, then hex digits."""
    inputs = table.inputs.astype(np.uint64)
    outputs = table.outputs.astype(np.uint64)
    word = np.zeros(len(table), dtype=np.uint64)
    for j, offset in enumerate(layout.input_offsets):  # a loop over fields, not rows
        word |= inputs[:, j] << np.uint64(offset + layout.code_bits)
    for j, offset in enumerate(layout.output_offsets):
        word |= outputs[:, j] << np.uint64(offset)
    digits = -(-(layout.address_bits + layout.code_bits) // 4)
    shifts = np.arange(4 * (digits - 1), -1, -4, dtype=np.uint64)
    nibbles = ((word[:, None] >> shifts) & np.uint64(15)).astype(np.uint8)
    chars = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nibbles]
    return _lines([chars, "\n"], len(table))


def _verilog_bench(name: str, layout: TableLayout, vectors: str) -> str:
    aw, cw, rows = layout.address_bits, layout.code_bits, layout.rows
    word = 4 * -(-(aw + cw) // 4)
    fields_a = layout.input_slices("address", language="verilog")
    fields_e = layout.output_slices("expected", language="verilog")
    fields_c = layout.output_slices("codes", language="verilog")
    fmt = "mismatch at vector %0d: address {} expected {} got {}".format(
        "_".join(["%b"] * len(fields_a)), "_".join(["%b"] * len(fields_e)), "_".join(["%b"] * len(fields_c))
    )
    args = ", ".join(["row", *fields_a, *fields_e, *fields_c])
    return (
        f"// Exhaustive testbench of table module {name}: every row it holds, from {vectors}.\n"
        f"module {name}_tb;\n"
        f"    reg  [{word - 1}:0] vectors [0:{rows - 1}];\n"
        f"    reg  [{aw - 1}:0] address;\n"
        f"    reg  [{cw - 1}:0] expected;\n"
        f"    wire [{cw - 1}:0] codes;\n"
        "    integer row;\n"
        "\n"
        f"    {name} dut (.address(address), .codes(codes));\n"
        "\n"
        "    initial begin\n"
        f'        $readmemh("{vectors}", vectors);\n'
        f"        for (row = 0; row < {rows}; row = row + 1) begin\n"
        f"            {{address, expected}} = vectors[row][{aw + cw - 1}:0];\n"
        "            #1;\n"
        "            if (codes !== expected) begin\n"
        f'                $display("{fmt}", {args});\n'
        f'                $fatal(1, "table {name} differs from {vectors}");\n'
        "            end\n"
        "        end\n"
        f'        $display("%0d/%0d vectors match", row, {rows});\n'
        "        $finish;\n"
        "    end\n"
        "endmodule\n"
    )


def _vhdl_bench(name: str, layout: TableLayout, vectors: str) -> str:
    aw, cw, rows = layout.address_bits, layout.code_bits, layout.rows
    word = 4 * -(-(aw + cw) // 4)

    def shown(slices: list[str]) -> str:
        return ' & "_" & '.join(f"to_string({s})" for s in slices)

    address = shown(layout.input_slices("address", language="vhdl"))
    expected = shown(layout.output_slices("expected", language="vhdl"))
    codes = shown(layout.output_slices("codes", language="vhdl"))
    return (
        f"-- Exhaustive testbench of table entity {name}: every row it holds, from {vectors}.\n"
        "library ieee;\n"
        "use ieee.std_logic_1164.all;\n"
        "use std.textio.all;\n"
        "\n"
        f"entity {name}_tb is\n"
        f"end entity {name}_tb;\n"
        "\n"
        f"architecture bench of {name}_tb is\n"
        f"    signal address : std_logic_vector({aw - 1} downto 0);\n"
        f"    signal codes : std_logic_vector({cw - 1} downto 0);\n"
        "begin\n"
        f"    dut : entity work.{name} port map (address => address, codes => codes);\n"
        "\n"
        "    process\n"
        f'        file vectors : text open read_mode is "{vectors}";\n'
        "        variable l, text_line : line;\n"
        f"        variable word : std_logic_vector({word - 1} downto 0);\n"
        f"        variable expected : std_logic_vector({cw - 1} downto 0);\n"
        "    begin\n"
        f"        for row in 0 to {rows - 1} loop\n"
        "            readline(vectors, l);\n"
        "            hread(l, word);\n"
        f"            address <= word({aw + cw - 1} downto {cw});\n"
        f"            expected := word({cw - 1} downto 0);\n"
        "            wait for 1 ns;\n"
        "            if codes /= expected then\n"
        '                write(text_line, string\'("mismatch at vector " & integer\'image(row) & ": address " &\n'
        f'                    {address} & " expected " &\n'
        f'                    {expected} & " got " &\n'
        f"                    {codes}));\n"
        "                writeline(output, text_line);\n"
        f'                assert false report "table {name} differs from {vectors}" severity failure;\n'
        "            end if;\n"
        "        end loop;\n"
        f"        write(text_line, string'(integer'image({rows}) & \"/\" & integer'image({rows}) &\n"
        '            " vectors match"));\n'
        "        writeline(output, text_line);\n"
        "        wait;\n"
        "    end process;\n"
        "end architecture bench;\n"
    )


def table_bench(table: IOTable, name: str, *, language: str) -> dict[str, str]:
    """An exhaustive, self-checking testbench for the table module ``name`` (from :func:`table_verilog` or
    :func:`table_vhdl`): every row the table holds, with its expected codes.

    The bench reads ``<name>_vectors.hex`` (``$readmemh`` in Verilog, ``std.textio`` in VHDL) from the
    directory the simulator runs in, drives every address, compares every output, and prints
    ``N/N vectors match`` (exit status 0) or the first mismatch, ``mismatch at vector I: address A expected
    E got G``, and stops with a non-zero exit status. The returned files are the bench only: add the table
    module (same ``name``) to simulate it, e.g. with :func:`simulate_files`.

    Args:
        table: the IOTable the module was generated from (outputs must be codes; at least one row).
        name: the table module's name; the bench is ``<name>_tb``.
        language: ``"verilog"`` or ``"vhdl"``.

    Returns:
        ``{"<name>_tb.v" or "<name>_tb.vhd": bench text, "<name>_vectors.hex": vectors}``.

    Example:
        >>> from iotable import Domain, IOTable
        >>> t = IOTable.dense([[0], [1], [1], [0]], input_domains=[Domain.uniform(1)] * 2,
        ...                   output_domain=Domain.uniform(1))
        >>> files = table_bench(t, "xor2", language="verilog")
        >>> sorted(files), files["xor2_vectors.hex"].split()
        (['xor2_tb.v', 'xor2_vectors.hex'], ['0', '3', '5', '6'])
    """
    what = "table_bench"
    layout = layout_of(table, what=what)
    lang = Language.parse(language, what=what)
    name = check_name(name, language=lang.value, what=what)
    if layout.rows == 0:
        msg = f"table_bench: {table!r} holds no row, so there is nothing to test; give a table with rows"
        raise HDLError(msg)
    if layout.address_bits + layout.code_bits > 64:
        msg = (
            f"table_bench: {table!r} needs {layout.address_bits} address and {layout.code_bits} code bits; "
            "expected at most 64 in all (one vector word per row)"
        )
        raise HDLError(msg)
    vectors = f"{name}_vectors.hex"
    if lang is Language.VERILOG:
        bench = {f"{name}_tb.v": _verilog_bench(name, layout, vectors)}
    else:
        bench = {f"{name}_tb.vhd": _vhdl_bench(name, layout, vectors)}
    return {**bench, vectors: _vectors(table, layout)}
