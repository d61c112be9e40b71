"""Layers too large for one table become exact arithmetic: partial-sum tables, a sum node (an adder tree) and a
threshold node, chosen from the LUT estimates before any row; refused by name where the float32 sums may round."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, NodeKind
from iotable.errors import TableTooLargeError
from iotable.nn import Quantize

D2 = Domain.uniform(2, scale=0.5)


def dyadic_linear(inputs: int = 64, outputs: int = 6, seed: int = 0) -> nn.Sequential:
    """A linear layer with weights in eighths and a bias in quarters, then a 3-bit quantizer."""
    generator = torch.Generator().manual_seed(seed)
    linear = nn.Linear(inputs, outputs)
    with torch.no_grad():
        linear.weight.copy_(torch.randint(-7, 8, (outputs, inputs), generator=generator).float() / 8)
        linear.bias.copy_(torch.randint(-8, 8, (outputs,), generator=generator).float() / 4)
    return nn.Sequential(linear, Quantize(3, scale=1.0, signed=True)).eval()


def samples(domain: Domain, features: int, n: int = 3000, seed: int = 0) -> torch.Tensor:
    index = torch.randint(0, len(domain), (n, features), generator=torch.Generator().manual_seed(seed))
    return torch.tensor(domain.values, dtype=torch.float32)[index]


@pytest.fixture(scope="module")
def split_net() -> tuple[nn.Module, iotable.TableNetwork]:
    model = dyadic_linear()
    return model, iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 64))


def test_a_wide_linear_layer_becomes_partial_sums_an_adder_and_thresholds(split_net) -> None:  # type: ignore[no-untyped-def]
    model, net = split_net
    kinds = [n.kind for n in net.graph.nodes]
    assert kinds.count(NodeKind.SUM) == 1 and kinds.count(NodeKind.THRESHOLD) == 1
    total = net.graph.nodes_of(NodeKind.SUM)[0]
    assert "exact" in total.meta.exact
    assert iotable.verify(model, net, samples(D2, 64)).agreement == 1.0
    # the extremes: every input at its lowest and at its highest value
    x = torch.tensor([[D2.values[0]] * 64, [D2.values[-1]] * 64], dtype=torch.float32)
    assert torch.equal(net.run(x), model(x))


def test_the_threshold_node_is_read(split_net, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Tamper: one threshold moved changes what the network computes on some input (caught by verify)."""
    model, net = split_net
    node = net.graph.nodes_of(NodeKind.THRESHOLD)[0]
    thresholds = node.meta.thresholds.copy()
    thresholds[0, 0] += 1
    bad = dataclasses.replace(node, meta=dataclasses.replace(node.meta, thresholds=thresholds))
    tampered = dataclasses.replace(net, graph=net.graph.replace(bad))
    x = samples(D2, 64, n=20000, seed=3)
    assert iotable.verify(model, tampered, x).agreement < 1.0
    loaded = iotable.load(iotable.save(net, tmp_path / "net"))
    assert torch.equal(loaded.run(x[:500]), net.run(x[:500]))


def test_brevitas_fixed_point_quant_linear_is_split_exactly() -> None:
    qnn = pytest.importorskip("brevitas.nn")
    bq = pytest.importorskip("brevitas.quant")
    torch.manual_seed(0)
    model = nn.Sequential(
        qnn.QuantIdentity(act_quant=bq.Uint8ActPerTensorFixedPoint, bit_width=2),
        qnn.QuantLinear(64, 8, bias=False, weight_quant=bq.Int8WeightPerTensorFixedPoint, weight_bit_width=3),
        qnn.QuantIdentity(act_quant=bq.Int8ActPerTensorFixedPoint, bit_width=3),
    ).eval()
    domain = Domain.uniform(6, scale=1 / 32)
    net = iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, 64))
    kinds = [n.kind for n in net.graph.nodes]
    assert NodeKind.SUM in kinds and NodeKind.THRESHOLD in kinds and NodeKind.HOST not in kinds
    assert iotable.verify(model, net, samples(domain, 64)).agreement == 1.0
    # the same layer with brevitas' default float-scaled weights: its sums round, refused by name
    model[1] = qnn.QuantLinear(64, 8, bias=False, weight_bit_width=3)
    model.eval()
    with pytest.raises(TableTooLargeError, match=r"1 \(QuantLinear\): its float32 sums may round"):
        iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, 64))


def test_weights_off_a_power_of_two_grid_are_refused_by_name() -> None:
    model = nn.Sequential(nn.Linear(64, 4), Quantize(3, signed=True)).eval()
    with pytest.raises(TableTooLargeError, match=r"0 \(Linear\): its float32 sums may round.*power-of-two") as caught:
        iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 64))
    assert "host=" in str(caught.value)


def test_the_split_is_chosen_by_estimate() -> None:
    """Sparse rows: the partial sums group only the weights that are not zero; the form chosen costs less than
    folding every weight into the adder."""
    from iotable.graph.fields import element_domains
    from iotable.network.split import linear_split

    model = dyadic_linear(inputs=48, outputs=4, seed=2)
    with torch.no_grad():
        model[0].weight[:, ::2] = 0
    net = iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 48))
    source = net.graph["input"]
    split = linear_split("0", model[0], source, "0 (Linear)")
    assert element_domains(source) == (D2,)
    assert split.estimate < split.table_estimate
    assert iotable.verify(model, net, samples(D2, 48)).agreement == 1.0
    assert np.all(net.graph.nodes_of(NodeKind.SUM)[0].meta.index_map.shape[1] <= 24)


def kanele_wine() -> nn.Sequential:
    """KANELÉ's Wine configuration [13, 4, 3]: 6-bit inputs, 8-bit fixed-point edges, a 6-bit requantizer."""
    from tests import fieldzoo as zoo

    torch.manual_seed(0)
    return nn.Sequential(
        zoo.QuantKANLayer(13, 4), Quantize(6, scale=1 / 8, signed=True), zoo.QuantKANLayer(4, 3, seed=1)
    ).eval()


def test_kanele_wine_becomes_edge_tables_and_adders() -> None:
    """A 13-input neuron of 6-bit inputs is a 78-bit table; as 13 edge tables and an adder tree it is exact."""
    from iotable.lutcount import lut_estimate

    u6 = Domain.uniform(6, scale=1 / 64)
    model = kanele_wine()
    net = iotable.precompute(model, input_domain=u6, example_input=torch.zeros(1, 13))
    sums = net.graph.nodes_of(NodeKind.SUM)
    assert len(sums) == 2 and not net.graph.nodes_of(NodeKind.HOST)
    assert sums[0].meta.index_map.shape == (4, 13)  # per neuron, its 13 edges (pruned ones padded)
    assert iotable.verify(model, net, samples(u6, 13)).agreement == 1.0
    hybrid = sum(int(lut_estimate(6, 8)) for _ in range(int((sums[0].meta.index_map >= 0).sum())))
    assert hybrid < 4 * 6 * 2 ** (78 - 4) // 3  # against one 78-bit table per neuron


def test_unquantized_edges_are_refused_with_the_reason() -> None:
    """KAN edges left in float have no grid: no exact sum, and one table per neuron is too large."""
    from tests import fieldzoo as zoo

    model = nn.Sequential(zoo.KANLayer(13, 2, keep=1.0), Quantize(3, signed=True)).eval()
    u6 = Domain.uniform(6, scale=1 / 64)
    with pytest.raises(TableTooLargeError, match=r"KANLayer.*power-of-two grid.*fixed point"):
        iotable.precompute(model, input_domain=u6, example_input=torch.zeros(1, 13))


def test_trained_weights_are_followed() -> None:
    """The sum's weights come from the layer's: new weights (same structure) re-plan; never a stale adder."""
    model = dyadic_linear(inputs=64, outputs=4, seed=5)
    first = iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 64))
    with torch.no_grad():
        model[0].weight.mul_(-1)
    second = iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 64))
    x = samples(D2, 64)
    assert iotable.verify(model, second, x).agreement == 1.0
    assert not torch.equal(first.run(x), second.run(x))
