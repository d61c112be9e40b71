"""The Verilog-2001 printer: every piece of Verilog text of a design, from the :class:`~.netlist.Netlist` IR.

A module of functions that is a :class:`~.emit.Printer`: names and comments through :mod:`.names`, element
runs as slices and ``{...}`` concatenations, one template per block and stage (layer, pad stage, line buffer,
register stage; pools and arithmetic in :mod:`.verilog_blocks`), one top for both styles (the valid pipeline
of the unrolled style, the handshakes of the streaming one) under one port header.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from . import emit, inline
from .netbench import BenchPlan
from .netlist import Layer, Netlist, PadStage, RegisterStage, WindowStage
from .results import results_file, verilog_nonce
from .verilog_blocks import adder, argmax, module_text, pool, threshold
from .verilog_tables import comment, concat, constant, mapped, name, slice, string, suffix, table, table_bench

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


def _ports(module: str, in_width: int, out_width: int) -> list[str]:
    """The header of every clocked module and of the top: clock, reset and a valid/ready port on each side."""
    return [
        f"module {name(module)} (",
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


def layer(netlist: Netlist, block: Layer) -> str:
    p = _this()
    wires, lines = inline.verilog_layer(netlist, block)
    for (instance, module, elements), lsb in zip(block.instances, block.y_lsb.tolist()):
        if module in netlist.inline:
            continue
        cw = netlist.modules[module].layout.code_bits
        address = emit.local_parts(p, block.x_widths, elements)
        codes = slice("y", lsb + cw - 1, lsb)
        clock = ".clk(clk), .en(en), " if block.latency else ""
        lines.append(f"    {name(module)} {name(instance)} ({clock}.address({address}), .codes({codes}));")
    head = [
        comment(inline.layer_comment(netlist, block)),
        comment("x: the tensor the node reads (element i at the bits after elements 0..i-1), y: its output codes."),
    ]
    if block.latency:
        head.append(comment(f"Its tables are pipelined inside: y follows x by {block.latency} clock edge(s) where en."))
    xw = int(block.x_widths.sum())
    body = wires + lines
    return "\n".join(head) + "\n" + module_text(block.name, xw, block.y_width, body, clocked=bool(block.latency))


def _raster(frame: tuple[int, int], rows: tuple[bool, ...], columns: tuple[bool, ...]) -> list[str]:
    """The ROWS and COLUMNS masks and the row and column counters of a frame."""
    rb, cb = emit.counter_bits(frame[0]), emit.counter_bits(frame[1])
    return [
        f"    localparam [{frame[0] - 1}:0] ROWS = {frame[0]}'b{emit.mask(rows)};",
        f"    localparam [{frame[1] - 1}:0] COLUMNS = {frame[1]}'b{emit.mask(columns)};",
        f"    reg [{rb - 1}:0] row;",
        f"    reg [{cb - 1}:0] column;",
    ]


def _step(frame: tuple[int, int], indent: str) -> list[str]:
    """The raster counters' step to the next position of the frame."""
    return [
        f"{indent}if (column == {frame[1] - 1}) begin",
        f"{indent}    column <= 0;",
        f"{indent}    row <= (row == {frame[0] - 1}) ? 0 : row + 1;",
        f"{indent}end else begin",
        f"{indent}    column <= column + 1;",
        f"{indent}end",
    ]


def _skid(width: int) -> list[str]:
    """The skid buffer after a part's ``main`` word (valid ``main_valid``): ``ready``, a register, says the skid
    is empty; the part moves only while it is high, and a word offered while ``out_ready`` is low goes into the
    skid, which drives the output until it is taken. No path from ``out_ready`` to ``ready``'s readers."""
    return [
        "    // Skid buffer: ready is a register (the skid is empty); a word not taken waits in the skid.",
        "    reg ready;",
        f"    reg [{width - 1}:0] skid;",
        "    assign out_valid = ~ready | main_valid;",
        "    assign out_data = ready ? main : skid;",
        "    always @(posedge clk) begin",
        "        // empty after a reset, or when the output is taken, or when nothing is offered",
        "        ready <= rst | out_ready | (ready & ~main_valid);",
        "        if (ready && main_valid && !out_ready) skid <= main;",
        "    end",
    ]


def pad(stage: PadStage) -> str:
    width, frame = sum(stage.widths), stage.frame
    head = comment(
        f"Pad stage of node '{stage.node}': takes frames of {sum(stage.rows)} x {sum(stage.columns)} pixels and "
        f"sends {frame[0]} x {frame[1]} in raster order, the pad codes outside the input."
    )
    lines = [
        head,
        *_ports(stage.name, width, width),
        *_raster(frame, stage.rows, stage.columns),
        "    wire in_frame = ROWS[row] & COLUMNS[column];",
        "    wire main_valid = in_frame ? in_valid : 1'b1;",
        f"    wire [{width - 1}:0] main = in_frame ? in_data : {width}'b{emit.pad_pixel(stage)};",
        *_skid(width),
        "    assign in_ready = in_frame & ready;",
        "    always @(posedge clk) begin",
        "        if (rst) begin",
        "            row <= 0;",
        "            column <= 0;",
        "        end else if (main_valid && ready) begin",
        *_step(frame, " " * 12),
        "        end",
        "    end",
        "endmodule",
    ]
    return "\n".join(lines) + "\n\n"


def _parts(parts: list[tuple[str, int, int]]) -> str:
    return concat([slice(r, hi, lo) for r, hi, lo in parts])


def _buffer(stage: WindowStage) -> tuple[list[str], list[str]]:
    """The line buffer's registers (and memory) and what they load on each pixel taken."""
    pw, depth = stage.pixel, stage.depth
    if not stage.memory:
        total = pw * depth
        shift = "in_data" if depth == 1 else f"{{pixels[{total - pw - 1}:0], in_data}}"
        return [f"    reg [{total - 1}:0] pixels;"], [f"            pixels <= {shift};"]
    kh, span, words = stage.kernel[0], stage.span, stage.words
    lw, ab = (kh - 1) * pw, emit.counter_bits(words)
    newest = "in_data" if span == 1 else f"{{newest[{(span - 1) * pw - 1}:0], in_data}}"
    declarations = [
        f"    // Each kernel row's {span} newest pixels in registers, the {words} between rows in a memory.",
        f"    reg [{span * pw - 1}:0] newest;",
        f"    reg [{lw - 1}:0] line_q;",
        *([f"    reg [{(kh - 1) * (span - 1) * pw - 1}:0] older;"] if span > 1 else []),
        f"    reg [{lw - 1}:0] lines [0:{words - 1}];",
        f"    reg [{ab - 1}:0] address;",
    ]
    loads = [
        f"            newest <= {newest};",
        "            line_q <= lines[address];",
        f"            lines[address] <= {_parts(stage.line_in())};",
        f"            address <= (address == {words - 1}) ? {ab}'d0 : address + {ab}'d1;",
    ]
    for row in range(1, kh if span > 1 else 1):
        low = (row - 1) * (span - 1) * pw
        loads.append(f"            older[{low + (span - 1) * pw - 1}:{low}] <= {_parts(stage.older_in(row))};")
    return declarations, loads


def window(stage: WindowStage) -> str:
    pw, depth, taps = stage.pixel, stage.depth, len(stage.back)
    head = comment(
        f"Line buffer of node '{stage.node}': the last {depth} pixels of a {stage.frame[0]} x {stage.frame[1]} "
        f"frame ({'a memory between kernel rows' if stage.memory else 'a shift register'}); out_data: the "
        f"{taps} taps of the window, tap 0 lowest; out_valid after a pixel that completes a window."
    )
    declarations, loads = _buffer(stage)
    address = ["        if (rst) address <= 0;"] if stage.memory else []  # the memory's writes are not reset
    lines = [
        head,
        *_ports(stage.name, pw, pw * taps),
        *_raster(stage.frame, stage.rows, stage.columns),
        *declarations,
        "    reg main_valid;",
        f"    wire [{pw * taps - 1}:0] main = {_parts(stage.taps)};",
        *_skid(pw * taps),
        "    assign in_ready = ready;",
        "    always @(posedge clk) begin",
        "        if (rst) begin",
        "            main_valid <= 1'b0;",
        "            row <= 0;",
        "            column <= 0;",
        "        end else if (ready) begin",
        "            main_valid <= in_valid & ROWS[row] & COLUMNS[column];",
        "            if (in_valid) begin",
        *_step(stage.frame, " " * 16),
        "            end",
        "        end",
        "    end",
        "    always @(posedge clk) begin",
        "        if (ready && in_valid) begin",
        *loads,
        "        end",
        *address,
        "    end",
        "endmodule",
    ]
    return "\n".join(lines) + "\n\n"


def register(stage: RegisterStage, width: int) -> str:
    lines = [
        comment(f"Pipeline register after node '{stage.node}'."),
        *_ports(stage.name, width, width),
        "    reg main_valid;",
        f"    reg [{width - 1}:0] main;",
        *_skid(width),
        "    assign in_ready = ready;",
        "    always @(posedge clk) begin",
        "        if (rst) main_valid <= 1'b0;",
        "        else if (ready) main_valid <= in_valid;",
        "        if (ready && in_valid) main <= in_data;",
        "    end",
        "endmodule",
    ]
    return "\n".join(lines) + "\n\n"


def _valid_pipeline(latency: int, out_width: int) -> list[str]:
    """The unrolled style's control: ``latency`` valid bits moving on ``advance`` (or none: combinational),
    and the skid buffer after the last registers."""
    if not latency:
        return [
            "    // Combinational: no register, so out_valid is in_valid and in_ready is out_ready.",
            "    assign in_ready = out_ready;",
            "    assign out_valid = in_valid;",
        ]
    shift = "in_valid" if latency == 1 else f"{{valid[{latency - 2}:0], in_valid}}"
    return [
        "    // The pipeline advances while its skid buffer is empty (ready, a register); only control bits are reset.",
        f"    reg  [{latency - 1}:0] valid;",
        f"    wire [{out_width - 1}:0] main;",
        f"    wire main_valid = valid[{latency - 1}];",
        *_skid(out_width),
        "    wire advance = ready;",
        "    assign in_ready = ready;",
        "    always @(posedge clk) begin",
        f"        if (rst) valid <= {latency}'b0;",
        f"        else if (advance) valid <= {shift};",
        "    end",
    ]


def _registers(netlist: Netlist) -> list[str]:
    """The unrolled style's pipeline and delay registers, all loading on ``advance``."""
    if not netlist.registers:
        return []
    copies = [
        f"            {name(r.name)} <= {name(netlist.signals[r.source].name)};"  # type: ignore[index]
        for r in netlist.registers
    ]
    return ["    always @(posedge clk) begin", "        if (advance) begin", *copies, "        end", "    end"]


def _instances(netlist: Netlist) -> list[str]:
    p, lines = _this(), []
    for stage in netlist.stages:
        (iv, ir), (ov, orr) = emit.handshake(stage.source), emit.handshake(stage.target)
        data, out = emit.top_parts(p, netlist, stage.x_ids), name(netlist.signals[stage.output].name)
        lines.append(
            f"    {name(stage.name)} {name(emit.instance_of(netlist, stage.name))} (.clk(clk), .rst(rst), "
            f".in_valid({iv}), .in_ready({ir}), .in_data({data}), .out_valid({ov}), .out_ready({orr}), "
            f".out_data({out}));"
        )
    for block in netlist.blocks:
        x, out = emit.top_parts(p, netlist, block.x_ids), name(netlist.signals[block.output].name)
        clock = ".clk(clk), .en(advance), " if isinstance(block, Layer) and block.latency else ""
        instance = name(emit.instance_of(netlist, block.name))
        lines.append(f"    {name(block.name)} {instance} ({clock}.x({x}), .y({out}));")
    return lines


def top(netlist: Netlist, header: Sequence[str]) -> str:
    declarations = [f"    wire {v}, {r};" for v, r in map(emit.handshake, sorted({s.target for s in netlist.stages}))]
    for signal in netlist.signals[1:]:
        kind = "wire" if signal.source is None else "reg "
        declarations.append(f"    {kind} [{signal.width - 1}:0] {name(signal.name)};")
    result = emit.top_parts(_this(), netlist, netlist.output_ids)
    if netlist.streaming:
        valid, ready = emit.handshake(netlist.last)
        control: list[str] = []
        ends = [f"    assign out_valid = {valid};", f"    assign {ready} = out_ready;"]
        ends.append(f"    assign out_data = {result};")
    elif netlist.latency:
        control, ends = _valid_pipeline(netlist.latency, netlist.out_width), [f"    assign main = {result};"]
    else:
        control, ends = _valid_pipeline(0, netlist.out_width), [f"    assign out_data = {result};"]
    lines = [
        *(comment(line) if line else "" for line in header),
        *_ports(netlist.top, netlist.in_width, netlist.out_width),
        *declarations,
        *control,
        *_instances(netlist),
        *_registers(netlist),
        *ends,
        "endmodule",
        "",
    ]
    return "\n".join(lines)


def _noise_declarations(plan: BenchPlan) -> list[str]:
    """A random backpressure bench's generator and what it remembers of an output not taken."""
    if plan.backpressure is None:
        return []
    return [
        f"    reg [31:0] noise = 32'h{plan.noise:08x};",
        "    reg held = 1'b0;",
        f"    reg [{plan.out_width - 1}:0] held_data;",
    ]


def _held_check(plan: BenchPlan, fail: str) -> list[str]:
    """After an edge where out_valid was high and out_ready low, out_valid and out_data must be unchanged."""
    if plan.backpressure is None:
        return []
    shown = '"output not held at cycle %0d: out_valid %b out_data %h, before %h", cycle, out_valid, out_data, held_data'
    top = name(plan.top)
    return [
        "            if (held && (out_valid !== 1'b1 || out_data !== held_data)) begin",
        f"                $display({shown}); $fdisplay(results, {shown}); {fail}",
        f'                $fatal(1, "{top} did not hold an output");',
        "            end",
        "            held = out_valid && !out_ready;",
        "            held_data = out_data;",
    ]


def _drive(plan: BenchPlan) -> list[str]:
    """The bench's next in_valid, in_data and out_ready: fixed stalls, or random (a held in_valid stays high)."""
    n, inw = plan.inputs, plan.in_width
    data = f"            in_data <= inputs[sent < {n} ? sent : 0][{inw - 1}:0];"
    if plan.backpressure is None:
        return [
            f"            in_valid <= (sent < {n}) && (cycle % 7 != 3);",
            data,
            "            out_ready <= (cycle % 5 != 2);",
        ]
    return [
        "            noise = noise ^ (noise << 13);",
        "            noise = noise ^ (noise >> 17);",
        "            noise = noise ^ (noise << 5);",
        f"            if (!in_valid || in_ready) in_valid <= (sent < {n}) && noise[3];",
        data,
        "            out_ready <= noise[11];",
    ]


def bench(plan: BenchPlan) -> str:
    """The bench of the design's top: drives the handshake with stalls, and checks or prints the outputs.

    Its output words (a printing bench), its first mismatch and its verdict go to its results file
    (:mod:`.results`); a checking bench also prints its summary or its first mismatch."""
    top, n, m, limit = name(plan.top), plan.inputs, plan.outputs, plan.limit
    inw, outw = plan.in_width, plan.out_width
    in_digits, out_digits = plan.in_word, plan.out_word
    taken = f"got / {plan.beats}, {plan.vectors}"
    # after a failure nothing more is written (a simulator may run on to the end of the time step)
    fail = f'$fdisplay(results, "fail %0d/%0d", {taken}); $fclose(results); stopped = 1\'b1;'
    lines = [
        comment(
            f"Testbench of {top}: {plan.vectors} vectors from {top}_inputs.hex"
            + ("; writes every output word" if plan.printing else f", compared with {top}_expected.hex")
            + f" and its verdict to {results_file(plan.top + '_tb')}."
        ),
        *(comment(note) for note in plan.notes),
        f"module {name(top + '_tb')};",
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
        "    integer sent = 0, got = 0, cycle = 0, results;",
        "    reg stopped = 1'b0;",
        verilog_nonce("    ")[0],
        *_noise_declarations(plan),
        "",
        f"    {top} dut (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready), .in_data(in_data),",
        "        .out_valid(out_valid), .out_ready(out_ready), .out_data(out_data));",
        "",
        "    always #5 clk = ~clk;",
        "    initial begin",
        f'        results = $fopen("{string(results_file(plan.top + "_tb"))}", "w");',
        verilog_nonce("    ")[1],
        f'        $fdisplay(results, "expect %0d", {m if plan.printing else 0});',
        f'        $readmemh("{top}_inputs.hex", inputs);',
    ]
    if not plan.printing:
        lines.append(f'        $readmemh("{top}_expected.hex", expected);')
    lines += [
        "        #20 rst = 1'b0;",
        "    end",
        "",
        "    always @(posedge clk) begin",
        "        if (!rst && !stopped) begin",
        "            cycle = cycle + 1;",
        *_held_check(plan, fail),
        "            if (in_valid && in_ready) sent = sent + 1;",
        "            if (out_valid && out_ready) begin",
    ]
    if plan.printing:
        lines.append('                $fdisplay(results, "%h", out_data);')
    else:
        lines += [
            f"                want = expected[got][{outw - 1}:0];",
            "                if (out_data !== want) begin",
        ]
        at = "vector %0d position %0d" if plan.beats > 1 else "vector %0d"
        index = f"got / {plan.beats}, got % {plan.beats}" if plan.beats > 1 else "got"
        fmt = "mismatch at {at}: output element {e} ({where}) expected %b got %b"
        for e, (hi, lo, where) in enumerate((c.high, c.low, c.where) for c in plan.checks):
            text = fmt.format(at=at, e=e, where=string(where))
            shown = f'"{text}", {index}, want[{hi}:{lo}], out_data[{hi}:{lo}]'
            lines.append(
                f"                    if (!stopped && out_data[{hi}:{lo}] !== want[{hi}:{lo}]) begin "
                f"$display({shown}); $fdisplay(results, {shown}); {fail} "
                f'$fatal(1, "{top} differs from {top}_expected.hex"); end'
            )
        lines.append("                end")
    lines += [
        "                got = got + 1;",
        f"                if (got == {m} && !stopped) begin",
        f'                    $fdisplay(results, "pass %0d/%0d %0s", {taken}, iotable_nonce);',
        "                    $fclose(results);",
        f'                    $display("%0d/%0d vectors match", {taken});' if not plan.printing else "",
        "                    $finish;",
        "                end",
        "            end",
        f"            if (cycle > {limit} && !stopped) begin",
        '                $display("timeout: %0d of %0d outputs after %0d cycles", got, ' + f"{m}, cycle);",
        '                $fdisplay(results, "timeout: %0d of %0d outputs after %0d cycles", got, '
        + f"{m}, cycle); {fail}",
        f'                $fatal(1, "{top} stopped producing outputs");',
        "            end",
        *_drive(plan),
        "        end",
        "    end",
        "endmodule",
        "",
    ]
    return "\n".join(line for line in lines if line != "")
