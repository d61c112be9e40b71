"""The arithmetic node kinds in hardware: adder trees, argmax trees and threshold chains on graphs made by hand
(a table layer, then sums, thresholds and an argmax; DWN's popcount GroupSum of 120 one-bit codes), exported in
Verilog and VHDL, both styles, pipelined or not, simulated equal to net.run under iverilog and GHDL, accepted by
the synthesis checks, and a wrong adder constant or a moved threshold caught by the design's own bench."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, NodeKind, TableNetwork
from iotable.errors import HDLError
from iotable.graph.fields import element_radix_bits
from iotable.graph.graph import Edge, Graph, Node
from iotable.graph.nodes import ArgmaxMeta, SumMeta, ThresholdMeta
from iotable.hdl import Design, check, export, simulate, simulate_files
from iotable.nn import Quantize
from iotable.nodekinds.argmax import argmax_shape
from iotable.nodekinds.sum import code_layout, sum_range
from tests.optional import require_program
from tests.test_arith_kinds import four_codes, with_arithmetic

SIMULATORS = {"verilog": "iverilog", "vhdl": "ghdl"}
U1, U2 = Domain.uniform(1), Domain.uniform(2)


# -- graphs made by hand ---------------------------------------------------------------------------------------


def then(net: TableNetwork, *nodes: Node) -> TableNetwork:
    """``net`` with ``nodes`` in a chain after what fed its output (each reading the one before), the last one
    the new output."""
    output = net.graph.nodes_of(NodeKind.OUTPUT)[0]
    last = net.graph.producers(output.name)[0]
    new_output = dataclasses.replace(output, shape=nodes[-1].shape, layout=nodes[-1].layout, domain=nodes[-1].domain)
    edges = [e for e in net.graph.edges if e.consumer != output.name]
    for producer, consumer in itertools.pairwise([last, *nodes, new_output]):
        edges.append(Edge(producer.name, 0, consumer.name, 0, producer.shape, producer.layout, producer.domain))
    kept = [n for n in net.graph.nodes if n.kind is not NodeKind.OUTPUT]
    result = dataclasses.replace(net, graph=Graph([*kept, *nodes, new_output], edges))
    result.graph.check()
    return result


def sum_node(name: str, producer: Node, index: np.ndarray, weights: np.ndarray, shape: tuple[int, ...]) -> Node:
    """Sums of ``producer``'s codes, their constants chosen so that the smallest sum is code 0."""
    radix, _ = element_radix_bits(producer)
    zero = np.zeros(len(index), np.int64)
    low, high = sum_range(SumMeta(index, weights, zero), np.asarray(radix, np.int64))
    meta = SumMeta(index, weights, -low, exact="integer codes")
    return Node(name, NodeKind.SUM, shape, code_layout(shape), Domain(range(int((high - low).max()) + 1)), meta)


def argmax_node(name: str, producer: Node, dim: int, keepdim: bool = False) -> Node:
    shape = argmax_shape(producer.shape, dim, keepdim)
    domain = Domain(range(producer.shape[dim]))
    return Node(name, NodeKind.ARGMAX, shape, code_layout(shape), domain, ArgmaxMeta(dim, keepdim))


def threshold_node(name: str, producer: Node, thresholds: np.ndarray, levels: int) -> Node:
    count = len(thresholds)
    meta = ThresholdMeta(thresholds, np.zeros(count, np.int64), np.ones(count, np.int64))
    return Node(name, NodeKind.THRESHOLD, producer.shape, producer.layout, Domain(range(levels)), meta)


def table_layer(outputs: int, bits: int, seed: int) -> TableNetwork:
    """One table layer: 3 inputs of 2-bit codes, ``outputs`` codes of ``bits`` bits spread over their domain."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, outputs), Quantize(bits))
    with torch.no_grad():
        model[0].weight.normal_(0.0, 1.5)
        model[0].bias.fill_(0.5 if bits == 1 else -1.0)
    return iotable.precompute(model.eval(), input_domain=U2, example_input=torch.zeros(1, 3))


def popcount(groups: int) -> TableNetwork:
    """DWN's GroupSum: 120 one-bit codes summed in ``groups`` groups (a popcount per class), then the argmax."""
    net = table_layer(120, 1, seed=3)
    table = net.graph.nodes_of(NodeKind.TABLE)[0]
    index = np.arange(120).reshape(groups, -1)
    sums = sum_node("group_sum", table, index, np.ones_like(index), (groups,))
    return then(net, sums, argmax_node("class", sums, 0))


def weighted() -> TableNetwork:
    """Two sums of 20 two-bit codes with weights from -7 to 7 (shifts, odd multiples, complements): deeper than one
    tree of :data:`~iotable.hdl.arithmetic.TREE_TERMS` terms."""
    net = table_layer(20, 2, seed=4)
    table = net.graph.nodes_of(NodeKind.TABLE)[0]
    weights = np.random.default_rng(0).integers(-7, 8, size=(2, 20))
    weights[weights == 0] = 3
    index = np.tile(np.arange(20), (2, 1))
    return then(net, sum_node("sums", table, index, weights, (2,)))


def conv_layer() -> TableNetwork:
    """A conv layer: 4 channels of 2-bit codes on a 4 x 4 frame."""
    torch.manual_seed(7)
    model = nn.Sequential(nn.Conv2d(1, 4, 2), Quantize(2))
    with torch.no_grad():
        model[0].weight.normal_(0.0, 1.5)
    return iotable.precompute(model.eval(), input_domain=U2, example_input=torch.zeros(1, 1, 5, 5))


def pixels() -> TableNetwork:
    """:func:`conv_layer`, then per pixel: two sums of its channels, thresholds (the same per channel at every
    position) and the argmax over the channels, kept as a frame."""
    net = conv_layer()
    table = net.graph.nodes_of(NodeKind.TABLE)[0]
    flat = np.arange(64).reshape(4, 16)  # (channel, position)
    index = np.concatenate([np.stack([flat[0], flat[1], flat[2]], 1), np.stack([flat[3], flat[0], flat[1]], 1)])
    weights = np.repeat(np.array([[1, 2, -1], [3, -1, 1]]), 16, axis=0)
    sums = sum_node("sums", table, index, weights, (2, 4, 4))
    steps = np.repeat(np.array([[3, 6], [4, 9]]), 16, axis=0)
    levels = threshold_node("levels", sums, steps, 3)
    return then(net, sums, levels, argmax_node("best", levels, 0, keepdim=True))


@pytest.fixture(scope="module")
def hand() -> TableNetwork:
    """test_arith_kinds' graph with a constant that the adder trees must add (5, less 3 for a complement)."""
    return with_arithmetic(four_codes(), constant=5)


def every_input() -> torch.Tensor:
    return torch.cartesian_prod(*[torch.arange(4.0)] * 3)


def random_inputs(shape: tuple[int, ...], n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 4, (n, *shape), generator=torch.Generator().manual_seed(seed)).float()


def bench_result(design: Design, files: dict[str, str] | None = None):
    simulator = SIMULATORS[design.language]
    require_program(simulator, package=simulator)
    files = files or {name: (design.directory / name).read_text() for name in design.sources + design.bench}
    return simulate_files(files, f"{design.top}_tb", simulator=simulator, timeout=300)


def simulates_equal(net: TableNetwork, design: Design, x: torch.Tensor) -> None:
    """The design's outputs equal net.run's codes, and its own bench (vectors from net.run) passes."""
    simulator = SIMULATORS[design.language]
    require_program(simulator, package=simulator)
    assert torch.equal(simulate(design, x, simulator=simulator), net.run(x, return_codes=True))
    result = bench_result(design)
    assert result.passed, result.stdout + result.stderr


# -- equal to net.run ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", [0, 1])
@pytest.mark.parametrize("style", ["unrolled", "streaming"])
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_sum_threshold_argmax_equal_net_run_on_every_input(
    hand: TableNetwork, tmp_path: Path, language: str, style: str, pipeline: int
) -> None:
    """A table layer, weighted sums plus a constant, thresholds and an argmax simulate equal to net.run on all 64
    inputs; each arithmetic node counts as a table layer for the pipeline."""
    x = every_input()
    design = export(hand, tmp_path, language=language, style=style, pipeline=pipeline, inputs=x)
    assert design.latency == (4 if pipeline else 0)
    simulates_equal(hand, design, x)


@pytest.mark.parametrize(("style", "language"), [("unrolled", "verilog"), ("streaming", "vhdl")])
@pytest.mark.parametrize("groups", [10, 2])
def test_popcount_group_sum_and_argmax(tmp_path: Path, groups: int, style: str, language: str) -> None:
    """DWN's GroupSum (120 one-bit codes in 10 groups of 12, or 2 of 60) then the argmax: the class out of the
    hardware equals net.run; a group of 60 is split into two levels of adder trees with a register after each."""
    net = popcount(groups)
    x = random_inputs((3,), 64, seed=groups)
    assert len(set(net.run(x, return_codes=True).tolist())) > 1  # more than one class happens
    design = export(net, tmp_path, language=language, style=style, pipeline=1, inputs=x)
    levels = 1 if groups == 10 else 2
    assert design.latency == 1 + levels + 1
    text = (design.directory / design.sources[-1]).read_text()
    assert f"sum node 'group_sum' (level {levels} of {levels})" in text
    simulates_equal(net, design, x)


def test_adder_widths_are_exactly_what_the_sums_need(tmp_path: Path) -> None:
    """A popcount of 12 one-bit codes: adders of 2, 3 and 4 bits, never more than the 4 bits of the output."""
    design = export(popcount(10), tmp_path, language="verilog", pipeline=0, vectors=4)
    text = (design.directory / design.sources[-1]).read_text()
    module = text[
        text.index("module iotable_net_arith0") : text.index("endmodule", text.index("module iotable_net_arith0"))
    ]
    widths = [int(w) + 1 for w in re.findall(r"wire \[(\d+):0\] s0_", module)]
    assert sorted(set(widths)) == [2, 3, 4] and len(widths) == 11  # 12 terms, 11 two-input adders


@pytest.mark.parametrize("pipeline", [0, 1, 2])
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_weighted_sums_of_twenty_codes(tmp_path: Path, language: str, pipeline: int) -> None:
    """Negative and odd weights (complements, multiplies, shifts) over 20 codes, in one tree or in two levels,
    equal net.run; pipeline 2 puts a register after every second layer or level."""
    net = weighted()
    x = every_input()
    design = export(net, tmp_path, language=language, pipeline=pipeline, inputs=x)
    assert design.latency == {0: 0, 1: 3, 2: 1}[pipeline]
    simulates_equal(net, design, x)


@pytest.mark.parametrize("style", ["unrolled", "streaming"])
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_per_pixel_arithmetic(tmp_path: Path, language: str, style: str) -> None:
    """Sums, thresholds and an argmax over each pixel's channels: unrolled at every position, or streamed one
    pixel a beat with one instance of each block."""
    net = pixels()
    x = random_inputs((1, 5, 5), 24, seed=8)
    design = export(net, tmp_path, language=language, style=style, pipeline=1, inputs=x)
    simulates_equal(net, design, x)


def test_streaming_refuses_sums_across_positions(tmp_path: Path) -> None:
    """A sum that reads other positions than its own, or an argmax along a spatial axis, needs a frame buffer:
    the streaming style refuses it by name, the unrolled style builds it."""
    net = conv_layer()
    table = net.graph.nodes_of(NodeKind.TABLE)[0]
    index = np.arange(64).reshape(4, 16)
    across = then(net, sum_node("totals", table, index, np.ones_like(index), (4,)))
    with pytest.raises(HDLError, match=r"cannot build node 'totals' \(sum\): its outputs gather a frame"):
        export(across, tmp_path / "a", style="streaming", vectors=4)
    neighbours = np.roll(np.arange(16), 1).reshape(16, 1)  # each position reads the one before
    shifted = then(net, sum_node("shifted", table, neighbours, np.ones_like(neighbours), (1, 4, 4)))
    with pytest.raises(HDLError, match=r"cannot build node 'shifted' \(sum\): an output reads elements of other"):
        export(shifted, tmp_path / "d", style="streaming", vectors=4)
    along = then(net, argmax_node("widest", table, 2))
    with pytest.raises(HDLError, match=r"cannot build node 'widest' \(argmax\)"):
        export(along, tmp_path / "b", style="streaming", vectors=4)
    x = random_inputs((1, 5, 5), 8, seed=9)
    design = export(across, tmp_path / "c", language="verilog", pipeline=1, inputs=x)
    simulates_equal(across, design, x)


@pytest.mark.slow
def test_verilator_runs_the_arithmetic(tmp_path: Path) -> None:
    """Verilator (2-state, stricter about widths) gives the same codes for a deep popcount and weighted sums."""
    require_program("verilator", package="verilator")
    require_program("g++", package="g++")
    for k, (net, x) in enumerate(((popcount(2), random_inputs((3,), 64, seed=11)), (weighted(), every_input()))):
        design = export(net, tmp_path / str(k), pipeline=1, inputs=x)
        codes = simulate(design, x, simulator="verilator", cache_dir=tmp_path / "cache")
        assert torch.equal(codes, net.run(x, return_codes=True))


# -- synthesis checks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", [0, 1])
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_check_passes(hand: TableNetwork, tmp_path: Path, language: str, pipeline: int) -> None:
    """yosys (Verilog) or ghdl's synthesis (VHDL) accepts the arithmetic blocks, combinational or registered."""
    require_program("yosys", package="yosys")
    if language == "vhdl":
        require_program("ghdl", package="ghdl")
    design = export(hand, tmp_path, language=language, pipeline=pipeline, top="arith", vectors=4)
    assert check(design, timeout=300).top == "arith"


@pytest.mark.slow
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_check_passes_on_a_deep_popcount(tmp_path: Path, language: str) -> None:
    """The synthesis checks accept a popcount split into levels, and weighted sums."""
    require_program("yosys", package="yosys")
    if language == "vhdl":
        require_program("ghdl", package="ghdl")
    for k, net in enumerate((popcount(2), weighted())):
        design = export(net, tmp_path / str(k), language=language, pipeline=1, top="deep", vectors=4)
        assert check(design, timeout=300).top == "deep"


# -- tampered designs ------------------------------------------------------------------------------------------


def tampered(text: str, pattern: str, value: str) -> str:
    """``text`` with the first match of ``pattern``'s group 1 replaced by ``value``."""
    match = re.search(pattern, text)
    assert match is not None, pattern
    return text[: match.start(1)] + value + text[match.end(1) :]


TAMPER = {
    # the constant of sum 0 (5; its term of weight -1 is subtracted), one more
    ("verilog", "constant"): (r"assign y\[3:0\] = s0_1_0\[3:0\] \+ 4'd(5);", "6"),
    ("vhdl", "constant"): (
        r"y\(3 downto 0\) <= std_logic_vector\(resize\(unsigned\(s0_1_0\(3 downto 0\)\), 4\) \+ "
        r"unsigned'\(\"(0101)\"\)\)",
        "0110",
    ),
    # the second threshold of element 1 (8), one less
    ("verilog", "threshold"): (r"\(x\[7:4\] >= 4'd(8)\)", "7"),
    ("vhdl", "threshold"): (r"unsigned\(x\(7 downto 4\)\) >= unsigned'\(\"(1000)\"\)", "0111"),
}


@pytest.mark.parametrize("what", ["constant", "threshold"])
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_a_tampered_constant_fails_the_bench(hand: TableNetwork, tmp_path: Path, language: str, what: str) -> None:
    """A wrong adder constant or a moved threshold edited into the design makes its own bench fail, naming the
    output; the design as exported passes."""
    x = every_input()
    design = export(hand, tmp_path, language=language, pipeline=1, inputs=x)
    files = {name: (design.directory / name).read_text() for name in design.sources + design.bench}
    assert bench_result(design, dict(files)).passed
    top = design.sources[-1]
    pattern, value = TAMPER[(language, what)]
    files[top] = tampered(files[top], pattern, value)
    result = bench_result(design, files)
    assert not result.passed
    assert "mismatch at vector" in result.stdout and "node 'best'" in result.stdout
