"""An integer dense layer (16 codes of 4 bits to 8 sums, weights from -8 to 7) in hardware: its adder block shares
the pairs of shifted codes its outputs have in common, simulates equal to net.run under iverilog and GHDL,
pipelined or not, and a shared sum edited into the design makes the design's own bench fail."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from iotable import NodeKind, TableNetwork
from iotable.hdl import export
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
