"""A brevitas model through QONNX: exported as the field's interchange format, read back as tables, then
hardware and plain ONNX, each checked.

1. A small brevitas MLP (2-bit activations and weights, a LogicNets-style sparse mask, a batch norm) is written
   as QONNX by brevitas' own ``export_qonnx``: the file other tools (FINN, hls4ml) read.
2. ``iotable.precompute(path)`` reads the file (as untrusted data: nothing in it is evaluated) and builds the
   table network; every row is computed exactly by QONNX's semantics. Fan-ins come from the weights' zeros.
3. ``iotable.verify(path, net, x)`` runs qonnx's own executor on the file and compares output codes.
4. The network becomes Verilog (``iotable.hdl.export``) and, where iverilog is installed, is simulated equal
   to ``net.run``.
5. ``iotable.export_onnx`` writes the table network as plain ONNX (a ``Gather`` per table layer, no custom
   operator), and onnxruntime runs it equal to ``net.run``.

Run it with ``python examples/qonnx_roundtrip.py`` (needs brevitas and the onnx extra:
``pip install -e ".[brevitas,onnx]"``; brevitas' exporter also needs ``onnxoptimizer``).
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import brevitas.nn as qnn
import numpy as np
import onnxruntime
import torch
from brevitas.export import export_qonnx
from torch import nn

import iotable
from iotable.hdl import export, simulate

FEATURES, HIDDEN, CLASSES = 8, 6, 3
#: Each hidden neuron reads these inputs, each output these hidden neurons (the rest of the weights are 0).
FAN_INS = ((0, 1, 2), (2, 3, 4), (4, 5, 6), (6, 7, 0), (1, 3, 5), (2, 4, 7))
OUT_FAN_INS = ((0, 1, 2), (2, 3, 4), (4, 5, 0))


class MLP(nn.Module):
    """2-bit input quantizer, sparse 2-bit QuantLinear, batch norm, 2-bit ReLU, sparse QuantLinear, 2-bit output."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = qnn.QuantIdentity(bit_width=2, return_quant_tensor=False)
        self.fc1 = qnn.QuantLinear(FEATURES, HIDDEN, bias=True, weight_bit_width=2)
        self.bn = nn.BatchNorm1d(HIDDEN)
        self.act = qnn.QuantReLU(bit_width=2, return_quant_tensor=False)
        self.fc2 = qnn.QuantLinear(HIDDEN, CLASSES, bias=True, weight_bit_width=2)
        self.out = qnn.QuantIdentity(bit_width=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.fc2(self.act(self.bn(self.fc1(self.inp(x))))))


def build_model() -> MLP:
    """The MLP with seeded weights of +-0.5 inside each neuron's fan-in and a calibrated batch norm."""
    torch.manual_seed(0)
    model = MLP()
    with torch.no_grad():
        for layer, fan_ins in ((model.fc1, FAN_INS), (model.fc2, OUT_FAN_INS)):
            mask = torch.zeros_like(layer.weight)
            for neuron, inputs in enumerate(fan_ins):
                mask[neuron, list(inputs)] = 1
            layer.weight.copy_(torch.sign(torch.randn_like(layer.weight)) * 0.5 * mask)
        model.train()
        for _ in range(20):  # batch-norm statistics from random inputs, as after training
            model(torch.rand(64, FEATURES) * 2 - 0.5)
    return model.eval()


def main() -> None:
    model = build_model()
    work = Path(tempfile.mkdtemp(prefix="iotable-qonnx-"))
    try:
        path = work / "mlp.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # brevitas' exporter warns about torch's tracer
            export_qonnx(model, torch.zeros(1, FEATURES), export_path=str(path))
        print(f"1. brevitas wrote {path.name} ({path.stat().st_size:,} bytes of QONNX)")

        net = iotable.precompute(path)
        last = list(net.layers.values())[-1]
        fan_ins = [len(table.input_domains) for table in last.tables]
        print(f"2. read back: {len(net.layers)} table layers, {len(net.tables)} tables; the output neurons read "
              f"{fan_ins} codes each (the weights' nonzeros)")  # fmt: skip

        domain = net.input_node.domain  # the first quantizer's values: the table network's input
        print(f"   input domain (from the file's first Quant): {domain}")
        codes = torch.randint(0, len(domain), (2000, FEATURES), generator=torch.Generator().manual_seed(0))
        x = torch.tensor(domain.values, dtype=torch.float32)[codes]
        report = iotable.verify(path, net, x)
        print(f"3. against qonnx's executor: {report.agreement:.1%} of {len(x)} inputs agree")
        assert report.agreement == 1.0

        design = export(net, work / "hdl", top="mlp", vectors=64)
        print(f"4. Verilog: {len(design.sources)} source files, latency {design.latency} cycles")
        if shutil.which("iverilog"):
            sample = x[:200]
            equal = torch.equal(simulate(design, sample, codes=False), design.reference(sample))
            print(f"   iverilog on {len(sample)} inputs: {'equal to net.run' if equal else 'DIFFERS'}")
            assert equal
        else:
            print("   iverilog not installed: simulation skipped (apt-get install iverilog)")

        onnx_path = work / "tables.onnx"
        iotable.export_onnx(net, onnx_path)
        session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        got = session.run(None, {name: x.numpy().astype(np.float32)})[0]
        equal = np.array_equal(got, net.run(x).numpy())
        print(f"5. plain ONNX ({onnx_path.stat().st_size:,} bytes) under onnxruntime: "
              f"{'equal to net.run' if equal else 'DIFFERS'} on {len(x)} inputs")  # fmt: skip
        assert equal
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
