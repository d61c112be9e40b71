"""LogicNets, PolyLUT and NeuraLUT networks as their repositories write them (brevitas quantizers, neuron modules
with apply_input_quant / apply_output_quant flags, masks handed out by modules called with no arguments) come in
undecorated: ``verify`` 100%, and the exported Verilog simulates equal to ``net.run`` under iotable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("brevitas", reason='brevitas is not installed (pip install "iotable[brevitas]")')

import iotable
from iotable import Domain
from iotable.hdl import export, simulate
from tests import upstreamzoo as uz

INPUTS = Domain([-1.0, -0.5, 0.0, 0.5])
FEATURES = 6


def _inputs(n: int, seed: int) -> torch.Tensor:
    codes = torch.randint(0, len(INPUTS), (n, FEATURES), generator=torch.Generator().manual_seed(seed))
    return torch.tensor(INPUTS.values, dtype=torch.float32)[codes]


def _precompute(model: nn.Module) -> iotable.TableNetwork:
    return iotable.precompute(model, input_domain=INPUTS, example_input=torch.zeros(1, FEATURES))


def _check_family(model: nn.Module, tmp_path: Path) -> None:
    model = model.eval()
    net = _precompute(model)
    x = _inputs(2000, 1)
    assert iotable.verify(model, net, x).agreement == 1.0
    with torch.no_grad():
        assert torch.equal(net.run(x), model(x))
    design = export(net, tmp_path, top="net", vectors=16)
    y = _inputs(300, 2)
    assert torch.equal(simulate(design, y, simulator="iverilog", timeout=120), net.run(y, return_codes=True))


def test_logicnets_as_upstream_writes_it(tmp_path: Path) -> None:
    """LogicNets' SparseLinearNeq layers, whose SparseLinear calls its mask module with no arguments, tabulate."""
    _check_family(uz.LogicNetsModel(), tmp_path)
