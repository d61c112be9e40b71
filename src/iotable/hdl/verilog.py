"""The Verilog-2001 printer: every piece of Verilog text of a design, from the :class:`~.netlist.Netlist` IR.

A module of functions that is a :class:`~.emit.Printer`: names and comments through :mod:`.names`, element
runs as slices and ``{...}`` concatenations, one template per block and stage (layer, pool, pad stage, line
buffer, register stage), one top for both styles (the valid pipeline of the unrolled style, the handshakes
of the streaming one) under one port header.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from . import emit
from .netbench import BenchPlan
from .netlist import Layer, Netlist, PadStage, Pool, RegisterStage, WindowStage
from .results import results_file
from .verilog_tables import comment, concat, constant, mapped, name, slice, string, suffix, table, table_bench

__all__ = [
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
    "top",
    "window",
]


def _this() -> emit.Printer:
    return sys.modules[__name__]  # type: ignore[return-value]


def _module(module: str, xw: int, yw: int, body: list[str]) -> str:
    """A combinational module ``x -> y``."""
    ports = [f"module {name(module)} (", f"    input  wire [{xw - 1}:0] x,", f"    output wire [{yw - 1}:0] y", ");"]
    return "\n".join([*ports, *body, "endmodule", "", ""])


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
    lines = []
    for (instance, module, elements), lsb in zip(block.instances, block.y_lsb.tolist()):
        cw = netlist.modules[module].layout.code_bits
        address = emit.local_parts(p, block.x_widths, elements)
        codes = slice("y", lsb + cw - 1, lsb)
        lines.append(f"    {name(module)} {name(instance)} (.address({address}), .codes({codes}));")
    head = [
        comment(
            f"Layer module of {block.kind} node '{block.node}' (layer '{block.layer}'): "
            f"{len(block.instances)} instance(s) of {len({m for _, m, _ in block.instances})} table module(s)."
        ),
        comment("x: the tensor the node reads (element i at the bits after elements 0..i-1), y: its output codes."),
    ]
    return "\n".join(head) + "\n" + _module(block.name, int(block.x_widths.sum()), block.y_width, lines)


def pool(block: Pool) -> str:
    p, lines = _this(), []
    for k in range(len(block.maxima)):  # a comparator tree per output element
        w, comparators, result, target = emit.comparator_tree(p, block, k)
        lines += [f"    wire [{w - 1}:0] {m} = ({a} > {b}) ? {a} : {b};" for m, a, b in comparators]
        lines.append(f"    assign {target} = {result};")
    head = comment(
        f"Pool module of node '{block.node}': each output code is the largest of the codes its window covers "
        "(codes ascend with values)."
    )
    return head + "\n" + _module(block.name, int(block.x_widths.sum()), int(block.y_widths.sum()), lines)


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
        "    assign out_valid = in_frame ? in_valid : 1'b1;",
        "    assign in_ready = in_frame & out_ready;",
        f"    assign out_data = in_frame ? in_data : {width}'b{emit.pad_pixel(stage)};",
        "    always @(posedge clk) begin",
        "        if (rst) begin",
        "            row <= 0;",
        "            column <= 0;",
        "        end else if (out_valid && out_ready) begin",
        *_step(frame, " " * 12),
        "        end",
        "    end",
        "endmodule",
    ]
    return "\n".join(lines) + "\n\n"


def window(stage: WindowStage) -> str:
    pw, depth = stage.pixel, stage.depth
    total = pw * depth
    head = comment(
        f"Line buffer of node '{stage.node}': the last {depth} pixels of a {stage.frame[0]} x {stage.frame[1]} "
        f"frame, the newest at out_data[{pw - 1}:0]; out_valid after a pixel that completes a window."
    )
    shift = "in_data" if depth == 1 else f"{{pixels[{total - pw - 1}:0], in_data}}"
    lines = [
        head,
        *_ports(stage.name, pw, total),
        *_raster(stage.frame, stage.rows, stage.columns),
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
        *_step(stage.frame, " " * 16),
        "            end",
        "        end",
        "    end",
        "endmodule",
    ]
    return "\n".join(lines) + "\n\n"


def register(stage: RegisterStage, width: int) -> str:
    lines = [
        comment(f"Pipeline register after node '{stage.node}'."),
        *_ports(stage.name, width, width),
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
    return "\n".join(lines) + "\n\n"


def _valid_pipeline(latency: int) -> list[str]:
    """The unrolled style's control: ``latency`` valid bits moving on ``advance`` (or none: combinational)."""
    if not latency:
        return [
            "    // Combinational: no register, so out_valid is in_valid and in_ready is out_ready.",
            "    assign in_ready = out_ready;",
            "    assign out_valid = in_valid;",
        ]
    shift = "in_valid" if latency == 1 else f"{{valid[{latency - 2}:0], in_valid}}"
    return [
        "    // The pipeline advances when its output is taken or not valid; only the valid bits are reset.",
        "    wire advance = ~out_valid | out_ready;",
        f"    reg  [{latency - 1}:0] valid;",
        "    assign in_ready = advance;",
        f"    assign out_valid = valid[{latency - 1}];",
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
        lines.append(f"    {name(block.name)} {name(emit.instance_of(netlist, block.name))} (.x({x}), .y({out}));")
    return lines


def top(netlist: Netlist, header: Sequence[str]) -> str:
    declarations = [f"    wire {v}, {r};" for v, r in map(emit.handshake, sorted({s.target for s in netlist.stages}))]
    for signal in netlist.signals[1:]:
        kind = "wire" if signal.source is None else "reg "
        declarations.append(f"    {kind} [{signal.width - 1}:0] {name(signal.name)};")
    if netlist.streaming:
        valid, ready = emit.handshake(netlist.last)
        control: list[str] = []
        ends = [f"    assign out_valid = {valid};", f"    assign {ready} = out_ready;"]
    else:
        control, ends = _valid_pipeline(netlist.latency), []
    lines = [
        *(comment(line) if line else "" for line in header),
        *_ports(netlist.top, netlist.in_width, netlist.out_width),
        *declarations,
        *control,
        *_instances(netlist),
        *_registers(netlist),
        *ends,
        f"    assign out_data = {emit.top_parts(_this(), netlist, netlist.output_ids)};",
        "endmodule",
        "",
    ]
    return "\n".join(lines)


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
        "",
        f"    {top} dut (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready), .in_data(in_data),",
        "        .out_valid(out_valid), .out_ready(out_ready), .out_data(out_data));",
        "",
        "    always #5 clk = ~clk;",
        "    initial begin",
        f'        results = $fopen("{string(results_file(plan.top + "_tb"))}", "w");',
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
        f'                    $fdisplay(results, "pass %0d/%0d", {taken});',
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
        f"            in_valid <= (sent < {n}) && (cycle % 7 != 3);",
        f"            in_data <= inputs[sent < {n} ? sent : 0][{inw - 1}:0];",
        "            out_ready <= (cycle % 5 != 2);",
        "        end",
        "    end",
        "endmodule",
        "",
    ]
    return "\n".join(line for line in lines if line != "")
