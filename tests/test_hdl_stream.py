"""Streaming designs: pixels in raster order through pad stages and line buffers, every unit instantiated once;
benches under iverilog, ghdl and verilator equal to net.run, yosys checks, a tampered table, refusals by name."""

from __future__ import annotations

import importlib
import re
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
import iotable.graph.nodes
from iotable import Domain
from iotable.errors import HDLError
from iotable.hdl import Design, check, export, simulate, simulate_files
from iotable.hdl.streaming import beats_of, from_beats
from iotable.nn import Quantize
from tests.optional import require_program
from tests.test_hdl_export import (
    D2,
    EXAMPLES,
    SIMULATORS,
    Residual,
    files_of,
    run_bench,
    small_mlp,
    sparse,
    values,
)

HALF = Domain.uniform(2, signed=True, scale=0.5)  # pad code 2 (real 0 is not code 0)


def conv2d_net() -> iotable.TableNetwork:
    """(1, 9, 9) signed 2-bit pixels: a strided zero-padded conv, a dilated depthwise, a pointwise, a padded max-pool."""
    torch.manual_seed(5)
    model = nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(1, 3, 2, stride=2, padding=1), bn=nn.BatchNorm2d(3), q1=Quantize(1),
            dw=nn.Conv2d(3, 3, 3, padding=2, dilation=2, groups=3), q2=Quantize(2, signed=True),
            pw=nn.Conv2d(3, 4, 1), q3=Quantize(2, scale=0.5),
            pool=nn.MaxPool2d(2, padding=1), flatten=nn.Flatten(),
        )
    ).eval()  # fmt: skip
    return iotable.precompute(model, input_domain=HALF, example_input=torch.zeros(1, 1, 9, 9))


def conv1d_net() -> iotable.TableNetwork:
    """(2, 13) 2-bit sequences: a strided conv, a dilated zero-padded depthwise, a pointwise, a max-pool (kernel 3,
    stride 2, padding 1)."""
    torch.manual_seed(6)
    model = nn.Sequential(
        OrderedDict(
            c1=nn.Conv1d(2, 3, 3, stride=2), q1=Quantize(2, signed=True),
            dw=nn.Conv1d(3, 3, 3, padding=2, dilation=2, groups=3), q2=Quantize(1),
            pw=nn.Conv1d(3, 2, 1), q3=Quantize(2),
            pool=nn.MaxPool1d(3, stride=2, padding=1),
        )
    ).eval()  # fmt: skip
    return iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 2, 13))


NETS = {"conv2d": conv2d_net, "conv1d": conv1d_net}


@pytest.fixture(scope="module")
def nets() -> dict[str, iotable.TableNetwork]:
    return {key: build() for key, build in NETS.items()}


def stream(net: iotable.TableNetwork, directory: Path, **options) -> Design:
    return export(net, directory, style="streaming", **options)


# -- the design ------------------------------------------------------------------------------------------------


def test_every_unit_is_instantiated_once_and_ports_carry_pixels(nets, tmp_path: Path) -> None:
    """The 2D net streams 81 pixels of 1 code in and 9 of 4 codes out; each layer instantiates each unit once."""
    net = nets["conv2d"]
    design = stream(net, tmp_path, top="s2", vectors=4)
    assert (design.inputs.beats, design.inputs.elements, design.inputs.width) == (81, 1, 2)
    assert (design.outputs.beats, design.outputs.elements, design.outputs.node) == (9, 4, "pool")
    assert design.output_node == "pool" and design.outputs.shape == (4, 3, 3)
    assert [(r.node, r.units, r.instances) for r in design.layers] == [("conv", 3, 3), ("dw", 3, 3), ("pw", 4, 4)]
    assert design.interval == 121  # the largest frame a stage moves: the 11 x 11 padded input
    assert "style streaming" in design.summary() and "81 words of 1 codes" in design.summary()


def test_line_buffers_hold_exactly_the_graphs_buffer_depth(nets, tmp_path: Path) -> None:
    """Each window node's line buffer is its buffer_depth elements (registers and memory); the pool's follows the
    same formula."""
    net = nets["conv2d"]
    design = stream(net, tmp_path, top="s2", vectors=4)
    text = (tmp_path / "s2.v").read_text()
    declared = []  # each line buffer's bits: its shift register, or its rows' registers and the memory between them
    for module in text.split("// Line buffer of node")[1:]:
        module = module[: module.index("endmodule")]
        registers = re.findall(r"reg \[(\d+):0\] (?:pixels|newest|line_q|older);", module)
        memory = re.findall(r"reg \[(\d+):0\] lines \[0:(\d+)\];", module)
        declared.append(sum(int(w) + 1 for w in registers) + sum((int(w) + 1) * (int(d) + 1) for w, d in memory))
    windows = [n for n in net.graph if n.kind.value == "window"]
    bits = {"conv:window": 2, "dw:window": 1, "pw:window": 2}  # bits of one element of each window's input
    expected = [n.meta.buffer_depth * bits[n.name] for n in windows]
    pool_depth = iotable.graph.nodes.window_buffer_depth((2, 2), (1, 1), (7, 7), 4) * 2  # 5x5 pw output, padded by 1
    assert declared == [*expected, pool_depth]
    assert design.line_buffers == sum(declared)


def test_beats_round_trip(nets) -> None:
    """beats_of puts positions in raster order with channels in a word; from_beats undoes it."""
    node = nets["conv2d"].graph["input"]
    codes = np.arange(3 * 9 * 9).reshape(3, 1, 9, 9)
    beats = beats_of(codes, node)
    assert beats.shape == (243, 1) and beats[1].tolist() == [1] and beats[81].tolist() == [81]
    assert np.array_equal(from_beats(beats, node, 3), codes)
    pool = nets["conv2d"].graph["pool"]  # (4, 3, 3): channels in a word
    codes = np.arange(2 * 36).reshape(2, 4, 3, 3)
    beats = beats_of(codes, pool)
    assert beats.shape == (18, 4) and beats[1].tolist() == [1, 10, 19, 28]
    assert np.array_equal(from_beats(beats, pool, 2), codes)


# -- benches and simulate ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", [1, 0])
@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
@pytest.mark.parametrize("key", sorted(NETS))
def test_streaming_convolutions_equal_net_run(nets, tmp_path: Path, key: str, simulator: str, pipeline: int) -> None:
    """Stride 2, dilation 2, zero padding, depthwise and pointwise layers and padded max-pools, 1D and 2D: the bench
    passes, and simulate returns net.run's codes."""
    net = nets[key]
    design = stream(net, tmp_path, language=SIMULATORS[simulator], top=key, vectors=30, pipeline=pipeline)
    result = run_bench(design, simulator)
    assert result.passed and "30/30 vectors match" in result.stdout, result.stdout
    x = values(net.input_node.domain, (12, *net.input_node.shape), 8)
    hardware = simulate(design, x, simulator=simulator)  # the codes of the last node before the flatten, if any
    assert torch.equal(hardware, design.reference(x))
    assert torch.equal(hardware.reshape(12, *net.output_node.shape), net.run(x, return_codes=True))


def test_streaming_runs_under_verilator(nets, tmp_path: Path) -> None:
    """Verilator compiles and runs the streaming 2D design's bench."""
    design = stream(nets["conv2d"], tmp_path, top="s2", vectors=10)
    result = run_bench(design, "verilator")
    assert result.passed and "10/10 vectors match" in result.stdout, result.stdout


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_flat_networks_stream_one_word_per_vector(tmp_path: Path, simulator: str) -> None:
    """An MLP has no positions: one word a vector, the same ports as the unrolled design, and its bench passes."""
    net = iotable.precompute(small_mlp(), input_domain=D2)
    design = stream(net, tmp_path, language=SIMULATORS[simulator], top="mlp", vectors=25)
    assert (design.inputs.beats, design.outputs.beats, design.interval, design.latency) == (1, 1, 1, 3)
    assert design.inputs.width == 24 and design.outputs.width == 12
    result = run_bench(design, simulator)
    assert result.passed and "25/25 vectors match" in result.stdout


def test_streaming_with_mapped_tables(nets, tmp_path: Path) -> None:
    """Tables as their ABC LUT netlists stream as the case tables do: the bench passes and simulate equals net.run."""
    require_program("berkeley-abc", package="berkeley-abc")
    net = nets["conv1d"]
    design = stream(net, tmp_path, top="s1", vectors=20, tables="mapped", cache_dir=tmp_path / "cache")
    assert design.tables == "mapped" and all(r.luts for r in design.layers)
    result = run_bench(design, "iverilog")
    assert result.passed and "20/20 vectors match" in result.stdout, result.stdout
    x = values(D2, (6, 2, 13), 5)
    assert torch.equal(simulate(design, x), net.run(x, return_codes=True))


# -- the tamper test ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_a_flipped_row_fails_the_streaming_bench(nets, tmp_path: Path, simulator: str) -> None:
    """Flipping the row of the pointwise layer's unit 1 that the first vector's first position reads makes the bench
    fail, naming the vector, the position and the channel of the pool that unit 1 feeds."""
    net, language = nets["conv1d"], SIMULATORS[simulator]
    x = values(D2, (10, 2, 13), 3)
    design = stream(net, tmp_path, language=language, top="s1", inputs=x, inline_bits=0)
    _, env = net.runtime.run(net.encode_input(x), capture=True)
    row = env["pw:window"][0, 0].tolist()  # the window vector of position 0 of vector 0: the dw output channels
    unit = net.graph["pw"].meta.units[1]
    codes = [row[i] for i in net.graph["pw"].meta.index_map[1, : unit.fan_in].tolist()]
    top = (tmp_path / design.sources[-1]).read_text()
    pattern = r"\n    (\w+) u1_p0 \(" if language == "verilog" else r"\n    u1_p0 : entity work\.(\w+) "
    layer = top[top.index("s1_layer2 ") :]
    module = re.search(pattern, layer).group(1)
    source = f"{module}{'.v' if language == 'verilog' else '.vhd'}"
    files = files_of(design, design.sources + design.bench)
    label = "_".join(format(c, "01b") for c in codes)
    found = (
        re.search(rf"3'b{label}: codes = 2'b[01]([01]);", files[source])
        if language == "verilog"
        else re.search(rf'b"{label}" => codes <= b"[01]([01])";', files[source])
    )
    assert found is not None
    flipped = "1" if found.group(1) == "0" else "0"
    files[source] = files[source][: found.start(1)] + flipped + files[source][found.end(1) :]
    result = run_bench(design, simulator, files)
    assert not result.passed and "vectors match" not in result.stdout
    assert re.search(r"mismatch at vector \d+ position \d: output element 1 \(node 'pool' channel 1\)", result.stdout)


# -- synthesis ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
@pytest.mark.parametrize("key", sorted(NETS))
def test_streaming_designs_pass_synthesis_checks(nets, tmp_path: Path, key: str, language: str) -> None:
    """yosys (synth, check -assert, no latch) accepts the Verilog, ghdl's synthesis the VHDL, 1D and 2D."""
    require_program("yosys", package="yosys")
    if language == "vhdl":
        require_program("ghdl", package="ghdl")
    design = stream(nets[key], tmp_path, language=language, top=key, vectors=4)
    assert check(design, timeout=300).top == key


# -- what a stream cannot carry is refused by name -----------------------------------------------------------


def test_copying_padding_modes_are_refused_by_name(tmp_path: Path) -> None:
    """Reflect padding reads pixels that have not arrived: refused, naming the pad node, with the unrolled style as fix."""
    model = nn.Sequential(nn.Conv1d(1, 1, 3, padding=1, padding_mode="reflect"), Quantize(1)).eval()
    net = iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 1, 6))
    with pytest.raises(HDLError, match=r"cannot build node '0:pad' \(pad\): padding mode 'reflect'.*style='unrolled'"):
        stream(net, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_fan_out_is_refused_by_name(tmp_path: Path) -> None:
    """A skip connection needs buffers that keep two streams in step: refused, naming the duplicate node."""
    net = iotable.precompute(Residual().eval(), input_domain=D2, example_input=torch.zeros(1, 6))
    with pytest.raises(HDLError, match=r"style 'streaming' cannot build node '[\w:]+' \(duplicate\)"):
        stream(net, tmp_path)


def test_a_table_reading_a_whole_frame_is_refused_by_name(tmp_path: Path) -> None:
    """A sparse layer after a flatten reads the frame as one vector: refused, naming it; as a host head it exports."""
    torch.manual_seed(1)
    model = nn.Sequential(
        OrderedDict(conv=nn.Conv1d(1, 2, 3), q1=Quantize(1), flat=nn.Flatten(), fc=sparse(8, 3, 2, 1), q2=Quantize(1))
    ).eval()
    net = iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 1, 6))
    with pytest.raises(HDLError, match=r"cannot build node 'fc' \(table\): it reads node 'flat', a whole frame"):
        stream(net, tmp_path)
    headless = iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 1, 6), host=["fc", "q2"])
    design = stream(headless, tmp_path, vectors=4)
    assert design.output_node == "conv" and design.outputs.beats == 4 and design.host == ("fc", "q2")


# -- the digits CNN example, streamed -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits_cnn():
    """The digits CNN example trained briefly, precomputed up to its float head, with the digits test split."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        digits = importlib.import_module("_digits")
        x_train, y_train, x_test, _ = digits.load(image=True)
        torch.manual_seed(0)
        model = importlib.import_module("digits_cnn").DigitsCNN()
        digits.train(model, x_train[:400], y_train[:400], epochs=1)
    finally:
        sys.path.remove(str(EXAMPLES))
    model.eval()
    net = iotable.precompute(model, input_domain=digits.INPUT_DOMAIN, example_input=x_train[:1], host=["fc"])
    return model, net, x_test


@pytest.mark.slow  # the whole test split streamed through a simulator
@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_digits_cnn_streams_the_whole_test_split(digits_cnn, tmp_path: Path, simulator: str) -> None:
    """The digits CNN (32 tables of 2^16 to 2^18 rows, one instance each) passes its bench on all 360 test digits,
    and the hardware's codes are the model's features, quantized, which its float head reads."""
    model, net, x_test = digits_cnn
    design = stream(net, tmp_path, language=SIMULATORS[simulator], top="cnn", inputs=x_test)
    assert [(r.units, r.instances) for r in design.layers] == [(8, 8), (8, 8), (16, 16)]
    assert design.output_node == "features.pointwise" and design.host == ("fc",)
    assert (design.inputs.beats, design.outputs.beats, design.interval) == (64, 16, 100)
    result = run_bench(design, simulator)
    assert result.passed and "360/360 vectors match" in result.stdout, result.stdout[-2000:]
    with torch.no_grad():
        features = model.features(x_test).numpy()
    expected = torch.as_tensor(net.graph[design.output_node].domain.encode(features), dtype=torch.int64)
    assert torch.equal(design.reference(x_test), expected)
    # the host head on the hardware's codes gives the model's class scores, as net.run does
    with torch.no_grad():
        head = model.fc(torch.tensor(net.graph[design.output_node].domain.values)[expected].reshape(360, -1).float())
    assert torch.equal(head, net.run(x_test))


@pytest.mark.slow  # every table of the CNN through an exhaustive bench
def test_digits_cnn_tables_pass_their_exhaustive_benches(digits_cnn, tmp_path: Path) -> None:
    """Every one of the digits CNN's 32 tables (2^16 or 2^18 rows, in blocks) passes its exhaustive bench under ghdl;
    the first table of each layer under iverilog too."""
    _, net, _ = digits_cnn
    rows = {name: len(layer.tables[0]) for name, layer in net.layers.items()}
    for language, simulator in (("vhdl", "ghdl"), ("verilog", "iverilog")):
        require_program(simulator, package=simulator)
        design = stream(net, tmp_path / language, language=language, top="cnn", vectors=2, table_benches=True)
        assert len(design.table_benches) == 32
        first = ("cnn_layer0_u0_tb", "cnn_layer1_u0_tb", "cnn_layer2_u0_tb")
        suffix = ".v" if language == "verilog" else ".vhd"
        for bench in design.table_benches if simulator == "ghdl" else first:
            name = bench[: -len("_tb")]
            layer = design.layers[int(name.split("_layer")[1].split("_")[0])].layer
            files = files_of(design, (f"{name}{suffix}", f"{bench}{suffix}", f"{name}_vectors.hex"))
            result = simulate_files(files, bench, simulator=simulator, timeout=300)
            assert result.passed and f"{rows[layer]}/{rows[layer]} vectors match" in result.stdout, bench


def test_cli_export_streaming(nets, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """iotable export --style streaming writes the streaming design of a saved network and prints its description."""
    from iotable.cli import main

    bundle = iotable.save(nets["conv1d"], tmp_path / "bundle")
    argv = ["export", "verilog", str(bundle), str(tmp_path / "hw"), "--top", "s1", "--style", "streaming"]
    assert main([*argv, "--vectors", "12"]) == 0
    out = capsys.readouterr().out
    assert "s1: verilog design, style streaming" in out and "line buffers:" in out
    assert "module s1_window0" in (tmp_path / "hw" / "s1.v").read_text()
    with pytest.raises(SystemExit) as exit_info:  # argparse refuses an unknown style
        main([*argv[:-1], "folded"])
    assert exit_info.value.code == 2 and "invalid choice: 'folded'" in capsys.readouterr().err
