"""An integer dense layer (16 codes of 4 bits to 8 sums, weights from -8 to 7) in hardware: its adder block shares
the pairs of shifted codes its outputs have in common, simulates equal to net.run under iverilog and GHDL,
pipelined or not, and a shared sum edited into the design makes the design's own bench fail. Sums with random
weights of every kind (negative, zero, powers of two, large) simulate equal too, through low bits that bypass an
adder, a root subtracted from the constant and an adder cut to the output's bits; zeroed bypass bits fail the
bench."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from iotable import NodeKind, TableNetwork
from iotable.hdl import emit, export
from tests.test_adder_trees import Branches
from tests.test_hdl_arith import bench_result, every_input, simulates_equal, sum_node, table_layer, then


def dense_layer() -> TableNetwork:
    """A table layer of 16 outputs of 4 bits, then 8 sums of all 16 codes with random weights from -8 to 7."""
    net = table_layer(16, 4, seed=5)
    table = net.graph.nodes_of(NodeKind.TABLE)[0]
    weights = np.random.default_rng(1).integers(-8, 8, size=(8, 16))
    index = np.tile(np.arange(16), (8, 1))
    return then(net, sum_node("dense", table, index, weights, (8,)))


@pytest.fixture(scope="module")
def dense() -> TableNetwork:
    return dense_layer()


def shared_wires(text: str, language: str) -> list[str]:
    pattern = r"wire \[\d+:0\] (c\d+) =" if language == "verilog" else r"signal (c\d+) : std_logic_vector"
    return re.findall(pattern, text)


@pytest.mark.parametrize("pipeline", [0, 1])
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_a_dense_layer_shares_its_sums_and_equals_net_run(
    dense: TableNetwork, tmp_path: Path, language: str, pipeline: int
) -> None:
    """The adder block computes shared sums once (more than ten of them) and its outputs equal net.run on every
    input; pipeline 1 registers the sums (one level of 16 terms)."""
    x = every_input()
    design = export(dense, tmp_path, language=language, pipeline=pipeline, inputs=x)
    text = (design.directory / design.sources[-1]).read_text()
    assert len(shared_wires(text, language)) > 10
    simulates_equal(dense, design, x)


TAMPER = {  # the first shared sum's adder made a subtraction of the same operands
    "verilog": r"wire \[\d+:0\] c0_0_0 = [^;]*?( \+ )",
    "vhdl": r"c0_0_0 <= [^;]*?( \+ )",
}


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_a_changed_shared_sum_fails_the_bench(dense: TableNetwork, tmp_path: Path, language: str) -> None:
    """Tamper: the first shared sum's adder turned into a subtraction makes the design's own bench fail, naming a
    sum's output; the design as exported passes."""
    x = every_input()
    design = export(dense, tmp_path, language=language, pipeline=0, inputs=x)
    files = {name: (design.directory / name).read_text() for name in design.sources + design.bench}
    assert bench_result(design, dict(files)).passed
    top = design.sources[-1]
    match = re.search(TAMPER[language], files[top])
    assert match is not None
    files[top] = files[top][: match.start(1)] + " - " + files[top][match.end(1) :]
    result = bench_result(design, files)
    assert not result.passed
    assert "mismatch at vector" in result.stdout and "node 'dense'" in result.stdout


def random_weights(rng: np.random.Generator, outputs: int, inputs: int) -> np.ndarray:
    """Weights of every kind the adder trees treat apart: zero, +-1, powers of two, runs of ones (``2**n - 1``),
    odd and large ones (up to 2**9); the first output all negative (its root subtracted from the constant), the
    second ``2**16 * x0 - x1``, the widest sum (the node's outputs all have its bits; its adder, two's complement,
    needs one more: it is cut to the output's bits), the last a scaled copy of the first (much to share)."""
    choices = np.array([0, 1, -1, 2, -4, 8, -16, 64, -256, 512, 3, -7, 15, -31, 5, -9, 27, -100, 301, -443])
    weights = rng.choice(choices, size=(outputs, inputs))
    weights[0] = -np.abs(weights[0]) - (weights[0] == 0)
    weights[1] = 0
    weights[1, :2] = (1 << 16, -1)
    weights[-1] = -2 * weights[0]
    return weights


def mixed(seed: int) -> TableNetwork:
    """A table layer of eight 3-bit codes, then four sums of all eight with :func:`random_weights`."""
    net = table_layer(8, 3, seed=10 + seed)
    table = net.graph.nodes_of(NodeKind.TABLE)[0]
    weights = random_weights(np.random.default_rng(seed), 4, 8)
    return then(net, sum_node("mixed", table, np.tile(np.arange(8), (4, 1)), weights, (4,)))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_random_weights_simulate_equal_to_net_run(
    tmp_path: Path, language: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four sums of eight 3-bit codes with random weights (negative, zero, powers of two, large) simulate equal to
    net.run on every input, and their trees bypass an adder with low bits, subtract a root from the constant and
    cut an adder below its range."""
    net = mixed(seed)
    seen = Branches()
    monkeypatch.setattr(emit, "_join", seen.join(emit._join))
    monkeypatch.setattr(emit, "adder_tree", seen.counted(emit.adder_tree, "output"))
    x = every_input()
    simulates_equal(net, export(net, tmp_path, language=language, pipeline=0, inputs=x), x)
    assert all(seen.counts[b] >= 1 for b in ("bypass", "negated", "truncated")), dict(seen.counts)


BYPASS = {  # the low bits under the first adder that lets them bypass it
    "verilog": r"wire \[\d+:0\] \w+ = \{\w+_h, (x\[(\d+):(\d+)\])\};",
    "vhdl": r"\w+ <= \w+_h & (unsigned\(x\((\d+) downto (\d+)\)\));",
}


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_zeroed_bypass_bits_fail_the_bench(tmp_path: Path, language: str) -> None:
    """Tamper: the bits that bypass an adder replaced by zeros make the design's own bench fail, naming a sum's
    output; the design as exported passes."""
    net = mixed(0)
    x = every_input()
    design = export(net, tmp_path, language=language, pipeline=0, inputs=x)
    files = {name: (design.directory / name).read_text() for name in design.sources + design.bench}
    assert bench_result(design, dict(files)).passed
    top = design.sources[-1]
    match = re.search(BYPASS[language], files[top])
    assert match is not None
    zeros = "0" * (int(match.group(2)) - int(match.group(3)) + 1)
    value = f"{len(zeros)}'b{zeros}" if language == "verilog" else f'unsigned\'("{zeros}")'
    files[top] = files[top][: match.start(1)] + value + files[top][match.end(1) :]
    result = bench_result(design, files)
    assert not result.passed
    assert "mismatch at vector" in result.stdout and "node 'mixed'" in result.stdout
