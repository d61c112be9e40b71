"""The model's input quantizer is the design's input format: no identity table layer where it maps the input
domain onto itself code for code; a quantizer that changes codes stays a table layer."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
from torch import nn

import iotable
import iotable.network.network
from iotable import Domain, IOTable, load, precompute, save, verify
from iotable.hdl import export, simulate
from iotable.network.inputformat import input_format
from iotable.nn import Quantize
from tests.optional import require_program

D2 = Domain.uniform(2, scale=0.5)
DATA = Path(__file__).resolve().parent / "data"


def sparse(n_in: int, n_out: int, seed: int) -> nn.Linear:
    """A Linear of fan-in 3, masked and declared so."""
    gen = torch.Generator().manual_seed(seed)
    layer = nn.Linear(n_in, n_out)
    reads = [sorted(torch.randperm(n_in, generator=gen)[:3].tolist()) for _ in range(n_out)]
    with torch.no_grad():
        mask = torch.zeros(n_out, n_in)
        for k, idx in enumerate(reads):
            mask[k, idx] = 1
        layer.weight.mul_(mask)
    return iotable.decompose(layer, fan_in=reads)


def mlp(q_in: nn.Module) -> nn.Sequential:
    """``q_in`` on 8 inputs, then two sparse layers of 2-bit codes."""
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            q_in=q_in, fc1=sparse(8, 6, 1), q1=Quantize(2, scale=0.5), fc2=sparse(6, 4, 2), q2=Quantize(2, scale=0.5)
        )
    ).eval()


def samples(domain: Domain, shape: tuple[int, ...], n: int = 200) -> torch.Tensor:
    codes = torch.randint(0, len(domain), (n, *shape), generator=torch.Generator().manual_seed(7))
    return torch.tensor(domain.values, dtype=torch.float32)[codes]


def test_identity_input_quantizer_makes_no_table_layer():
    """An input quantizer equal to the input domain makes no layer; the network's input domain is its domain."""
    model = mlp(Quantize(2, scale=0.5))
    net = precompute(model, input_domain=D2, example_input=torch.zeros(1, 8))
    assert list(net.layers) == ["fc1", "fc2"]
    assert [n.kind.value for n in net.graph] == ["input", "table", "table", "output"]
    assert net.input_node.domain == model.q_in.domain and net.graph.inputs("fc1") == ("input",)
    assert "2 table layers" in repr(net) and "q_in" not in net.summary()
    assert [layer.name for layer in iotable.estimate(model, input_domain=D2).layers] == ["fc1", "fc2"]
    x = samples(D2, (8,))
    report = verify(model, net, x)
    assert report.ok and report.agreement == 1.0
    with torch.no_grad():
        assert torch.equal(net.run(x), model(x))


def test_a_quantizer_to_fewer_bits_stays_a_table_layer():
    """An input quantizer that requantizes to fewer bits changes codes: it stays a table layer, exact."""
    model = mlp(Quantize(1, scale=0.5))
    net = precompute(model, input_domain=D2, example_input=torch.zeros(1, 8))
    assert list(net.layers) == ["q_in", "fc1", "fc2"]
    assert net.input_node.domain == D2
    assert verify(model, net, samples(D2, (8,))).ok


def test_a_quantizer_of_another_scale_stays_a_table_layer():
    """An input quantizer of as many bits on another grid is not the identity: it stays a table layer."""
    model = mlp(Quantize(2, scale=0.25))
    net = precompute(model, input_domain=D2, example_input=torch.zeros(1, 8))
    assert list(net.layers) == ["q_in", "fc1", "fc2"]
    assert verify(model, net, samples(D2, (8,))).ok


def test_a_tampered_identity_table_keeps_its_layer(monkeypatch):
    """The check reads every table: the same layer with one row of one table changed is kept."""
    monkeypatch.setattr(iotable.network.network, "input_format", lambda graph, layers: (graph, layers))
    net = precompute(mlp(Quantize(2, scale=0.5)), input_domain=D2, example_input=torch.zeros(1, 8))
    assert list(net.layers) == ["q_in", "fc1", "fc2"]  # the layer as it is before the pass
    graph, layers = input_format(net.graph, dict(net.layers))
    assert list(layers) == ["fc1", "fc2"] and "q_in" not in graph
    tables = list(net["q_in"].tables)
    outputs = tables[5].outputs.copy()
    outputs[1, 0] = 2  # code 1 -> code 2: no longer the identity
    t = tables[5]
    tables[5] = IOTable(t.inputs, outputs, input_domains=t.input_domains, output_domain=t.output_domain)
    tampered = dict(net.layers) | {"q_in": dataclasses.replace(net["q_in"], tables=tuple(tables))}
    assert input_format(net.graph, tampered) == (net.graph, tampered)


def test_spatial_input_quantizer_makes_no_window_or_table():
    """A convolution's input quantizer: no window of one tap and no table before the first layer; verify 100%."""
    torch.manual_seed(1)
    model = nn.Sequential(
        OrderedDict(
            q_in=Quantize(2, scale=0.5), conv=nn.Conv2d(2, 2, 2, groups=2), q1=Quantize(2, scale=0.5)
        )
    ).eval()  # fmt: skip
    net = precompute(model, input_domain=D2, example_input=torch.zeros(1, 2, 5, 5))
    assert list(net.layers) == ["conv"]
    assert [n.kind.value for n in net.graph] == ["input", "window", "table", "output"]
    x = samples(D2, (2, 5, 5))
    assert verify(model, net, x).ok


def test_export_is_one_cycle_shorter_and_simulates_equal_to_net_run(tmp_path: Path):
    """The exported design has one pipeline stage fewer than with a real input layer, and iverilog gives net.run's
    codes."""
    require_program("iverilog", package="iverilog")
    identity = precompute(mlp(Quantize(2, scale=0.5)), input_domain=D2, example_input=torch.zeros(1, 8))
    requantized = precompute(mlp(Quantize(1, scale=0.5)), input_domain=D2, example_input=torch.zeros(1, 8))
    design = export(identity, tmp_path / "identity", top="mlp", vectors=4)
    other = export(requantized, tmp_path / "requantized", top="mlp", vectors=4)
    assert (design.latency, other.latency) == (2, 3)
    assert [r.node for r in design.layers] == ["fc1", "fc2"] and design.inputs.width == 16
    x = samples(D2, (8,), n=30)
    assert torch.equal(simulate(design, x), identity.run(x, return_codes=True))


def test_bundle_round_trip_and_older_bundles_with_the_layer_load(tmp_path: Path):
    """A network without the identity layer saves and loads; a bundle saved with one (older versions) still runs."""
    model = mlp(Quantize(2, scale=0.5))
    net = precompute(model, input_domain=D2, example_input=torch.zeros(1, 8))
    again = load(save(net, tmp_path / "net.bundle"))
    x = samples(D2, (8,))
    assert list(again.layers) == ["fc1", "fc2"] and torch.equal(again.run(x), net.run(x))
    old = load(DATA / "format1_padded.bundle", host_modules={"8": nn.Linear(70, 3)})
    assert "0" in old.layers  # its input quantizer's identity tables, as that version made them
    inputs = torch.from_numpy(np.load(DATA / "format1_padded.inputs.npy"))
    assert torch.equal(old.run(inputs), torch.from_numpy(np.load(DATA / "format1_padded.outputs.npy")))
