"""Output domains from the tables: a layer of the user's own that no quantizer follows (torch-dwn's LUT layers,
difflogic's gate layers) takes as its output domain the values its exhaustive tables hold, so DWN and DiffLogic
models come in undecorated, their ``GroupSum`` a sum node; too many values, or values that are not finite, are
refused by the layer's name before any later layer is enumerated."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, NodeKind
from iotable.errors import ModelError
from iotable.network import network
from tests import upstreamzoo as uz

from .optional import require_program

BITS = Domain([0.0, 1.0])
FEATURES = 24
FAMILIES = {"dwn": uz.dwn_model, "difflogic": uz.difflogic_model}
LIMIT = 256  # iotable.tabulate.outputs.MAX_TABLE_VALUES


def _bits(n: int, seed: int, features: int = FEATURES) -> torch.Tensor:
    return torch.randint(0, 2, (n, features), generator=torch.Generator().manual_seed(seed)).float()


def _precompute(model: nn.Module, domain: Domain = BITS, features: int = FEATURES) -> iotable.TableNetwork:
    return iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, features))


def _check_rows(model: nn.Sequential, net: iotable.TableNetwork, layer: int) -> None:
    """Every row of every table of ``model[layer]`` equals the layer's own output for that row's inputs (the other
    inputs at random bits)."""
    tables = net[str(layer)]
    plan = tables.plan
    generator = torch.Generator().manual_seed(3)
    for unit, table in zip(plan.units, tables):
        x = torch.randint(0, 2, (table.rows, plan.in_channels), generator=generator).float()
        rows = np.stack([d.decode(table.inputs[:, j]) for j, d in enumerate(plan.unit_domains(unit))], 1)
        x[:, list(unit.in_channels)] = torch.tensor(rows, dtype=torch.float32)
        with torch.no_grad():
            expected = model[layer](x)[:, list(unit.out_channels)].numpy()
        assert np.array_equal(table.output_values(), expected), (layer, unit.index)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_dwn_and_difflogic_as_upstream_write_them(name: str) -> None:
    """torch-dwn's and difflogic's models precompute with no decoration: each layer's output domain is {0, 1} from
    its tables, every row is the layer's own output, GroupSum is a sum node, and the network is the model bit for
    bit."""
    model = FAMILIES[name]().eval()
    net = _precompute(model)
    for layer in ("0", "1"):
        assert net[layer].plan.output_domain == BITS
        assert net[layer].plan.spec.source.endswith("output domain: the values of its tables")
        _check_rows(model, net, int(layer))
    assert [n.kind for n in net.graph.nodes][-2:] == [NodeKind.SUM, NodeKind.OUTPUT]
    assert not net.graph.nodes_of(NodeKind.HOST)
    x = _bits(2000, 1)
    assert iotable.verify(model, net, x).agreement == 1.0
    with torch.no_grad():
        assert torch.equal(net.run(x), model(x))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_dwn_and_difflogic_verilog_simulates_equal(name: str, tmp_path: Path) -> None:
    """The exported Verilog of an undecorated DWN or DiffLogic model simulates equal to ``net.run`` under iverilog
    on 300 vectors."""
    from iotable.hdl import export, simulate

    require_program("iverilog", package="iverilog")
    net = _precompute(FAMILIES[name]().eval())
    design = export(net, tmp_path, top="net", vectors=16)
    x = _bits(300, 2)
    assert torch.equal(simulate(design, x, simulator="iverilog", timeout=120), net.run(x, return_codes=True))


def test_domains_from_tables_survive_a_bundle(tmp_path: Path) -> None:
    """An undecorated DWN, whose domains came from its tables, saves and loads to the same domains and outputs."""
    model = uz.dwn_model().eval()
    net = _precompute(model)
    loaded = iotable.load(iotable.save(net, tmp_path / "net"))
    assert [n.domain for n in loaded.graph.nodes] == [n.domain for n in net.graph.nodes]
    x = _bits(500, 6)
    assert torch.equal(loaded.run(x), net.run(x))


def _flip_lut_entry(model: nn.Sequential, x: torch.Tensor) -> None:
    """Negate the entry of the last LUT layer's node 0 that the first sample of ``x`` reads: its bit flips."""
    layer = model[1]
    with torch.no_grad():
        hidden = model[0](x[:1])
        bits = hidden[:, layer.mapping].view(1, layer.output_size, layer.n)[0, 0]
        address = int((bits * 2 ** torch.arange(layer.n)).sum())
        layer.luts[0, address] = -layer.luts[0, address]


def _flip_gate(model: nn.Sequential, x: torch.Tensor) -> None:
    """Give the last gate layer's neuron 0 the gate that is the negation of its own: its output flips."""
    layer = model[1]
    with torch.no_grad():
        gate = int(layer.weights[0].argmax())
        layer.weights[0, 15 - gate] = layer.weights[0].max() + 1  # gate 15 - g is the negation of gate g


@pytest.mark.parametrize(("name", "tamper"), [("dwn", _flip_lut_entry), ("difflogic", _flip_gate)])
def test_a_flipped_entry_fails_verify_and_the_next_precompute_follows_it(name: str, tamper: Callable) -> None:
    """Tamper: a flipped LUT entry or gate makes the module differ from the network built before, which verify
    reports; a new precompute follows the change and agrees again."""
    model = FAMILIES[name]().eval()
    net = _precompute(model)
    x = _bits(2000, 1)
    assert iotable.verify(model, net, x).agreement == 1.0
    tamper(model, x)
    assert iotable.verify(model, net, x).agreement < 1.0
    assert iotable.verify(model, _precompute(model), x).agreement == 1.0


def test_a_changed_mapping_index_fails_verify() -> None:
    """Tamper: a DWN node's mapping index moved to another input after precompute changes what the module
    computes, and verify compares the old network with the changed module."""
    model = uz.dwn_model().eval()
    net = _precompute(model)
    x = _bits(2000, 1)
    with torch.no_grad():
        before = model(x)
        for other in range(FEATURES):  # the first input that changes some output on these samples
            model[0].mapping[0] = other
            if not torch.equal(model(x), before):
                break
    assert not torch.equal(model(x), before)
    assert iotable.verify(model, net, x).agreement < 1.0
    assert iotable.verify(model, _precompute(model), x).agreement == 1.0


class Weighted(nn.Module):
    """Each output the weighted sum of its own ``width`` inputs, gathered by an index buffer (weights in a buffer):
    as many distinct values as the weights make."""

    def __init__(self, outputs: int, width: int) -> None:
        super().__init__()
        self.register_buffer("index", torch.arange(outputs * width).view(outputs, width))
        self.register_buffer("weights", 2.0 ** torch.arange(width, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x[:, self.index] * self.weights).sum(-1)


class Pick(nn.Module):
    """Output ``j`` is input ``index[j]``, negatives set to 0: a layer of fan-in one."""

    def __init__(self, inputs: int) -> None:
        super().__init__()
        self.register_buffer("index", torch.arange(inputs).flip(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x[:, self.index], min=0.0)


def test_at_most_256_values_become_the_domain() -> None:
    """A unit whose table holds exactly 256 distinct values (8 bits weighted by powers of two) gives the next layer
    those 256 values as codes, exactly."""
    model = nn.Sequential(Weighted(2, 8), Pick(2)).eval()
    net = _precompute(model, features=16)
    assert net["0"].plan.output_domain == Domain([float(v) for v in range(LIMIT)])
    x = _bits(500, 4, features=16)
    assert iotable.verify(model, net, x).agreement == 1.0


def test_more_values_than_the_limit_are_refused_before_later_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tamper: one more bit (512 distinct values) is refused by the layer's name with the count and the limit,
    while planning: only that layer's tables were built, and no layer was enumerated."""
    from iotable.tabulate import outputs

    assert outputs.MAX_TABLE_VALUES == LIMIT
    tabulated: list[str] = []
    real = outputs.tabulate

    def recording(module: nn.Module, plan: object, **options: object) -> object:
        tabulated.append(plan.name)  # type: ignore[attr-defined]
        return real(module, plan, **options)  # type: ignore[arg-type]

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a layer was enumerated")

    monkeypatch.setattr(outputs, "tabulate", recording)
    monkeypatch.setattr(network, "tabulate_layers", never)
    model = nn.Sequential(Weighted(2, 9), Pick(2)).eval()
    with pytest.raises(ModelError, match=r"^0: no quantizer follows.*at most 256 distinct values, found 512") as e:
        _precompute(model, features=18)
    assert "put a quantizer" in str(e.value) and "output_domain=" in str(e.value)
    assert tabulated == ["0"]


class InlineBiasScale(nn.Module):
    """A quantizer, then ``(q + 0.25) * 0.75`` written in the forward, then a GroupSum of two groups."""

    def __init__(self) -> None:
        super().__init__()
        from iotable.nn import Quantize

        self.q = Quantize(2, scale=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (self.q(x) + 0.25) * 0.75
        return y.view(y.shape[0], 2, -1).sum(-1)


def _bias_scale_module() -> nn.Module:
    from iotable.nn import Quantize

    return nn.Sequential(Quantize(2, scale=0.5), uz.ScalarBiasScale(scale_init=0.75, bias_init=0.25), uz.GroupSum(2))


@pytest.mark.parametrize("build", [_bias_scale_module, InlineBiasScale], ids=["module", "inline"])
def test_a_bias_and_scale_after_a_quantizer_give_codes_to_a_sum(build: Callable[[], nn.Module]) -> None:
    """A scalar bias and scale after a quantizer (LogicNets' post-transform as a module, or written in the
    forward), read by a GroupSum: the table's four values become its domain, the GroupSum a sum node, and the
    network is exact."""
    model = build().eval()
    net = _precompute(model, domain=Domain.uniform(2, scale=0.5), features=6)
    assert [n.kind for n in net.graph.nodes][-2:] == [NodeKind.SUM, NodeKind.OUTPUT]
    (table,) = [layer for layer in net.layers.values() if layer.plan.output_domain != Domain.uniform(2, scale=0.5)]
    assert table.plan.output_domain == Domain([0.1875, 0.5625, 0.9375, 1.3125])  # (q + 0.25) * 0.75
    x = torch.tensor([0.0, 0.5, 1.0, 1.5])[torch.randint(0, 4, (300, 6), generator=torch.Generator().manual_seed(7))]
    assert iotable.verify(model, net, x).agreement == 1.0


def test_elementwise_modules_before_a_layer_still_join_its_table() -> None:
    """A batch norm between a quantizer and a Linear is part of the Linear's table, not a table of its own."""
    from iotable.nn import Quantize

    u2 = Domain.uniform(2, scale=0.5)
    model = nn.Sequential(Quantize(2, scale=0.5), nn.BatchNorm1d(4), nn.Linear(4, 2), Quantize(2, scale=0.5)).eval()
    net = _precompute(model, domain=u2, features=4)
    assert list(net.layers) == ["2"]
    assert iotable.verify(model, net, torch.tensor(u2.values, dtype=torch.float32)[torch.randint(0, 4, (64, 4))]).ok


class Reciprocal(nn.Module):
    """``scale / x`` per input: infinite where an input is 0."""

    def __init__(self, inputs: int) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(inputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale / x


def test_values_that_are_not_finite_are_refused() -> None:
    """Tamper: a layer whose table holds inf (1 / 0) is refused by name: no code can stand for it."""
    model = nn.Sequential(Reciprocal(2), Pick(2)).eval()
    with pytest.raises(ModelError, match=r"^0: unit 0's table holds the value inf.*put a quantizer after 0"):
        _precompute(model, features=2)


@pytest.mark.parametrize("declared", [False, True], ids=["inferred", "declared"])
def test_the_domain_follows_changed_weights(declared: bool) -> None:
    """A domain taken from the tables is made again when the layer's tensors change (the structure is reused), for
    units inferred or declared (``decompose(fan_in=...)`` with no output domain): doubled weights give the doubled
    values, and verify agrees."""
    model = nn.Sequential(Weighted(2, 3), Pick(2)).eval()
    if declared:
        iotable.decompose(model[0], fan_in=[[0, 1, 2], [3, 4, 5]])
    first = _precompute(model, features=6)
    assert first["0"].plan.output_domain == Domain([float(v) for v in range(8)])
    model[0].weights.mul_(2)
    second = _precompute(model, features=6)
    assert second["0"].plan.output_domain == Domain([float(2 * v) for v in range(8)])
    assert iotable.verify(model, second, _bits(200, 5, features=6)).agreement == 1.0


def test_a_torch_layer_with_no_quantizer_after_it_is_still_refused() -> None:
    """torch's own layers give floats that want a quantizer: two Linears in a row keep the refusal naming both."""
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    with pytest.raises(ModelError, match=r"0 and 1 sit between the same pair of quantizers"):
        _precompute(copy.deepcopy(model), features=3)
