"""A streaming netlist (:mod:`iotable.hdl._stream`) as Verilog-2001 or VHDL-2008 source text.

The top module's file holds the layer and pool modules (as the unrolled style writes them), one module per
stage (pad, line buffer, register) and the top, which chains the stages' valid/ready handshakes: handshake 0
is ``in_valid``/``in_ready``, the last one ``out_valid``/``out_ready``. Every stage takes a beat when its
input is valid and it is ready, and offers one while its output is valid, until it is taken; only control
registers (counters, valid bits) are reset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._emit import Lang, block_texts, table_files, top_parts
from ._netlist import Netlist
from ._stream import PadStage, RegisterStage, Stage, WindowStage

__all__ = ["stream_files"]


def _bits(flags: tuple[bool, ...]) -> str:
    """A constant whose bit i is ``flags[i]``, most significant bit first."""
    return "".join("1" if f else "0" for f in reversed(flags))


def _counter_bits(size: int) -> int:
    return max((size - 1).bit_length(), 1)


def _pad_pixel(stage: PadStage) -> str:
    """The pad codes of a pixel as a binary string, the last channel first."""
    return "".join(format(code, f"0{w}b") for code, w in zip(reversed(stage.codes), reversed(stage.widths)))


def _ports(lang: Lang, name: str, in_width: int, out_width: int) -> list[str]:
    if lang.verilog:
        return [
            f"module {name} (",
            "    input  wire clk,",
            "    input  wire rst,",
            "    input  wire in_valid,",
            "    output wire in_ready,",
            f"    input  wire [{in_width - 1}:0] in_data,",
            "    output wire out_valid,",
            "    input  wire out_ready,",
            f"    output wire [{out_width - 1}:0] out_data",
            ");",
        ]
    return [
        "library ieee;",
        "use ieee.std_logic_1164.all;",
        "use ieee.numeric_std.all;",
        "",
        f"entity {name} is",
        "    port (",
        "        clk       : in  std_logic;",
        "        rst       : in  std_logic;",
        "        in_valid  : in  std_logic;",
        "        in_ready  : out std_logic;",
        f"        in_data   : in  std_logic_vector({in_width - 1} downto 0);",
        "        out_valid : out std_logic;",
        "        out_ready : in  std_logic;",
        f"        out_data  : out std_logic_vector({out_width - 1} downto 0)",
        "    );",
        f"end entity {name};",
        "",
        f"architecture rtl of {name} is",
    ]


def _raster(lang: Lang, frame: tuple[int, int], rows: tuple[bool, ...], columns: tuple[bool, ...]) -> list[str]:
    """Declarations of the ROWS and COLUMNS masks and the row and column counters of a frame."""
    rb, cb = _counter_bits(frame[0]), _counter_bits(frame[1])
    if lang.verilog:
        return [
            f"    localparam [{frame[0] - 1}:0] ROWS = {frame[0]}'b{_bits(rows)};",
            f"    localparam [{frame[1] - 1}:0] COLUMNS = {frame[1]}'b{_bits(columns)};",
            f"    reg [{rb - 1}:0] row;",
            f"    reg [{cb - 1}:0] column;",
        ]
    return [
        f'    constant ROWS : std_logic_vector({frame[0] - 1} downto 0) := "{_bits(rows)}";',
        f'    constant COLUMNS : std_logic_vector({frame[1] - 1} downto 0) := "{_bits(columns)}";',
        f"    signal row : unsigned({rb - 1} downto 0);",
        f"    signal column : unsigned({cb - 1} downto 0);",
    ]


def _step(lang: Lang, frame: tuple[int, int], indent: str) -> list[str]:
    """The raster counters' step to the next position of the frame."""
    last_row, last_column = frame[0] - 1, frame[1] - 1
    if lang.verilog:
        return [
            f"{indent}if (column == {last_column}) begin",
            f"{indent}    column <= 0;",
            f"{indent}    row <= (row == {last_row}) ? 0 : row + 1;",
            f"{indent}end else begin",
            f"{indent}    column <= column + 1;",
            f"{indent}end",
        ]
    return [
        f"{indent}if column = {last_column} then",
        f"{indent}    column <= (others => '0');",
        f"{indent}    if row = {last_row} then",
        f"{indent}        row <= (others => '0');",
        f"{indent}    else",
        f"{indent}        row <= row + 1;",
        f"{indent}    end if;",
        f"{indent}else",
        f"{indent}    column <= column + 1;",
        f"{indent}end if;",
    ]


def _pad_text(lang: Lang, stage: PadStage) -> str:
    width = sum(stage.widths)
    frame = stage.frame
    head = (
        f"{lang.comment} Pad stage of node '{stage.node}': takes frames of {sum(stage.rows)} x {sum(stage.columns)} "
        f"pixels and sends {frame[0]} x {frame[1]} in raster order, the pad codes outside the input.\n"
    )
    lines = _ports(lang, stage.name, width, width) + _raster(lang, frame, stage.rows, stage.columns)
    pad = _pad_pixel(stage)
    if lang.verilog:
        lines += [
            "    wire in_frame = ROWS[row] & COLUMNS[column];",
            "    assign out_valid = in_frame ? in_valid : 1'b1;",
            "    assign in_ready = in_frame & out_ready;",
            f"    assign out_data = in_frame ? in_data : {width}'b{pad};",
            "    always @(posedge clk) begin",
            "        if (rst) begin",
            "            row <= 0;",
            "            column <= 0;",
            "        end else if (out_valid && out_ready) begin",
            *_step(lang, frame, " " * 12),
            "        end",
            "    end",
            "endmodule",
        ]
    else:
        lines += [
            "    signal in_frame, valid : std_logic;",
            "begin",
            "    in_frame <= ROWS(to_integer(row)) and COLUMNS(to_integer(column));",
            "    valid <= in_valid when in_frame = '1' else '1';",
            "    out_valid <= valid;",
            "    in_ready <= in_frame and out_ready;",
            f"    out_data <= in_data when in_frame = '1' else \"{pad}\";",
            "    process (clk)",
            "    begin",
            "        if rising_edge(clk) then",
            "            if rst = '1' then",
            "                row <= (others => '0');",
            "                column <= (others => '0');",
            "            elsif valid = '1' and out_ready = '1' then",
            *_step(lang, frame, " " * 16),
            "            end if;",
            "        end if;",
            "    end process;",
            "end architecture rtl;",
        ]
    return head + "\n".join(lines) + "\n\n"


def _window_text(lang: Lang, stage: WindowStage) -> str:
    pw, depth = stage.pixel, stage.depth
    total = pw * depth
    head = (
        f"{lang.comment} Line buffer of node '{stage.node}': the last {depth} pixels of a {stage.frame[0]} x "
        f"{stage.frame[1]} frame, the newest at out_data[{pw - 1}:0]; out_valid after a pixel that completes a "
        "window.\n"
    )
    lines = _ports(lang, stage.name, pw, total) + _raster(lang, stage.frame, stage.rows, stage.columns)
    if lang.verilog:
        shift = "in_data" if depth == 1 else f"{{pixels[{total - pw - 1}:0], in_data}}"
        lines += [
            f"    reg [{total - 1}:0] pixels;",
            "    reg pending;",
            "    assign in_ready = ~pending | out_ready;",
            "    assign out_valid = pending;",
            "    assign out_data = pixels;",
            "    always @(posedge clk) begin",
            "        if (rst) begin",
            "            pending <= 1'b0;",
            "            row <= 0;",
            "            column <= 0;",
            "        end else begin",
            "            if (out_ready) pending <= 1'b0;",
            "            if (in_valid && in_ready) begin",
            f"                pixels <= {shift};",
            "                pending <= ROWS[row] & COLUMNS[column];",
            *_step(lang, stage.frame, " " * 16),
            "            end",
            "        end",
            "    end",
            "endmodule",
        ]
    else:
        shift = "in_data" if depth == 1 else f"pixels({total - pw - 1} downto 0) & in_data"
        lines += [
            f"    signal pixels : std_logic_vector({total - 1} downto 0);",
            "    signal pending, ready : std_logic;",
            "begin",
            "    ready <= (not pending) or out_ready;",
            "    in_ready <= ready;",
            "    out_valid <= pending;",
            "    out_data <= pixels;",
            "    process (clk)",
            "    begin",
            "        if rising_edge(clk) then",
            "            if rst = '1' then",
            "                pending <= '0';",
            "                row <= (others => '0');",
            "                column <= (others => '0');",
            "            else",
            "                if out_ready = '1' then",
            "                    pending <= '0';",
            "                end if;",
            "                if in_valid = '1' and ready = '1' then",
            f"                    pixels <= {shift};",
            "                    pending <= ROWS(to_integer(row)) and COLUMNS(to_integer(column));",
            *_step(lang, stage.frame, " " * 20),
            "                end if;",
            "            end if;",
            "        end if;",
            "    end process;",
            "end architecture rtl;",
        ]
    return head + "\n".join(lines) + "\n\n"


def _register_text(lang: Lang, stage: RegisterStage, width: int) -> str:
    head = f"{lang.comment} Pipeline register after node '{stage.node}'.\n"
    lines = _ports(lang, stage.name, width, width)
    if lang.verilog:
        lines += [
            "    reg valid;",
            f"    reg [{width - 1}:0] data;",
            "    assign in_ready = ~valid | out_ready;",
            "    assign out_valid = valid;",
            "    assign out_data = data;",
            "    always @(posedge clk) begin",
            "        if (rst) valid <= 1'b0;",
            "        else if (in_ready) valid <= in_valid;",
            "        if (in_valid && in_ready) data <= in_data;",
            "    end",
            "endmodule",
        ]
    else:
        lines += [
            "    signal valid, ready : std_logic;",
            f"    signal data : std_logic_vector({width - 1} downto 0);",
            "begin",
            "    ready <= (not valid) or out_ready;",
            "    in_ready <= ready;",
            "    out_valid <= valid;",
            "    out_data <= data;",
            "    process (clk)",
            "    begin",
            "        if rising_edge(clk) then",
            "            if rst = '1' then",
            "                valid <= '0';",
            "            elsif ready = '1' then",
            "                valid <= in_valid;",
            "            end if;",
            "            if in_valid = '1' and ready = '1' then",
            "                data <= in_data;",
            "            end if;",
            "        end if;",
            "    end process;",
            "end architecture rtl;",
        ]
    return head + "\n".join(lines) + "\n\n"


def _stage_text(lang: Lang, netlist: Netlist, stage: Stage) -> str:
    if isinstance(stage, PadStage):
        return _pad_text(lang, stage)
    if isinstance(stage, WindowStage):
        return _window_text(lang, stage)
    return _register_text(lang, stage, netlist.signals[stage.output].width)


def _handshake(k: int) -> tuple[str, str]:
    """The valid and ready signals of handshake ``k`` in the top."""
    return ("in_valid", "in_ready") if k == 0 else (f"h{k}_valid", f"h{k}_ready")


def _top_text(lang: Lang, netlist: Netlist, stages: list[Stage], last: int, header: list[str]) -> str:
    """The top: handshake wires, stage and block instances, the output."""
    inw = netlist.signals[0].width
    outw = int(netlist.width[netlist.output_ids].sum()) if netlist.output_ids.size else 1
    declarations, body = [], []
    handshakes = sorted({s.target for s in stages})
    for k in handshakes:
        valid, ready = _handshake(k)
        declarations.append(
            f"    wire {valid}, {ready};" if lang.verilog else f"    signal {valid}, {ready} : std_logic;"
        )
    for signal in netlist.signals[1:]:
        if lang.verilog:
            declarations.append(f"    wire [{signal.width - 1}:0] {signal.name};")
        else:
            declarations.append(f"    signal {signal.name} : std_logic_vector({signal.width - 1} downto 0);")
    for stage in stages:
        (iv, ir), (ov, orr) = _handshake(stage.source), _handshake(stage.target)
        data = top_parts(lang, netlist, stage.x_ids)
        out = netlist.signals[stage.output].name
        instance = stage.name[len(netlist.top) + 1 :]
        if lang.verilog:
            body.append(
                f"    {stage.name} {instance} (.clk(clk), .rst(rst), .in_valid({iv}), .in_ready({ir}), "
                f".in_data({data}), .out_valid({ov}), .out_ready({orr}), .out_data({out}));"
            )
        else:
            body.append(
                f"    {instance} : entity work.{stage.name} port map (clk => clk, rst => rst, in_valid => {iv}, "
                f"in_ready => {ir}, in_data => {data}, out_valid => {ov}, out_ready => {orr}, out_data => {out});"
            )
    for block in netlist.blocks:
        x = top_parts(lang, netlist, block.x_ids)
        out = netlist.signals[block.output].name
        instance = block.name[len(netlist.top) + 1 :]
        if lang.verilog:
            body.append(f"    {block.name} {instance} (.x({x}), .y({out}));")
        else:
            body.append(f"    {instance} : entity work.{block.name} port map (x => {x}, y => {out});")
    valid, ready = _handshake(last)
    output = top_parts(lang, netlist, netlist.output_ids)
    if lang.verilog:
        ends = [f"    assign out_valid = {valid};", f"    assign {ready} = out_ready;"]
        ends.append(f"    assign out_data = {output};")
        lines = [*header, *_ports(lang, netlist.top, inw, outw), *declarations, *body, *ends, "endmodule", ""]
    else:
        ends = [f"    out_valid <= {valid};", f"    {ready} <= out_ready;", f"    out_data <= {output};"]
        ports = _ports(lang, netlist.top, inw, outw)
        lines = [*header, *ports, *declarations, "begin", *body, *ends, "end architecture rtl;", ""]
    return "\n".join(lines)


def stream_files(
    netlist: Netlist,
    stages: list[Stage],
    last: int,
    language: str,
    *,
    dont_cares: str,
    header: list[str],
    mapped: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Every source file of a streaming design: a file per distinct table, then ``<top>.v|.vhd`` (layer, pool
    and stage modules, then the top); ``last`` is the handshake of the output."""
    lang = Lang(language)
    files = table_files(netlist, lang, dont_cares=dont_cares, mapped=mapped)
    comments = [f"{lang.comment} {line}" if line else "" for line in header]
    stage_texts = "".join(_stage_text(lang, netlist, s) for s in stages)
    top = _top_text(lang, netlist, stages, last, comments)
    files[f"{netlist.top}{lang.suffix}"] = block_texts(lang, netlist) + stage_texts + top
    return files
