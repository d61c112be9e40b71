"""A JSC-M-sized model as a QONNX file against the torch route: ``python -m benchmarks.qonnx`` (``--repeats N``,
``--json FILE``).

The model is jsc-m's shape written in brevitas (a 3-bit ``QuantIdentity`` on 16 inputs; four sparse
``QuantLinear`` layers of 64, 32, 32 and 32 neurons, each neuron reading 4 inputs through a LogicNets-style mask,
with batch norm and a 3-bit ``QuantReLU``; a last sparse layer of 5 outputs and a 3-bit ``QuantIdentity``:
130 tables of 4,096 rows), seeded, batch norm calibrated on random inputs. It is written once as QONNX by
brevitas' ``export_qonnx``, then timed side by side, medians of ``--repeats`` runs, torch on one thread:

- **QONNX**: ``iotable.precompute(path)``: the file read and checked, the graph walked, every row computed
  exactly by QONNX's semantics;
- **torch**: ``iotable.precompute(model)`` on the same brevitas module, with the masks declared
  (``iotable.decompose(layer, fan_in=...)``) as a user of the torch route writes them.

Both networks run 10,000 random inputs to the same codes before any time is reported. Their tables can differ
in size: the file's fan-ins are the weights' nonzeros after quantization (a weight that rounds to 0 leaves its
input out), the torch route's the declared masks.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

import iotable

from .measure import measure

WIDTHS, FAN_IN, BITS, FEATURES = (64, 32, 32, 32, 5), 4, 3, 16


def build() -> tuple[nn.Module, list[list[list[int]]]]:
    """The brevitas model and each layer's fan-ins (seeded)."""
    import brevitas.nn as qnn

    generator = torch.Generator().manual_seed(0)
    layers: list[nn.Module] = [qnn.QuantIdentity(bit_width=BITS, return_quant_tensor=False)]
    fan_ins, width = [], FEATURES
    for index, out in enumerate(WIDTHS):
        linear = qnn.QuantLinear(width, out, bias=True, weight_bit_width=4)
        chosen = [torch.randperm(width, generator=generator)[:FAN_IN].tolist() for _ in range(out)]
        mask = torch.zeros(out, width)
        for neuron, inputs in enumerate(chosen):
            mask[neuron, inputs] = 1
        with torch.no_grad():
            linear.weight.copy_(torch.randn(out, width, generator=generator) * mask)
        last = index == len(WIDTHS) - 1
        quant = qnn.QuantIdentity(bit_width=BITS) if last else qnn.QuantReLU(bit_width=BITS)
        layers += [linear, nn.BatchNorm1d(out), quant]
        fan_ins.append(chosen)
        width = out
    model = nn.Sequential(*layers)
    model.train()
    with torch.no_grad():
        for _ in range(10):
            model(torch.randn(256, FEATURES, generator=generator))
    return model.eval(), fan_ins


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.qonnx", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="runs per route, the median reported")
    parser.add_argument("--json", default=None, help="also write the row as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from brevitas.export import export_qonnx

    model, fan_ins = build()
    with tempfile.TemporaryDirectory(prefix="iotable-bench-qonnx-") as tmp:
        path = Path(tmp) / "jsc_m.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export_qonnx(model, torch.zeros(1, FEATURES), export_path=str(path))
        size = path.stat().st_size
        timed = measure(lambda: iotable.precompute(path), repeats=args.repeats)
        qonnx_s, from_file = timed.seconds, timed.result
    linears = [m for m in model if type(m).__name__ == "QuantLinear"]
    for linear, chosen in zip(linears, fan_ins):
        iotable.decompose(linear, fan_in=chosen)
    domain = from_file.input_node.domain  # the first quantizer's values, as the file gives them
    example = torch.zeros(1, FEATURES)
    timed = measure(
        lambda: iotable.precompute(model, input_domain=domain, example_input=example, progress=False),
        repeats=args.repeats,
    )
    torch_s, from_model = timed.seconds, timed.result
    codes = torch.randint(0, len(domain), (10_000, FEATURES), generator=torch.Generator().manual_seed(1))
    x = torch.tensor(domain.values, dtype=torch.float32)[codes]
    same = torch.equal(from_file.run(x), from_model.run(x))
    row = {
        "tables": len(from_file.tables), "rows": sum(len(t) for t in from_file.tables),
        "torch_rows": sum(len(t) for t in from_model.tables), "file_bytes": size,
        "qonnx_s": round(qonnx_s, 3), "torch_s": round(torch_s, 3), "ratio": round(qonnx_s / torch_s, 2),
        "same_tables": same,
    }  # fmt: skip
    print(
        f"jsc-m as QONNX ({size:,} bytes): {row['tables']} tables, {row['rows']:,} rows ({row['torch_rows']:,} by the "
        f"torch route); precompute from the file {qonnx_s:.2f} s, from the torch module {torch_s:.2f} s "
        f"({row['ratio']}x); the same outputs on 10,000 inputs: {same}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
