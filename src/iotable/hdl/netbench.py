"""Self-checking testbenches of a whole design, and the hex words of its input and output vectors.

A bench reads ``<top>_inputs.hex`` (one input word ``in_data`` per line) and ``<top>_expected.hex`` (one
output word ``out_data`` per line), in hexadecimal, zero-padded on the left to whole hex digits. It drives the
top module through its valid/ready handshake with a clock of 10 time units, holding ``in_valid`` low one
cycle in 7 and ``out_ready`` low one cycle in 5 so that stalls are exercised, and compares every output it
takes with the next expected word. It prints ``N/N vectors match`` and exits with status 0, or prints the
first mismatch, ``mismatch at vector V: output element E (node 'NAME' unit U position P) expected B got B``
(codes in binary), and stops with a non-zero exit status. A streaming design takes a vector as several input
words and gives ``beats`` output words per vector (one per position): the bench counts vectors, and a mismatch
names the vector and the position (``mismatch at vector V position P: ...``). A *printing* bench (what
:func:`iotable.hdl.simulate` runs) prints every output word in hexadecimal instead of comparing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..bits import digits as binary_digits
from .names import verilog_string, vhdl_string
from .table import _lines

__all__ = ["bench_files", "parse_words", "words"]

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def words(codes: np.ndarray, widths: np.ndarray) -> str:
    """One hexadecimal word per row of ``codes`` ``(N, elements)``: element i at bits ``[offset_i +: width_i]``
    (element 0 lowest), zero-padded on the left to whole hex digits; one line each. Vectorized."""
    n = codes.shape[0]
    bits = binary_digits(np.ascontiguousarray(codes[:, ::-1]), [int(w) for w in widths[::-1]])  # most significant first
    total = bits.shape[1]
    digits = -(-total // 4)
    padded = np.zeros((n, 4 * digits), dtype=np.uint8)
    padded[:, 4 * digits - total :] = bits
    nibbles = padded.reshape(n, digits, 4) @ np.array([8, 4, 2, 1], dtype=np.uint8)
    return _lines([_HEX[nibbles], "\n"], n)


def parse_words(text: str, widths: np.ndarray, *, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The codes ``(N, elements)`` of hex words (one a line, as :func:`words` writes them), and a mask of the
    elements holding bits that are not 0 or 1 (``x``, ``z``, ``-``, ``u``), whose codes read as 0."""
    lines = [line.strip().lower() for line in text.splitlines() if line.strip()]
    total = int(widths.sum())
    digits = -(-total // 4)
    if not lines:
        return np.zeros((0, len(widths)), np.int64), np.zeros((0, len(widths)), bool)
    raw = np.frombuffer("".join(line[-digits:].rjust(digits, "0") for line in lines).encode("ascii"), np.uint8)
    raw = raw.reshape(len(lines), digits)
    lookup = np.full(256, 255, dtype=np.uint8)
    lookup[_HEX] = np.arange(16, dtype=np.uint8)
    nibbles = lookup[raw]
    unknown_nibble = nibbles == 255
    bits = ((np.where(unknown_nibble, 0, nibbles)[..., None] >> np.array([3, 2, 1, 0], np.uint8)) & 1).reshape(
        len(lines), -1
    )
    unknown_bits = np.repeat(unknown_nibble, 4, axis=1)
    bits, unknown_bits = bits[:, 4 * digits - total :], unknown_bits[:, 4 * digits - total :]
    # Fields most significant first: the last element first.
    ends = np.cumsum(widths[::-1])
    starts = ends - widths[::-1]
    codes = np.zeros((len(lines), len(widths)), dtype=np.int64)
    unknown = np.zeros((len(lines), len(widths)), dtype=bool)
    for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):  # a loop over fields, not rows
        place = 1 << np.arange(b - a - 1, -1, -1, dtype=np.int64)
        codes[:, len(widths) - 1 - k] = bits[:, a:b].astype(np.int64) @ place
        unknown[:, len(widths) - 1 - k] = unknown_bits[:, a:b].any(axis=1)
    del what
    return codes, unknown


def _fields(widths: np.ndarray) -> list[tuple[int, int]]:
    """``(high, low)`` bits of each element (element 0 lowest)."""
    lsb = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    return [(int(lo + w - 1), int(lo)) for lo, w in zip(lsb.tolist(), widths.tolist())]


def _verilog_bench(
    top: str, count: _Count, inw: int, outw: int, checks: list[tuple[int, int, str]], *, printing: bool
) -> str:
    n, m, limit = count.inputs, count.outputs, count.limit
    in_digits, out_digits = 4 * -(-inw // 4), 4 * -(-outw // 4)
    lines = [
        f"// Testbench of {top}: {count.vectors} vectors from {top}_inputs.hex"
        + ("; prints every output word." if printing else f", compared with {top}_expected.hex."),
        f"module {top}_tb;",
        "    reg clk = 1'b0;",
        "    reg rst = 1'b1;",
        "    reg in_valid = 1'b0;",
        "    reg out_ready = 1'b0;",
        f"    reg  [{inw - 1}:0] in_data = {inw}'b0;",
        "    wire in_ready, out_valid;",
        f"    wire [{outw - 1}:0] out_data;",
        f"    reg  [{in_digits - 1}:0] inputs [0:{n - 1}];",
        f"    reg  [{out_digits - 1}:0] expected [0:{m - 1}];",
        f"    reg  [{outw - 1}:0] want;",
        "    integer sent = 0, got = 0, cycle = 0;",
        "",
        f"    {top} dut (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready), .in_data(in_data),",
        "        .out_valid(out_valid), .out_ready(out_ready), .out_data(out_data));",
        "",
        "    always #5 clk = ~clk;",
        "    initial begin",
        f'        $readmemh("{top}_inputs.hex", inputs);',
    ]
    if not printing:
        lines.append(f'        $readmemh("{top}_expected.hex", expected);')
    lines += [
        "        #20 rst = 1'b0;",
        "    end",
        "",
        "    always @(posedge clk) begin",
        "        if (!rst) begin",
        "            cycle = cycle + 1;",
        "            if (in_valid && in_ready) sent = sent + 1;",
        "            if (out_valid && out_ready) begin",
    ]
    if printing:
        lines.append('                $display("%h", out_data);')
    else:
        lines += [
            f"                want = expected[got][{outw - 1}:0];",
            "                if (out_data !== want) begin",
        ]
        at = "vector %0d position %0d" if count.beats > 1 else "vector %0d"
        index = f"got / {count.beats}, got % {count.beats}" if count.beats > 1 else "got"
        fmt = "mismatch at {at}: output element {e} ({where}) expected %b got %b"
        for e, (hi, lo, where) in enumerate(checks):
            text = fmt.format(at=at, e=e, where=verilog_string(where))
            lines.append(
                f"                    if (out_data[{hi}:{lo}] !== want[{hi}:{lo}]) begin "
                f'$display("{text}", {index}, want[{hi}:{lo}], out_data[{hi}:{lo}]); '
                f'$fatal(1, "{top} differs from {top}_expected.hex"); end'
            )
        lines.append("                end")
    lines += [
        "                got = got + 1;",
        f"                if (got == {m}) begin",
        f'                    $display("%0d/%0d vectors match", got / {count.beats}, {count.vectors});'
        if not printing
        else "",
        "                    $finish;",
        "                end",
        "            end",
        f"            if (cycle > {limit}) begin",
        '                $display("timeout: %0d of %0d outputs after %0d cycles", got, ' + f"{m}, cycle);",
        f'                $fatal(1, "{top} stopped producing outputs");',
        "            end",
        f"            in_valid <= (sent < {n}) && (cycle % 7 != 3);",
        f"            in_data <= inputs[sent < {n} ? sent : 0][{inw - 1}:0];",
        "            out_ready <= (cycle % 5 != 2);",
        "        end",
        "    end",
        "endmodule",
        "",
    ]
    return "\n".join(line for line in lines if line != "")


def _vhdl_bench(
    top: str, count: _Count, inw: int, outw: int, checks: list[tuple[int, int, str]], *, printing: bool
) -> str:
    n, m, limit = count.inputs, count.outputs, count.limit
    at = (
        f"integer'image(got / {count.beats}) & \" position \" & integer'image(got mod {count.beats})"
        if count.beats > 1
        else "integer'image(got)"
    )
    in_digits, out_digits = 4 * -(-inw // 4), 4 * -(-outw // 4)
    check_lines = []
    for e, (hi, lo, where) in enumerate(checks):
        check_lines += [
            f"                        if out_data({hi} downto {lo}) /= word_out({hi} downto {lo}) then",
            f'                            write(msg, string\'("mismatch at vector " & {at} & '
            f'": output element {e} (' + vhdl_string(where) + ') expected " &',
            f'                                to_string(word_out({hi} downto {lo})) & " got " & '
            f"to_string(out_data({hi} downto {lo}))));",
            "                            writeline(output, msg);",
            f'                            assert false report "{top} differs from {top}_expected.hex"',
            "                                severity failure;",
            "                        end if;",
        ]
    if printing:
        compare = [
            "                    word_out := (others => '0');",
            f"                    word_out({outw - 1} downto 0) := out_data;",
            "                    write(msg, string'(to_hstring(word_out)));",
            "                    writeline(output, msg);",
        ]
    else:
        compare = [
            "                    readline(expected, l);",
            "                    hread(l, word_out);",
            f"                    if out_data /= word_out({outw - 1} downto 0) then",
            *check_lines,
            "                    end if;",
        ]
    lines = [
        f"-- Testbench of {top}: {count.vectors} vectors from {top}_inputs.hex"
        + ("; prints every output word." if printing else f", compared with {top}_expected.hex."),
        "library ieee;",
        "use ieee.std_logic_1164.all;",
        "use std.textio.all;",
        "",
        f"entity {top}_tb is",
        f"end entity {top}_tb;",
        "",
        f"architecture bench of {top}_tb is",
        "    signal clk : std_logic := '0';",
        "    signal rst : std_logic := '1';",
        "    signal in_valid, in_ready, out_valid : std_logic := '0';",
        "    signal out_ready : std_logic := '0';",
        f"    signal in_data : std_logic_vector({inw - 1} downto 0) := (others => '0');",
        f"    signal out_data : std_logic_vector({outw - 1} downto 0);",
        "begin",
        f"    dut : entity work.{top} port map (clk => clk, rst => rst, in_valid => in_valid, in_ready => in_ready,",
        "        in_data => in_data, out_valid => out_valid, out_ready => out_ready, out_data => out_data);",
        "",
        "    clk <= not clk after 5 ns;",
        "    rst <= '0' after 20 ns;",
        "",
        "    process (clk)",
        f'        file inputs : text open read_mode is "{top}_inputs.hex";',
        f'        file expected : text open read_mode is "{top}_expected.hex";' if not printing else "",
        "        variable l, msg : line;",
        f"        variable word_in : std_logic_vector({in_digits - 1} downto 0);",
        f"        variable word_out : std_logic_vector({out_digits - 1} downto 0);",
        "        variable sent, got, cycle : integer := 0;",
        "        variable loaded : boolean := false;",
        "    begin",
        "        if rising_edge(clk) and rst = '0' then",
        "            cycle := cycle + 1;",
        "            if in_valid = '1' and in_ready = '1' then",
        "                sent := sent + 1;",
        "                loaded := false;",
        "            end if;",
        "            if out_valid = '1' and out_ready = '1' then",
        *compare,
        "                got := got + 1;",
        f"                if got = {m} then",
        f"                    write(msg, string'(integer'image(got / {count.beats}) & \"/\" & "
        f'integer\'image({count.vectors}) & " vectors match"));'
        if not printing
        else "",
        "                    writeline(output, msg);" if not printing else "",
        "                    std.env.finish;",
        "                end if;",
        "            end if;",
        f"            if cycle > {limit} then",
        f'                assert false report "{top} stopped producing outputs: " & integer\'image(got) & " of {m}"',
        "                    severity failure;",
        "            end if;",
        f"            if sent < {n} and not loaded then",
        "                readline(inputs, l);",
        "                hread(l, word_in);",
        f"                in_data <= word_in({inw - 1} downto 0);",
        "                loaded := true;",
        "            end if;",
        f"            if sent < {n} and cycle mod 7 /= 3 then",
        "                in_valid <= '1';",
        "            else",
        "                in_valid <= '0';",
        "            end if;",
        "            if cycle mod 5 /= 2 then",
        "                out_ready <= '1';",
        "            else",
        "                out_ready <= '0';",
        "            end if;",
        "        end if;",
        "    end process;",
        "end architecture bench;",
        "",
    ]
    return "\n".join(line for line in lines if line != "")


@dataclass(frozen=True)
class _Count:
    """Words in and out of a bench: ``vectors`` samples of ``beats`` output words each (1 unless streaming),
    ``inputs`` input words, and ``limit`` cycles after which the bench gives up."""

    vectors: int
    inputs: int
    beats: int
    interval: int

    @property
    def outputs(self) -> int:
        return self.vectors * self.beats

    @property
    def limit(self) -> int:
        # Stalls: the bench holds in_valid low one cycle in 7 and out_ready one in 5.
        return 8 * self.vectors * max(self.interval, self.beats, self.inputs // max(self.vectors, 1)) + 1000


def bench_files(
    top: str,
    language: str,
    inputs: np.ndarray,
    in_widths: np.ndarray,
    out_widths: np.ndarray,
    origins: list[str],
    *,
    expected: np.ndarray | None,
    vectors: int | None = None,
    beats: int = 1,
    interval: int = 1,
) -> dict[str, str]:
    """The bench of ``top`` and its vector files: checking (``expected`` codes given) or printing (``None``).

    ``inputs`` holds one input word per row, ``expected`` one output word per row; a streaming design takes
    ``vectors`` samples as several words each and gives ``beats`` output words per sample, one every
    ``interval`` cycles at best."""
    count = _Count(vectors if vectors is not None else inputs.shape[0], inputs.shape[0], beats, interval)
    inw, outw = int(in_widths.sum()), int(out_widths.sum())
    checks = [(hi, lo, where) for (hi, lo), where in zip(_fields(out_widths), origins)]
    printing = expected is None
    make = _verilog_bench if language == "verilog" else _vhdl_bench
    suffix = ".v" if language == "verilog" else ".vhd"
    files = {
        f"{top}_tb{suffix}": make(top, count, inw, outw, checks, printing=printing),
        f"{top}_inputs.hex": words(inputs, in_widths),
    }
    if expected is not None:
        files[f"{top}_expected.hex"] = words(expected, out_widths)
    return files
