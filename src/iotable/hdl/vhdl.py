"""The VHDL-2008 printer: every piece of VHDL text of a design, from the :class:`~.netlist.Netlist` IR.

A module of functions that is a :class:`~.emit.Printer`: names and comments through :mod:`.names`, element
runs as slices and ``&`` concatenations, one template per block and stage (layer, pad stage, line buffer,
register stage; pools and arithmetic in :mod:`.vhdl_blocks`), one top for both styles (the valid pipeline of
the unrolled style, the handshakes of the streaming one) under one entity header.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from . import emit, inline
from .netbench import BenchPlan
from .netlist import Layer, Netlist, PadStage, RegisterStage, WindowStage
from .results import results_file, vhdl_nonce
from .vhdl_blocks import adder, argmax, entity_text, module_text, pool, threshold, vector
from .vhdl_tables import comment, concat, constant, mapped, name, slice, string, suffix, table, table_bench

__all__ = [
    "adder",
    "argmax",
    "bench",
    "comment",
    "concat",
    "constant",
    "layer",
    "mapped",
    "name",
    "pad",
    "pool",
    "register",
    "slice",
    "string",
    "suffix",
    "table",
    "table_bench",
    "threshold",
    "top",
    "window",
]


def _this() -> emit.Printer:
    return sys.modules[__name__]  # type: ignore[return-value]


def _ports(in_width: int, out_width: int) -> list[str]:
    """The ports of every clocked entity and of the top: clock, reset and a valid/ready port on each side."""
    return [
        "        clk       : in  std_logic;",
        "        rst       : in  std_logic;",
        "        in_valid  : in  std_logic;",
        "        in_ready  : out std_logic;",
        f"        in_data   : in  {vector(in_width)};",
        "        out_valid : out std_logic;",
        "        out_ready : in  std_logic;",
        f"        out_data  : out {vector(out_width)}",
    ]


def _clocked(entity: str, head: str, in_width: int, out_width: int, declarations: list[str], body: list[str]) -> str:
    return "\n".join([comment(head), *entity_text(entity, _ports(in_width, out_width), declarations, body)]) + "\n\n"


def layer(netlist: Netlist, block: Layer) -> str:
    p = _this()
    declarations, lines = inline.vhdl_layer(netlist, block)
    for (instance, module, elements), lsb in zip(block.instances, block.y_lsb.tolist()):
        if module in netlist.inline:
            continue
        cw = netlist.modules[module].layout.code_bits
        address = emit.local_parts(p, block.x_widths, elements)
        clock = "clk => clk, en => en, " if block.latency else ""
        lines.append(
            f"    {name(instance)} : entity work.{name(module)} port map ({clock}address => {address}, "
            f"codes => {slice('y', lsb + cw - 1, lsb)});"
        )
    head = [
        comment(inline.layer_comment(netlist, block)),
        comment("x: the tensor the node reads (element i at the bits after elements 0..i-1), y: its output codes."),
    ]
    if block.latency:
        head.append(comment(f"Its tables are pipelined inside: y follows x by {block.latency} clock edge(s) where en."))
    xw, clocked = int(block.x_widths.sum()), bool(block.latency)
    return "\n".join(head) + "\n" + module_text(block.name, xw, block.y_width, declarations, lines, clocked=clocked)


def _raster(frame: tuple[int, int], rows: tuple[bool, ...], columns: tuple[bool, ...]) -> list[str]:
    """The ROWS and COLUMNS masks and the row and column counters of a frame."""
    rb, cb = emit.counter_bits(frame[0]), emit.counter_bits(frame[1])
    return [
        f'    constant ROWS : std_logic_vector({frame[0] - 1} downto 0) := "{emit.mask(rows)}";',
        f'    constant COLUMNS : std_logic_vector({frame[1] - 1} downto 0) := "{emit.mask(columns)}";',
        f"    signal row : unsigned({rb - 1} downto 0);",
        f"    signal column : unsigned({cb - 1} downto 0);",
    ]


def _step(frame: tuple[int, int], indent: str) -> list[str]:
    """The raster counters' step to the next position of the frame."""
    return [
        f"{indent}if column = {frame[1] - 1} then",
        f"{indent}    column <= (others => '0');",
        f"{indent}    if row = {frame[0] - 1} then",
        f"{indent}        row <= (others => '0');",
        f"{indent}    else",
        f"{indent}        row <= row + 1;",
        f"{indent}    end if;",
        f"{indent}else",
        f"{indent}    column <= column + 1;",
        f"{indent}end if;",
    ]


def _skid(width: int) -> tuple[list[str], list[str]]:
    """The skid buffer after a part's ``main`` word (valid ``main_valid``), declarations and statements:
    ``ready``, a register, says the skid is empty; the part moves only while it is high, and a word offered
    while ``out_ready`` is low goes into the skid, which drives the output until it is taken. No path from
    ``out_ready`` to ``ready``'s readers."""
    return [
        "    signal ready : std_logic;",
        f"    signal skid : {vector(width)};",
    ], [
        "    -- Skid buffer: ready is a register (the skid is empty); a word not taken waits in the skid.",
        "    out_valid <= (not ready) or main_valid;",
        "    out_data <= main when ready = '1' else skid;",
        "    process (clk)",
        "    begin",
        "        if rising_edge(clk) then",
        "            -- empty after a reset, or when the output is taken, or when nothing is offered",
        "            ready <= rst or out_ready or (ready and not main_valid);",
        "            if ready = '1' and main_valid = '1' and out_ready = '0' then",
        "                skid <= main;",
        "            end if;",
        "        end if;",
        "    end process;",
    ]


def pad(stage: PadStage) -> str:
    width, frame = sum(stage.widths), stage.frame
    head = (
        f"Pad stage of node '{stage.node}': takes frames of {sum(stage.rows)} x {sum(stage.columns)} pixels and "
        f"sends {frame[0]} x {frame[1]} in raster order, the pad codes outside the input."
    )
    skid_declarations, skid = _skid(width)
    declarations = [
        *_raster(frame, stage.rows, stage.columns),
        "    signal in_frame, main_valid : std_logic;",
        f"    signal main : {vector(width)};",
        *skid_declarations,
    ]
    body = [
        "    in_frame <= ROWS(to_integer(row)) and COLUMNS(to_integer(column));",
        "    main_valid <= in_valid when in_frame = '1' else '1';",
        f"    main <= in_data when in_frame = '1' else \"{emit.pad_pixel(stage)}\";",
        "    in_ready <= in_frame and ready;",
        *skid,
        "    process (clk)",
        "    begin",
        "        if rising_edge(clk) then",
        "            if rst = '1' then",
        "                row <= (others => '0');",
        "                column <= (others => '0');",
        "            elsif main_valid = '1' and ready = '1' then",
        *_step(frame, " " * 16),
        "            end if;",
        "        end if;",
        "    end process;",
    ]
    return _clocked(stage.name, head, width, width, declarations, body)


def _parts(parts: list[tuple[str, int, int]]) -> str:
    return concat([slice(r, hi, lo) for r, hi, lo in parts])


def _buffer(stage: WindowStage) -> tuple[list[str], list[str]]:
    """The line buffer's registers (and memory) and what they load on each pixel taken."""
    pw, depth = stage.pixel, stage.depth
    if not stage.memory:
        total = pw * depth
        shift = "in_data" if depth == 1 else f"pixels({total - pw - 1} downto 0) & in_data"
        return [f"    signal pixels : {vector(total)};"], [f"                pixels <= {shift};"]
    kh, span, words = stage.kernel[0], stage.span, stage.words
    lw, ab = (kh - 1) * pw, emit.counter_bits(words)
    newest = "in_data" if span == 1 else f"newest({(span - 1) * pw - 1} downto 0) & in_data"
    declarations = [
        f"    -- Each kernel row's {span} newest pixels in registers, the {words} between rows in a memory.",
        f"    signal newest : {vector(span * pw)};",
        f"    signal line_q : {vector(lw)};",
        *([f"    signal older : {vector((kh - 1) * (span - 1) * pw)};"] if span > 1 else []),
        f"    type line_memory is array (0 to {words - 1}) of {vector(lw)};",
        "    signal lines : line_memory;",
        f"    signal address : unsigned({ab - 1} downto 0);",
    ]
    loads = [
        f"                newest <= {newest};",
        "                line_q <= lines(to_integer(address));",
        f"                lines(to_integer(address)) <= {_parts(stage.line_in())};",
        f"                if address = {words - 1} then",
        "                    address <= (others => '0');",
        "                else",
        "                    address <= address + 1;",
        "                end if;",
    ]
    for row in range(1, kh if span > 1 else 1):
        low = (row - 1) * (span - 1) * pw
        loads.append(
            f"                older({low + (span - 1) * pw - 1} downto {low}) <= {_parts(stage.older_in(row))};"
        )
    return declarations, loads


def window(stage: WindowStage) -> str:
    pw, depth, taps = stage.pixel, stage.depth, len(stage.back)
    head = (
        f"Line buffer of node '{stage.node}': the last {depth} pixels of a {stage.frame[0]} x {stage.frame[1]} "
        f"frame ({'a memory between kernel rows' if stage.memory else 'a shift register'}); out_data: the "
        f"{taps} taps of the window, tap 0 lowest; out_valid after a pixel that completes a window."
    )
    buffer_declarations, loads = _buffer(stage)
    skid_declarations, skid = _skid(pw * taps)
    declarations = [
        *_raster(stage.frame, stage.rows, stage.columns),
        *buffer_declarations,
        "    signal main_valid : std_logic;",
        f"    signal main : {vector(pw * taps)};",
        *skid_declarations,
    ]
    reset = "            if rst = '1' then address <= (others => '0'); end if;"  # not the memory's writes
    address = [reset] if stage.memory else []
    body = [
        f"    main <= {_parts(stage.taps)};",
        "    in_ready <= ready;",
        *skid,
        "    process (clk)",
        "    begin",
        "        if rising_edge(clk) then",
        "            if rst = '1' then",
        "                main_valid <= '0';",
        "                row <= (others => '0');",
        "                column <= (others => '0');",
        "            elsif ready = '1' then",
        "                main_valid <= in_valid and ROWS(to_integer(row)) and COLUMNS(to_integer(column));",
        "                if in_valid = '1' then",
        *_step(stage.frame, " " * 20),
        "                end if;",
        "            end if;",
        "        end if;",
        "    end process;",
        "    process (clk)",
        "    begin",
        "        if rising_edge(clk) then",
        "            if ready = '1' and in_valid = '1' then",
        *loads,
        "            end if;",
        *address,
        "        end if;",
        "    end process;",
    ]
    return _clocked(stage.name, head, pw, pw * taps, declarations, body)


def register(stage: RegisterStage, width: int) -> str:
    skid_declarations, skid = _skid(width)
    declarations = ["    signal main_valid : std_logic;", f"    signal main : {vector(width)};", *skid_declarations]
    body = [
        "    in_ready <= ready;",
        *skid,
        "    process (clk)",
        "    begin",
        "        if rising_edge(clk) then",
        "            if rst = '1' then",
        "                main_valid <= '0';",
        "            elsif ready = '1' then",
        "                main_valid <= in_valid;",
        "            end if;",
        "            if in_valid = '1' and ready = '1' then",
        "                main <= in_data;",
        "            end if;",
        "        end if;",
        "    end process;",
    ]
    return _clocked(stage.name, f"Pipeline register after node '{stage.node}'.", width, width, declarations, body)


def _valid_pipeline(latency: int, out_width: int) -> tuple[list[str], list[str]]:
    """The unrolled style's control (declarations, statements): ``latency`` valid bits and the skid buffer."""
    if not latency:
        return [], [
            "    -- Combinational: no register, so out_valid is in_valid and in_ready is out_ready.",
            "    in_ready <= out_ready;",
            "    out_valid <= in_valid;",
        ]
    shift = "valid(0) <= in_valid;" if latency == 1 else f"valid <= valid({latency - 2} downto 0) & in_valid;"
    skid_declarations, skid = _skid(out_width)
    declarations = [
        "    signal advance, main_valid : std_logic;",
        f"    signal valid : {vector(latency)};",
        f"    signal main : {vector(out_width)};",
        *skid_declarations,
    ]
    return declarations, [
        "    -- The pipeline advances while its skid buffer is empty (ready, a register); only control bits are reset.",
        f"    main_valid <= valid({latency - 1});",
        *skid,
        "    advance <= ready;",
        "    in_ready <= ready;",
        "    process (clk)",
        "    begin",
        "        if rising_edge(clk) then",
        "            if rst = '1' then",
        "                valid <= (others => '0');",
        "            elsif advance = '1' then",
        f"                {shift}",
        "            end if;",
        "        end if;",
        "    end process;",
    ]


def _registers(netlist: Netlist) -> list[str]:
    """The unrolled style's pipeline and delay registers, all loading on ``advance``."""
    if not netlist.registers:
        return []
    copies = [
        f"                {name(r.name)} <= {name(netlist.signals[r.source].name)};"  # type: ignore[index]
        for r in netlist.registers
    ]
    head = ["    process (clk)", "    begin", "        if rising_edge(clk) then", "            if advance = '1' then"]
    return [*head, *copies, "            end if;", "        end if;", "    end process;"]


def _instances(netlist: Netlist) -> list[str]:
    p, lines = _this(), []
    for stage in netlist.stages:
        (iv, ir), (ov, orr) = emit.handshake(stage.source), emit.handshake(stage.target)
        data, out = emit.top_parts(p, netlist, stage.x_ids), name(netlist.signals[stage.output].name)
        lines.append(
            f"    {name(emit.instance_of(netlist, stage.name))} : entity work.{name(stage.name)} port map (clk => clk, "
            f"rst => rst, in_valid => {iv}, in_ready => {ir}, in_data => {data}, out_valid => {ov}, "
            f"out_ready => {orr}, out_data => {out});"
        )
    for block in netlist.blocks:
        x, out = emit.top_parts(p, netlist, block.x_ids), name(netlist.signals[block.output].name)
        lines.append(
            f"    {name(emit.instance_of(netlist, block.name))} : entity work.{name(block.name)} port map "
            + ("(clk => clk, en => advance, " if isinstance(block, Layer) and block.latency else "(")
            + f"x => {x}, y => {out});"
        )
    return lines


def top(netlist: Netlist, header: Sequence[str]) -> str:
    handshakes = sorted({s.target for s in netlist.stages})
    declarations = [f"    signal {v}, {r} : std_logic;" for v, r in map(emit.handshake, handshakes)]
    declarations += [f"    signal {name(s.name)} : {vector(s.width)};" for s in netlist.signals[1:]]
    result = emit.top_parts(_this(), netlist, netlist.output_ids)
    if netlist.streaming:
        valid, ready = emit.handshake(netlist.last)
        control: list[str] = []
        ends = [f"    out_valid <= {valid};", f"    {ready} <= out_ready;", f"    out_data <= {result};"]
    else:
        control_declarations, control = _valid_pipeline(netlist.latency, netlist.out_width)
        declarations += control_declarations
        ends = [f"    {'main' if netlist.latency else 'out_data'} <= {result};"]
    body = [*control, *_instances(netlist), *_registers(netlist), *ends]
    ports = _ports(netlist.in_width, netlist.out_width)
    lines = [*(comment(line) if line else "" for line in header), *entity_text(netlist.top, ports, declarations, body)]
    return "\n".join([*lines, ""])


def _noise_declarations(plan: BenchPlan) -> list[str]:
    """A random backpressure bench's generator and what it remembers of an output not taken."""
    if plan.backpressure is None:
        return []
    return [
        f'        variable noise : unsigned(31 downto 0) := x"{plan.noise:08x}";',
        "        variable held : boolean := false;",
        f"        variable held_data : std_logic_vector({plan.out_width - 1} downto 0);",
    ]


def _held_check(plan: BenchPlan) -> list[str]:
    """After an edge where out_valid was high and out_ready low, out_valid and out_data must be unchanged."""
    if plan.backpressure is None:
        return []
    return [
        "            if held and (out_valid /= '1' or out_data /= held_data) then",
        '                write(msg, string\'("output not held at cycle " & integer\'image(cycle) & ": out_data " &',
        '                    to_hstring(out_data) & ", before " & to_hstring(held_data)));',
        "                report_line(msg);",
        '                verdict("fail", got);',
        f'                assert false report "{name(plan.top)} did not hold an output" severity failure;',
        "            end if;",
        "            held := out_valid = '1' and out_ready = '0';",
        "            held_data := out_data;",
    ]


def _drive(plan: BenchPlan) -> list[str]:
    """The bench's next in_valid, in_data and out_ready: fixed stalls, or random (a held in_valid stays high)."""
    n, inw = plan.inputs, plan.in_width
    data = [
        f"            if sent < {n} and not loaded then",
        "                readline(inputs, l);",
        "                hread(l, word_in);",
        f"                in_data <= word_in({inw - 1} downto 0);",
        "                loaded := true;",
        "            end if;",
    ]
    if plan.backpressure is None:
        return [
            *data,
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
        ]
    return [
        *data,
        "            noise := noise xor shift_left(noise, 13);",
        "            noise := noise xor shift_right(noise, 17);",
        "            noise := noise xor shift_left(noise, 5);",
        "            if in_valid = '0' or in_ready = '1' then",
        f"                if sent < {n} and noise(3) = '1' then",
        "                    in_valid <= '1';",
        "                else",
        "                    in_valid <= '0';",
        "                end if;",
        "            end if;",
        "            out_ready <= noise(11);",
    ]


def bench(plan: BenchPlan) -> str:
    """The bench of the design's top: drives the handshake with stalls, and checks or prints the outputs."""
    top, m, limit = name(plan.top), plan.outputs, plan.limit
    inw, outw = plan.in_width, plan.out_width
    at = (
        f"integer'image(got / {plan.beats}) & \" position \" & integer'image(got mod {plan.beats})"
        if plan.beats > 1
        else "integer'image(got)"
    )
    in_digits, out_digits = plan.in_word, plan.out_word
    check_lines = []
    for e, (hi, lo, where) in enumerate((c.high, c.low, c.where) for c in plan.checks):
        check_lines += [
            f"                        if out_data({hi} downto {lo}) /= word_out({hi} downto {lo}) then",
            f'                            write(msg, string\'("mismatch at vector " & {at} & '
            f'": output element {e} (' + string(where) + ') expected " &',
            f'                                to_string(word_out({hi} downto {lo})) & " got " & '
            f"to_string(out_data({hi} downto {lo}))));",
            "                            report_line(msg);",
            '                            verdict("fail", got);',
            f'                            assert false report "{top} differs from {top}_expected.hex"',
            "                                severity failure;",
            "                        end if;",
        ]
    if plan.printing:
        compare = [
            "                    word_out := (others => '0');",
            f"                    word_out({outw - 1} downto 0) := out_data;",
            "                    write(msg, string'(to_hstring(word_out)));",
            "                    writeline(results, msg);",
        ]
    else:
        compare = [
            "                    readline(expected, l);",
            "                    hread(l, word_out);",
            f"                    if out_data /= word_out({outw - 1} downto 0) then",
            *check_lines,
            "                    end if;",
        ]
    record = string(results_file(plan.top + "_tb"))
    lines = [
        comment(
            f"Testbench of {top}: {plan.vectors} vectors from {top}_inputs.hex"
            + ("; writes every output word" if plan.printing else f", compared with {top}_expected.hex")
            + f" and its verdict to {results_file(plan.top + '_tb')}."
        ),
        *(comment(note) for note in plan.notes),
        "library ieee;",
        "use ieee.std_logic_1164.all;",
        "use ieee.numeric_std.all;",
        "use std.textio.all;",
        "",
        f"entity {name(top + '_tb')} is",
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
        f'        file expected : text open read_mode is "{top}_expected.hex";' if not plan.printing else "",
        f'        file results : text open write_mode is "{record}";',
        "        variable l, msg : line;",
        f"        variable word_in : std_logic_vector({in_digits - 1} downto 0);",
        f"        variable word_out : std_logic_vector({out_digits - 1} downto 0);",
        "        variable sent, got, cycle : integer := 0;",
        "        variable loaded : boolean := false;",
        "        variable started : boolean := false;",
        *_noise_declarations(plan),
        "        -- a message line: on the output and in the results file",
        "        procedure report_line(text : inout line) is",
        "            variable copy : line;",
        "        begin",
        "            write(copy, text.all);",
        "            writeline(output, text);",
        "            writeline(results, copy);",
        "        end procedure report_line;",
        *vhdl_nonce("        "),
        "        -- the verdict, last line of the results file",
        "        procedure verdict(word : string; count : integer) is",
        "            variable v : line;",
        "        begin",
        f'            write(v, word & " " & integer\'image(count / {plan.beats}) & "/" & '
        f"integer'image({plan.vectors}));",
        '            if word = "pass" then',
        "                write(v, run_nonce);  -- the run's nonce proves this run wrote the pass",
        "            end if;",
        "            writeline(results, v);",
        "            file_close(results);",
        "        end procedure verdict;",
        "    begin",
        "        if not started then",
        f'            write(msg, string\'("expect {m if plan.printing else 0}"));',
        "            writeline(results, msg);",
        "            started := true;",
        "        end if;",
        "        if rising_edge(clk) and rst = '0' then",
        "            cycle := cycle + 1;",
        *_held_check(plan),
        "            if in_valid = '1' and in_ready = '1' then",
        "                sent := sent + 1;",
        "                loaded := false;",
        "            end if;",
        "            if out_valid = '1' and out_ready = '1' then",
        *compare,
        "                got := got + 1;",
        f"                if got = {m} then",
        f"                    write(msg, string'(integer'image(got / {plan.beats}) & \"/\" & "
        f'integer\'image({plan.vectors}) & " vectors match"));'
        if not plan.printing
        else "",
        "                    writeline(output, msg);" if not plan.printing else "",
        '                    verdict("pass", got);',
        "                    std.env.finish;",
        "                end if;",
        "            end if;",
        f"            if cycle > {limit} then",
        f'                write(msg, string\'("timeout: " & integer\'image(got) & " of {m} outputs"));',
        "                writeline(results, msg);",
        '                verdict("fail", got);',
        f'                assert false report "{top} stopped producing outputs: " & integer\'image(got) & " of {m}"',
        "                    severity failure;",
        "            end if;",
        *_drive(plan),
        "        end if;",
        "    end process;",
        "end architecture bench;",
        "",
    ]
    return "\n".join(line for line in lines if line != "")
