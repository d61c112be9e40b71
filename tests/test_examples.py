"""The examples run as a user runs them: ``python examples/NAME.py`` in a fresh interpreter."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

from .optional import require_program

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))  # _name.py: helpers
# The longest examples run in the slow tier; the quick one runs the others (brevitas is also in test_brevitas.py).
SLOW_EXAMPLES = {"digits_brevitas", "digits_cnn", "digits_difflogic"}


def example(name: str) -> object:
    """A parameter naming an example, marked slow when that example is one of the longest."""
    return pytest.param(name, marks=pytest.mark.slow, id=name) if name in SLOW_EXAMPLES else pytest.param(name, id=name)


@functools.cache  # each example runs once per session, however many tests read its output
def run_example(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=script.parent.parent,
        check=False,
    )


def test_examples_exist() -> None:
    """The examples folder holds the depthwise example, so the parametrized run below is never empty."""
    assert EXAMPLES / "depthwise.py" in SCRIPTS


@pytest.mark.parametrize("name", [example(s.stem) for s in SCRIPTS])
def test_example_runs(name: str) -> None:
    """Every example exits with status 0 and prints something."""
    script = EXAMPLES / f"{name}.py"
    result = run_example(script)
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip()


def test_depthwise_prints_seed_tables() -> None:
    """The depthwise example prints three 64-row tables whose rows are the sums of their input codes."""
    result = run_example(EXAMPLES / "depthwise.py")
    assert result.returncode == 0, result.stderr
    part1 = result.stdout.split("== Part 2")[0]
    lines = [line.strip() for line in part1.splitlines()]
    assert "Conv1d: layout NCW, 3 unit(s), 192 row(s), input Domain.uniform(2), output None" in lines
    for unit in range(3):
        assert f"IOTable(unit {unit} of 'Conv1d', 64 rows dense, 3 inputs x 2 bit(s) -> 1 output(s) as values)" in lines
    for row in ("(0, 0, 0) -> 0", "(0, 0, 3) -> 3", "(2, 2, 2) -> 6", "(1, 1, 1) -> 3", "(3, 3, 3) -> 9"):
        assert lines.count(row) == 3, row


def test_depthwise_prints_fused_block() -> None:
    """The fused conv / batch norm / ReLU / quantizer block gives four tables of 2-bit codes that match the block."""
    result = run_example(EXAMPLES / "depthwise.py")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Sequential: layout NCW, 4 unit(s), 256 row(s)" in out
    assert "output Domain.uniform(2, scale=0.5)" in out
    assert "as codes of Domain.uniform(2, scale=0.5))" in out
    assert "checked against the block: 4 tables x 8 positions agree" in out


@pytest.mark.parametrize(
    "name", [example(n) for n in ("digits_mlp", "digits_cnn", "logicnets_style", "digits_difflogic")]
)
def test_digits_examples_agree_bit_for_bit(name: str) -> None:
    """The digits examples print both accuracies and 100% agreement between model and table network."""
    result = run_example(EXAMPLES / f"{name}.py")
    assert result.returncode == 0, result.stderr
    assert "agreement (model vs tables, bit for bit): 100.0%" in result.stdout
    assert "table-network accuracy on the 360 test digits" in result.stdout


def test_digits_mlp_restricts_to_observed_rows() -> None:
    """The MLP example prints rows kept / total and exact agreement of the restricted network on its data."""
    result = run_example(EXAMPLES / "digits_mlp.py")
    assert result.returncode == 0, result.stderr
    assert "rows kept / total = " in result.stdout
    assert "restricted network vs model on the observed training digits: 100.0% agree" in result.stdout
    assert "restricted network accuracy on the 360 held-out test digits" in result.stdout


@pytest.mark.parametrize("name", [example(n) for n in ("digits_mlp", "digits_cnn", "digits_difflogic")])
def test_digits_examples_put_the_class_in_hardware(name: str) -> None:
    """The digits examples export a design whose output is the argmax, and iverilog's class equals the model's on
    every test digit."""
    require_program("iverilog", package="iverilog")
    result = run_example(EXAMPLES / f"{name}.py")
    assert result.returncode == 0, result.stderr
    decision = result.stdout.split("out_data: ")[-1]
    assert decision.startswith("4 bits, 1 codes of node 'argmax' ()")
    assert "class in hardware (verilog, iverilog) equals the model's class on all 360 test digits" in decision
    assert "host nodes left to software" not in decision


@pytest.mark.slow
def test_difflogic_example_is_gates_and_a_popcount() -> None:
    """The DiffLogic example is tables, a popcount of 100 bits per class and an argmax, with no host node; GHDL's
    class equals the model's too."""
    require_program("ghdl", package="ghdl")
    result = run_example(EXAMPLES / "digits_difflogic.py")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    kinds = {row[0] for row in rows if len(row) > 2 and row[2].startswith("(")}
    assert kinds == {"input", "table", "reshape", "sum", "argmax", "output"}
    assert any(row[:4] == ["sum", "sum_1", "(10,)", "100"] for row in rows)  # then dead, estimate, registers
    assert "class in hardware (vhdl, ghdl) equals the model's class on all 360 test digits" in result.stdout


@pytest.mark.slow
def test_cnn_example_head_is_a_sum_and_its_quantizer() -> None:
    """The CNN's quantized head becomes a sum node (partial-sum tables or folded weights, as the estimates
    choose), its quantizer as a table or a threshold node per class, and an argmax: no host node."""
    result = run_example(EXAMPLES / "digits_cnn.py")
    assert result.returncode == 0, result.stderr
    decision = result.stdout.split("== The class decision in hardware")[1]
    rows = [line.split()[:2] for line in decision.splitlines() if line.startswith(("table ", "sum ", "threshold "))]
    (sum_kind, sum_name), (last_kind, last_name) = rows[-2:]
    assert sum_kind == "sum" and sum_name.endswith("head.fc_sum")
    assert last_kind in ("table", "threshold") and last_name.endswith("head.fc")
    assert "host nodes" not in decision
    assert "quantized-head accuracy on the 360 test digits" in decision


def test_qonnx_roundtrip_checks_every_step() -> None:
    """The QONNX example reads brevitas' file back as tables that agree with qonnx's executor on every input, and
    its Verilog (under iverilog) and plain ONNX (under onnxruntime) are equal to net.run."""
    require_program("iverilog", package="iverilog")
    result = run_example(EXAMPLES / "qonnx_roundtrip.py")
    assert result.returncode == 0, result.stderr
    assert "3. against qonnx's executor: 100.0% of 2000 inputs agree" in result.stdout
    assert "iverilog on 200 inputs: equal to net.run" in result.stdout
    assert "under onnxruntime: equal to net.run on 2000 inputs" in result.stdout
