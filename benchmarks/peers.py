"""``python -m benchmarks.peers``: iotable's arithmetic against a peer's on the same integer layers, LUTs side by
side under the same yosys flows.

Section ``dense``: integer dense layers (16 -> 8 and 64 -> 16) of 4-bit unsigned codes and 4-bit signed weights
(-8 .. 7, seeded), no bias:

- **iotable**: ``iotable.precompute`` of the ``nn.Linear`` makes a ``sum`` node; its adder block (exported by
  ``iotable.hdl.export``, ``pipeline=0``) is checked equal to ``net.run`` under iverilog on random codes and the
  extremes (``exact`` and ``RTL``), then synthesized alone.
- **alkaid** (the constant-matrix-vector multiplication of da4ml's successor): ``alkaid.cmvm.cmvm_solve`` of the
  same matrix, its Verilog and the ``shift_adder`` sources it instantiates, checked by its own ``predict``
  against ``x @ W`` on the same codes (``exact``) and its Verilog under iverilog on the first 300 of them
  (``RTL``: every output bit defined and equal), then synthesized alone.

Each module is synthesized by yosys ``synth_xilinx -flatten -nobram -nolutram`` (LUT1..LUT6 counted, CARRY4
beside) and ``synth_ice40`` (SB_LUT4, SB_CARRY beside). alkaid is never a dependency of iotable: it runs in the
Python given by ``--alkaid-python`` (default: this one; e.g. a separate ``python -m venv`` with ``pip install
alkaid``), and the section says why it is skipped where that Python cannot import it. Options: ``--json FILE``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

import iotable
from iotable import Domain, NodeKind

#: The layers: (name, inputs, outputs).
LAYERS = (("dense-16x8", 16, 8), ("dense-64x16", 64, 16))
BITS = 4
FLOWS = {
    "xilinx": ("synth_xilinx -top {top} -flatten -nobram -nolutram", r"LUT[1-6]", "CARRY4"),
    "ice40": ("synth_ice40 -top {top}", r"SB_LUT4", "SB_CARRY"),
}
TIMEOUT = 1200

# Run by the alkaid Python: reads {"weights", "x"} on stdin, writes its Verilog sources and, on stdout, whether
# its predict equals x @ W.
_ALKAID = r"""
import json, sys
from pathlib import Path
import numpy as np
import alkaid
from alkaid.cmvm import cmvm_solve
from alkaid.codegen.rtl.verilog.comb import comb_logic_gen
job = json.load(sys.stdin)
w = np.asarray(job["weights"], np.float32)  # (inputs, outputs)
x = np.asarray(job["x"], np.float64)
solution = cmvm_solve(w, qintervals=[(0.0, float(2 ** job["bits"] - 1), 1.0)] * w.shape[0])[0]
out = Path(job["directory"])
(out / "dense.v").write_text(comb_logic_gen(solution, "dense"))
source = Path(alkaid.__file__).parent / "codegen" / "rtl" / "verilog" / "source"
for name in ("shift_adder.v", "negative.v"):
    (out / name).write_text((source / name).read_text())
exact = bool(np.array_equal(np.asarray(solution.predict(x)), x @ w))
kifs = np.asarray(solution.out_kifs).tolist()
print(json.dumps({"exact": exact, "version": alkaid.__version__, "cost": float(solution.cost), "kifs": kifs}))
"""

#: Vectors of the RTL simulation of alkaid's Verilog (its outputs of every width, signed or not, read back).
SIMULATED = 300


def _print(text: str = "") -> None:
    print(text, flush=True)


def layer_weights(inputs: int, outputs: int) -> np.ndarray:
    """The layer's integer weights, ``(outputs, inputs)``, from -8 to 7, seeded by its shape."""
    return np.random.default_rng(inputs * 1000 + outputs).integers(
        -(2 ** (BITS - 1)), 2 ** (BITS - 1), (outputs, inputs)
    )


def codes(inputs: int, n: int = 2000) -> np.ndarray:
    """Random input codes, then every input at its lowest and at its highest."""
    rng = np.random.default_rng(inputs)
    top = 2**BITS - 1
    return np.concatenate([rng.integers(0, top + 1, (n, inputs)), np.zeros((1, inputs)), np.full((1, inputs), top)])


def synthesize(sources: list[Path], top: str, flow: str) -> dict[str, int]:
    """yosys ``flow`` on ``sources`` with ``top``: LUTs and carry cells."""
    command, luts, carries = FLOWS[flow]
    reads = "; ".join(f"read_verilog {s}" for s in sources)
    script = f"{reads}; {command.format(top=top)}; stat"
    done = subprocess.run(["yosys", "-q", "-p", script.replace("; stat", "; tee -o /dev/stdout stat")],
                          capture_output=True, text=True, timeout=TIMEOUT, check=True)  # fmt: skip
    cells = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+(\d+)\s*$", done.stdout, re.MULTILINE)}
    return {
        "luts": sum(n for cell, n in cells.items() if re.fullmatch(luts, cell)),
        "carries": cells.get(carries, 0),
    }


def iotable_layer(weights: np.ndarray, x: np.ndarray, directory: Path) -> dict[str, Any]:
    """iotable's sum node of the layer: its adder block, checked under iverilog, then synthesized."""
    outputs, inputs = weights.shape
    linear = torch.nn.Linear(inputs, outputs)
    with torch.no_grad():
        linear.weight.copy_(torch.as_tensor(weights, dtype=torch.float32))
        linear.bias.zero_()
    domain = Domain(np.arange(2.0**BITS))
    net = iotable.precompute(
        torch.nn.Sequential(linear).eval(), input_domain=domain, example_input=torch.zeros(1, inputs)
    )
    (node,) = net.graph.nodes_of(NodeKind.SUM)
    xs = torch.as_tensor(x, dtype=torch.float32)
    design = iotable.hdl.export(net, directory, language="verilog", pipeline=0)
    exact = torch.equal(iotable.hdl.simulate(design, xs, simulator="iverilog"), net.run(xs, return_codes=True))
    source = directory / design.sources[-1]
    (top,) = re.findall(r"^module (\w+_arith0) ", source.read_text(), re.MULTILINE)
    row = {
        "exact": bool(exact),
        "rtl": bool(exact),
        "estimate": int(next(r for r in net.rows() if r["name"] == node.name)["estimate"]),
    }
    for flow in FLOWS:
        row[flow] = synthesize([source], top, flow)
    return row


def alkaid_rtl(sources: list[Path], directory: Path, weights: np.ndarray, x: np.ndarray, row: dict[str, Any]) -> bool:
    """Whether alkaid's Verilog, under iverilog, gives ``x @ W.T`` on the first vectors, every bit defined (its
    outputs: fields of ``keep_negative + integer + fraction`` bits, two's complement where negative ones are
    kept)."""
    x = x[:SIMULATED].astype(np.int64)
    keep, integer, fraction = (np.asarray(r) for r in row["kifs"])
    widths = (keep + integer + fraction).tolist()
    inputs, total = x.shape[1], sum(widths)
    (directory / "vectors.hex").write_text(
        "".join(format(sum(int(v) << (BITS * i) for i, v in enumerate(r)), "x") + "\n" for r in x)
    )
    (directory / "tb.v").write_text(
        f"module tb; reg [{BITS * inputs - 1}:0] mem [0:{len(x) - 1}]; reg [{BITS * inputs - 1}:0] i_; "
        f"wire [{total - 1}:0] o_; integer k; dense d(.model_inp(i_), .model_out(o_)); initial begin "
        f'$readmemh("{directory / "vectors.hex"}", mem); for (k = 0; k < {len(x)}; k = k + 1) begin '
        'i_ = mem[k]; #1; $display("%b", o_); end end endmodule\n'
    )
    program = directory / "tb.vvp"
    subprocess.run(["iverilog", "-o", str(program), *map(str, sources), str(directory / "tb.v")], check=True,
                   capture_output=True, timeout=TIMEOUT)  # fmt: skip
    lines = subprocess.run(["vvp", str(program)], capture_output=True, text=True, timeout=TIMEOUT, check=True)
    expected = x @ weights.T
    printed = lines.stdout.split()
    if len(printed) != len(x):
        return False
    for r, line in enumerate(printed):
        for k, width in enumerate(widths):
            low = sum(widths[:k])  # the output's lowest bit; the line prints the highest first
            field = line[total - low - width : total - low]
            if not set(field) <= {"0", "1"}:
                return False  # an undefined bit
            value = int(field, 2) - ((1 << width) if keep[k] and field[0] == "1" else 0)
            if value != expected[r, k]:
                return False
    return True


def alkaid_layer(python: str, weights: np.ndarray, x: np.ndarray, directory: Path) -> dict[str, Any]:
    """alkaid's solution for the layer, checked by its predict and its Verilog under iverilog, then synthesized."""
    job = {"weights": weights.T.tolist(), "x": x.tolist(), "bits": BITS, "directory": str(directory)}
    done = subprocess.run([python, "-c", _ALKAID], input=json.dumps(job), capture_output=True, text=True,
                          timeout=TIMEOUT, check=True)  # fmt: skip
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    sources = [directory / "shift_adder.v", directory / "negative.v", directory / "dense.v"]
    row["rtl"] = alkaid_rtl(sources, directory, weights, x, row)
    for flow in FLOWS:
        row[flow] = synthesize(sources, "dense", flow)
    return row


def alkaid_missing(python: str) -> str | None:
    """Why alkaid cannot run in ``python`` (``None``: it can)."""
    try:
        done = subprocess.run([python, "-c", "import alkaid"], capture_output=True, text=True, timeout=120)
    except OSError as error:
        return f"{python} does not run ({error})"
    if done.returncode:
        return f"alkaid is not installed for {python} (python -m venv DIR; DIR/bin/pip install alkaid)"
    return None


def dense(python: str) -> list[dict[str, Any]]:
    missing = alkaid_missing(python)
    _print("integer dense layers, 4-bit codes and weights: LUTs (carry cells) under yosys")
    _print(f"  {'layer':<12} {'design':<8} {'exact':<6} {'RTL':<6} {'xilinx LUTs':>14} {'ice40 LUT4':>14}")
    if missing:
        _print(f"  alkaid skipped: {missing}")
    rows = []
    for name, inputs, outputs in LAYERS:
        weights, x = layer_weights(inputs, outputs), codes(inputs)
        with tempfile.TemporaryDirectory() as scratch:
            found = {"iotable": iotable_layer(weights, x, Path(scratch) / "iotable")}
            if not missing:
                (Path(scratch) / "alkaid").mkdir()
                found["alkaid"] = alkaid_layer(python, weights, x, Path(scratch) / "alkaid")
        for design, row in found.items():
            cells = [f"{row[f]['luts']} ({row[f]['carries']})" for f in FLOWS]
            _print(f"  {name:<12} {design:<8} {row['exact']!s:<6} {row['rtl']!s:<6} {cells[0]:>14} {cells[1]:>14}")
            rows.append({"layer": name, "design": design, **row})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--alkaid-python", default=sys.executable, help="a Python that can import alkaid")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    if shutil.which("yosys") is None:
        _print("skipped: yosys is not on PATH (Debian: apt-get install yosys)")
        return 0
    _print(f"{subprocess.run(['yosys', '-V'], capture_output=True, text=True, timeout=60).stdout.strip()}")
    rows = dense(args.alkaid_python)
    if args.json:
        args.json.write_text(json.dumps({"dense": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
