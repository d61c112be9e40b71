"""Registered handshakes and line buffers in memory: random backpressure benches (random in_valid and out_ready
every cycle, an output not taken held unchanged) for both styles in both languages, no combinational path from
out_ready to in_ready (yosys, on the flattened design with its flip-flops cut), and line buffers whose rows'
delays are a memory the tools see as one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

import iotable
from iotable.errors import OptionError
from iotable.hdl import Design, export, simulate_files
from iotable.nn import Quantize
from tests.optional import require_program
from tests.test_hdl_export import D2, files_of, small_mlp
from tests.test_hdl_stream import conv1d_net, conv2d_net

LANGUAGES = {"iverilog": "verilog", "ghdl": "vhdl"}


def column_net() -> iotable.TableNetwork:
    """(2, 5, 10) 2-bit images: a (3, 1) kernel (one pixel per kernel row: a memory and no span registers), then
    a (2, 3) kernel of dilation (1, 2) and stride 2 over the 3 x 10 result (a span of 5, 5 pixels between rows)."""
    torch.manual_seed(9)
    model = nn.Sequential(
        nn.Conv2d(2, 2, (3, 1)), Quantize(1), nn.Conv2d(2, 3, (2, 3), dilation=(1, 2), stride=2), Quantize(1)
    ).eval()
    return iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 2, 5, 10))


@pytest.fixture(scope="module")
def nets() -> dict[str, iotable.TableNetwork]:
    return {
        "mlp": iotable.precompute(small_mlp(), input_domain=D2),
        "conv2d": conv2d_net(),
        "conv1d": conv1d_net(),
        "column": column_net(),
    }


def run(design: Design, simulator: str, files: dict[str, str] | None = None):
    require_program(simulator, package=simulator)
    files = files or files_of(design, design.sources + design.bench)
    return simulate_files(files, f"{design.top}_tb", simulator=simulator, timeout=300)


# -- random backpressure benches -------------------------------------------------------------------------------


CASES = [
    ("mlp", "unrolled", 1),
    ("mlp", "unrolled", 2),
    ("mlp", "unrolled", 0),
    ("mlp", "streaming", 1),
    ("conv2d", "unrolled", 1),
    ("conv2d", "streaming", 1),
    ("conv2d", "streaming", 0),
    ("conv1d", "streaming", 2),
    ("column", "streaming", 1),
]


@pytest.mark.parametrize("simulator", sorted(LANGUAGES))
@pytest.mark.parametrize(("key", "style", "pipeline"), CASES)
def test_random_backpressure_benches_pass(
    nets, tmp_path: Path, key: str, style: str, pipeline: int, simulator: str
) -> None:
    """With in_valid and out_ready drawn at random every cycle, every output equals net.run, in order, and an
    output not taken stays on the port unchanged."""
    for seed in (1, 7):
        design = export(
            nets[key], tmp_path / str(seed), language=LANGUAGES[simulator], style=style, pipeline=pipeline,
            top="bp", vectors=12, seed=seed, backpressure=seed, table_benches=False,
        )  # fmt: skip
        bench = (tmp_path / str(seed) / f"bp_tb{'.v' if simulator == 'iverilog' else '.vhd'}").read_text()
        assert f"Random backpressure (seed {seed})" in bench
        result = run(design, simulator)
        assert result.passed, result.stdout + result.stderr
        assert "12/12 vectors match" in result.stdout


@pytest.mark.parametrize("simulator", sorted(LANGUAGES))
@pytest.mark.parametrize("style", ["unrolled", "streaming"])
def test_an_output_dropped_while_not_taken_fails_the_bench(nets, tmp_path: Path, style: str, simulator: str) -> None:
    """A design whose output bypasses its last skid buffer (so a word not taken is replaced by the next) fails the
    random backpressure bench with 'output not held'."""
    language = LANGUAGES[simulator]
    design = export(
        nets["mlp"], tmp_path, language=language, style=style, top="bp", vectors=64, backpressure=3,
        table_benches=False,
    )  # fmt: skip
    files = files_of(design, design.sources + design.bench)
    source = f"bp{'.v' if language == 'verilog' else '.vhd'}"
    skid = (
        "assign out_data = ready ? main : skid;"
        if language == "verilog"
        else "out_data <= main when ready = '1' else skid;"
    )
    bypass = "assign out_data = main;" if language == "verilog" else "out_data <= main;"
    assert skid in files[source]
    head, _, tail = files[source].rpartition(skid)  # the skid that drives the top's output
    files[source] = head + bypass + tail
    result = run(design, simulator, files)
    assert not result.passed
    assert "output not held at cycle" in result.messages


def test_backpressure_must_be_a_seed(nets, tmp_path: Path) -> None:
    """A backpressure that is not an int (or None) is refused by name."""
    with pytest.raises(OptionError, match="backpressure must be a seed"):
        export(nets["mlp"], tmp_path, backpressure="yes")


# -- no combinational path from out_ready to in_ready ---------------------------------------------------------------


def ready_path(directory: Path, sources: tuple[str, ...], top: str) -> bool:
    """Whether the flattened design, its flip-flops cut, still has a path from the port out_ready to in_ready."""
    require_program("yosys", package="yosys")
    reads = "; ".join(f"read_verilog {directory / s}" for s in sources if s.endswith(".v"))
    script = (
        f"{reads}; hierarchy -top {top}; proc; flatten; opt_clean; select -assert-min 1 t:$dff; delete t:$dff; "
        "select -assert-none w:in_ready %ci* w:out_ready %i"
    )
    done = subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True, timeout=300, check=False)
    assert "ERROR" not in done.stdout + done.stderr or "Assertion failed" in done.stdout + done.stderr, done.stderr
    return done.returncode != 0


# every design with a register (a streaming MLP without pipeline registers is combinational by request)
REGISTERED = [c for c in CASES if c[2] != 0 or (c[1] == "streaming" and c[0] != "mlp")]


@pytest.mark.parametrize(("key", "style", "pipeline"), REGISTERED)
def test_no_combinational_path_from_out_ready_to_in_ready(
    nets, tmp_path: Path, key: str, style: str, pipeline: int
) -> None:
    """In every registered design of either style, in_ready does not depend on out_ready within a cycle; the same
    check finds the path once in_ready is given one (so it can fail)."""
    design = export(nets[key], tmp_path, style=style, pipeline=pipeline, top="rp", vectors=4, table_benches=False)
    assert not ready_path(tmp_path, design.sources, "rp")
    top = tmp_path / "rp.v"
    text = top.read_text()
    wired = text.replace("module rp (", "module rp_inner (")
    wrapper = (
        "module rp (input wire clk, input wire rst, input wire in_valid, output wire in_ready, "
        f"input wire [{design.inputs.width - 1}:0] in_data, output wire out_valid, input wire out_ready, "
        f"output wire [{design.outputs.width - 1}:0] out_data);\n"
        "    wire inner_ready;\n"
        "    rp_inner inner (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(inner_ready), .in_data(in_data),\n"
        "        .out_valid(out_valid), .out_ready(out_ready), .out_data(out_data));\n"
        "    assign in_ready = inner_ready & out_ready;\n"
        "endmodule\n"
    )
    top.write_text(wired + wrapper)
    assert ready_path(tmp_path, design.sources, "rp")


def chain(depth: int) -> iotable.TableNetwork:
    """``depth`` layers of four 1-bit units of fan-in 4: tiny tables, so that any control path shows."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(4, 4), Quantize(1)]
    return iotable.precompute(nn.Sequential(*layers).eval(), input_domain=iotable.Domain.uniform(1))


@pytest.mark.parametrize("style", ["streaming", "unrolled"])
def test_the_longest_path_does_not_grow_with_depth(tmp_path: Path, style: str) -> None:
    """After synthesis, the longest path between registers of an 8-layer chain of tiny tables is no longer than a
    2-layer chain's (with a ready computed through every stage, it grew by one cell per stage)."""
    require_program("yosys", package="yosys")
    lengths = []
    for depth in (2, 8):
        design = export(chain(depth), tmp_path / str(depth), style=style, top="c", vectors=4, table_benches=False)
        reads = "; ".join(f"read_verilog {tmp_path / str(depth) / s}" for s in design.sources)
        script = f"{reads}; synth -flatten -top c; ltp -noff"
        done = subprocess.run(["yosys", "-p", script], capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        lengths.append(int(re.findall(r"Longest topological path in \S+ \(length=(\d+)\)", done.stdout)[-1]))
    assert lengths[1] == lengths[0], lengths


# -- line buffers -----------------------------------------------------------------------------------------------


def test_line_buffers_between_rows_are_memories_chosen_by_size(nets, tmp_path: Path) -> None:
    """The 2D net's conv and depthwise line buffers (9 and 13 pixels between kernel rows) hold them in a memory that
    yosys infers as one; the pointwise and pool ones (0 and 5 pixels) stay shift registers; the 1D net (one kernel
    row) has no memory."""
    require_program("yosys", package="yosys")
    export(nets["conv2d"], tmp_path, style="streaming", top="lb", vectors=4, table_benches=False)
    text = (tmp_path / "lb.v").read_text()
    assert "reg [1:0] lines [0:8];" in text  # conv: 2 kernel rows of 1 two-bit channel, 11 - 2 pixels apart
    assert "reg [5:0] lines [0:12];" in text  # dw: 3 kernel rows of 3 one-bit channels, 18 - 5 pixels apart
    assert text.count("lines [0:") == 2
    assert "reg [5:0] pixels;" in text  # pw: a 1 x 1 window, one pixel
    assert "reg [71:0] pixels;" in text  # the pool: 9 pixels of 8 bits, 7 - 2 pixels between rows
    for module in ("lb_window0", "lb_window1"):
        script = f"read_verilog {tmp_path / 'lb.v'}; hierarchy -top {module}; proc; opt; memory -nomap; "
        script += "select -assert-count 1 t:$mem_v2 t:$mem %u"
        done = subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    one_d = export(nets["conv1d"], tmp_path / "1d", style="streaming", top="ld", vectors=4, table_benches=False)
    assert "lines [0:" not in (tmp_path / "1d" / "ld.v").read_text() and one_d.line_buffers > 0
    export(nets["column"], tmp_path / "c", style="streaming", top="lc", vectors=4, table_benches=False)
    text = (tmp_path / "c" / "lc.v").read_text()
    first = text[text.index("module lc_window0") : text.index("module lc_window1")]
    assert "reg [7:0] lines [0:8];" in first and "older" not in first  # 2 rows of 4-bit pixels, 10 - 1 apart
    assert "reg [29:0] pixels;" in text  # 10 - 5 = 5 pixels between rows: a shift register of 15 2-bit pixels
